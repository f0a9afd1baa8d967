"""A simulated KIP-848 client for the sans-io consumer group tests: it heartbeats like librdkafka
(full request on join, owned partitions on every heartbeat), revokes what an assignment leaves
out at once and takes what it adds, and starts over on a fencing error."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from oncestream.coordinator.group import GroupCoordinator, OffsetsTopicWrite
from oncestream.coordinator.group.consumer.messages import ConsumerHeartbeatRequest, ConsumerHeartbeatResult

REBALANCE_TIMEOUT_MS = 300_000
_FENCED = (ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id)


@dataclass
class SimClient:
    """One consumer of a consumer group."""

    coordinator: GroupCoordinator
    group_id: str
    topics: tuple[str, ...] = ()
    regex: str | None = None
    instance_id: str | None = None
    assignor: str | None = None
    member_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    epoch: int = 0
    owned: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    last: ConsumerHeartbeatResult | None = None
    # Where the records the coordinator returns are appended (None: dropped), for replay checks.
    log: list[tuple[bytes, bytes | None]] | None = None

    def heartbeat(self, now_ms: int) -> ConsumerHeartbeatResult:
        joining = self.epoch == 0
        request = ConsumerHeartbeatRequest(
            group_id=self.group_id, member_id=self.member_id, member_epoch=self.epoch,
            instance_id=self.instance_id,
            rebalance_timeout_ms=REBALANCE_TIMEOUT_MS if joining else -1,
            subscribed_topic_names=self.topics if joining else None,
            subscribed_topic_regex=self.regex if joining else None,
            server_assignor=self.assignor if joining else None,
            owned=dict(self.owned))
        result, writes = self.coordinator.consumer_group_heartbeat(request, now_ms)
        self._keep(writes)
        self.last = result
        if result.error in _FENCED:
            self.epoch, self.owned = 0, {}
        elif result.error == ErrorCode.none:
            self.epoch = result.member_epoch
            if result.assignment is not None:
                self.owned = {t: frozenset(ps) for t, ps in result.assignment.items() if ps}
        return result

    def leave(self, now_ms: int, *, static: bool = False) -> ConsumerHeartbeatResult:
        request = ConsumerHeartbeatRequest(self.group_id, self.member_id, -2 if static else -1,
                                           instance_id=self.instance_id)
        result, writes = self.coordinator.consumer_group_heartbeat(request, now_ms)
        self._keep(writes)
        self.owned, self.epoch = {}, 0
        return result

    def _keep(self, writes: list[OffsetsTopicWrite]) -> None:
        if self.log is not None:
            for write in writes:
                self.log.extend(write.records)

    def partitions(self) -> set[tuple[uuid.UUID, int]]:
        return {(t, p) for t, ps in self.owned.items() for p in ps}
