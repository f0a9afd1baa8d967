"""KIP-848 consumer-group membership (``group.protocol=consumer``) as a sans-io state machine.

The coordinator computes assignments; the member heartbeats (ConsumerGroupHeartbeat) at the
interval the coordinator returns, reconciles towards the target assignment it is handed
(revoking first, then adding: only the partitions that changed) and acknowledges by sending its
owned partitions in the next heartbeat. Fenced (FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID), the
member gives up everything it owns (``on_lost``) and rejoins with epoch 0 under the same member
id. This module knows no sockets, threads or clocks: the I/O glue
(:mod:`oncestream.client.consumer.consumer_group_member`) asks it what to send and when
(:meth:`ConsumerMembership.heartbeat_delay_ms`, :meth:`ConsumerMembership.build_heartbeat`), feeds
it what came back (:meth:`ConsumerMembership.on_heartbeat_response`,
:meth:`ConsumerMembership.on_heartbeat_failure`), and the consumer's poll runs the rebalance
callbacks a :class:`Reconciliation` asks for.

The states and their legal predecessors follow Kafka's ``MemberState`` (see ``_ALLOWED_FROM``);
an illegal transition raises :class:`IllegalMemberTransition` where it happens. What a heartbeat
carries follows Kafka's consumer heartbeat rules: everything when joining (epoch 0) or after a
failed heartbeat; afterwards only the fields that changed since the last one sent (null means
unchanged), the owned partitions in particular only when the member's assignment changed.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

JOIN_EPOCH = 0
LEAVE_EPOCH = -1  # a dynamic member leaves
LEAVE_STATIC_EPOCH = -2  # a static member leaves for now: its instance id keeps the assignment

TopicIdPartition = tuple[uuid.UUID, int]
TopicPartitionName = tuple[str, int]


class MemberState(enum.Enum):
    """Where a member is in its group (Kafka's MemberState)."""

    UNSUBSCRIBED = "unsubscribed"  # not in the group: no subscription, or it left
    JOINING = "joining"  # sends epoch 0 and waits for the first assignment
    RECONCILING = "reconciling"  # a target assignment differs from what it owns: callbacks to run
    ACKNOWLEDGING = "acknowledging"  # reconciled: the next heartbeat (sent at once) says what it owns
    STABLE = "stable"  # owns its target assignment; heartbeats at the interval
    FENCED = "fenced"  # the coordinator dropped it: release everything (on_lost), then rejoin
    PREPARE_LEAVING = "prepare_leaving"  # leaving: revocation callbacks to run first
    LEAVING = "leaving"  # the leave heartbeat (epoch -1, or -2 for a static member) is due
    STALE = "stale"  # max.poll.interval.ms passed without a poll: it left; rejoins on the next poll
    FATAL = "fatal"  # an error no retry mends (a fenced instance id, an unsupported assignor, ...)


S = MemberState

# state -> the states it may be entered from (Kafka's MemberState.previousValidStates).
_ALLOWED_FROM: dict[MemberState, frozenset[MemberState]] = {
    S.UNSUBSCRIBED: frozenset({S.PREPARE_LEAVING, S.LEAVING, S.FENCED, S.STALE}),
    S.JOINING: frozenset({S.UNSUBSCRIBED, S.FENCED, S.STALE}),
    S.RECONCILING: frozenset({S.JOINING, S.STABLE, S.ACKNOWLEDGING, S.RECONCILING}),
    S.ACKNOWLEDGING: frozenset({S.RECONCILING}),
    S.STABLE: frozenset({S.JOINING, S.ACKNOWLEDGING, S.RECONCILING}),
    S.FENCED: frozenset({S.JOINING, S.RECONCILING, S.ACKNOWLEDGING, S.STABLE}),
    S.PREPARE_LEAVING: frozenset({S.JOINING, S.RECONCILING, S.ACKNOWLEDGING, S.STABLE}),
    S.LEAVING: frozenset({S.PREPARE_LEAVING}),
    S.STALE: frozenset({S.JOINING, S.RECONCILING, S.ACKNOWLEDGING, S.STABLE}),
    S.FATAL: frozenset(MemberState),
}

# States in which the member is part of the group and heartbeats on its interval.
_IN_GROUP = frozenset({S.JOINING, S.RECONCILING, S.ACKNOWLEDGING, S.STABLE})
# ... and the states that heartbeat at all: the member's on_revoke before leaving may take a
# while (a final commit), and the group must not expire it meanwhile (Kafka's does the same).
_HEARTBEATING = _IN_GROUP | {S.PREPARE_LEAVING, S.LEAVING}

_FENCED_CODES = frozenset({int(ErrorCode.fenced_member_epoch), int(ErrorCode.unknown_member_id)})
_COORDINATOR_MOVED = frozenset({int(ErrorCode.not_coordinator), int(ErrorCode.coordinator_not_available)})
_RETRIABLE = _COORDINATOR_MOVED | {int(ErrorCode.coordinator_load_in_progress)}
# Reported to the application, the member carries on (Kafka's consumer does the same).
_NON_FATAL = frozenset({int(ErrorCode.topic_authorization_failed)})


class IllegalMemberTransition(RuntimeError):
    """A transition the state table does not allow (a bug in the caller, never a broker's answer)."""


@dataclass(frozen=True)
class HeartbeatRequest:
    """One ConsumerGroupHeartbeat to send; ``None`` fields mean "unchanged since the last one"."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int  # -1: unchanged
    subscribed_topic_names: tuple[str, ...] | None
    subscribed_topic_regex: str | None
    server_assignor: str | None
    owned: tuple[tuple[uuid.UUID, tuple[int, ...]], ...] | None


@dataclass(frozen=True)
class HeartbeatResponse:
    """What a ConsumerGroupHeartbeat response said (``assignment`` None: unchanged)."""

    error_code: int
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Mapping[uuid.UUID, frozenset[int]] | None = None


@dataclass(frozen=True)
class HeartbeatError:
    """An error response the application should hear of; ``fatal`` ends the membership."""

    code: int
    message: str
    fatal: bool
    coordinator_moved: bool = False


@dataclass(frozen=True)
class Reconciliation:
    """One step towards the target assignment, for the consumer's poll to carry out: run
    ``on_revoke(revoke)`` and drop those partitions, then add ``assign`` and run
    ``on_assign(assign)``, then call :meth:`ConsumerMembership.reconciled` with this object."""

    revoke: tuple[TopicPartitionName, ...]
    assign: tuple[TopicPartitionName, ...]
    owned_after: frozenset[TopicIdPartition]
    names: Mapping[uuid.UUID, str]
    first_since_join: bool
    member_epoch: int
    local_epoch: int


class ConsumerMembership:
    """One member's side of a KIP-848 consumer group; see the module docstring. Not thread-safe:
    its owner serializes calls. Times are milliseconds on the owner's monotonic clock."""

    def __init__(self, *, group_id: str, member_id: str | None = None, instance_id: str | None = None,
                 rack_id: str | None = None, rebalance_timeout_ms: int, server_assignor: str | None = None,
                 retry_backoff_ms: int = 100) -> None:
        self.group_id = group_id
        # KIP-1082 (heartbeat v1): the member makes up its id once and keeps it for its lifetime.
        self.member_id = member_id if member_id is not None else str(uuid.uuid4())
        self.instance_id = instance_id
        self.rack_id = rack_id or None
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.server_assignor = server_assignor or None
        self.retry_backoff_ms = retry_backoff_ms
        self.member_epoch = JOIN_EPOCH
        self.heartbeat_interval_ms = 0  # until the coordinator says
        self._state = S.UNSUBSCRIBED
        self._topics: tuple[str, ...] = ()
        self._regex: str | None = None
        self.owned: frozenset[TopicIdPartition] = frozenset()
        self.owned_names: dict[uuid.UUID, str] = {}
        self.target: frozenset[TopicIdPartition] = frozenset()
        # Kafka's local assignment epochs: bumped per new target; the owned set carries the one
        # it was reconciled from, and a change of it is acknowledged even if no partition moved.
        self._target_local_epoch = 0
        self._owned_local_epoch = 0
        self._in_flight = False
        self._send_now = False
        self._next_heartbeat_ms = 0.0
        self._backoff_until_ms = 0.0
        self._sent: _SentFields | None = None  # None: the next heartbeat carries every field
        self._in_progress: Reconciliation | None = None
        self._reconciled_since_join = False
        self._leaving_fenced = False
        self._leave_epoch = LEAVE_EPOCH
        self._stale_leave_due = False
        self.fatal_error: HeartbeatError | None = None
        self.needs_metadata = False  # a target names topic ids the resolver did not know

    # --- state --------------------------------------------------------------------------------

    @property
    def state(self) -> MemberState:
        """The current state."""
        return self._state

    def _transition(self, to: MemberState) -> None:
        if self._state not in _ALLOWED_FROM[to]:
            raise IllegalMemberTransition(f"member {self.member_id} of group {self.group_id}: "
                                          f"{self._state.name} -> {to.name} is not a legal transition")
        self._state = to

    @property
    def in_group(self) -> bool:
        """Joined with an epoch the coordinator gave (commits carry it)."""
        return (self._state in _IN_GROUP or self._state is S.PREPARE_LEAVING) and self.member_epoch > 0

    def needs_poll(self) -> bool:
        """True when the consumer's poll has work here (callbacks or a rejoin)."""
        return self._state in (S.RECONCILING, S.FENCED, S.STALE) and self._in_progress is None

    # --- subscription -------------------------------------------------------------------------

    def subscribe(self, topics: list[str], regex: str | None) -> None:
        """Set the subscription (topic names and/or one RE2 regex); joins if not in the group."""
        self._topics = tuple(sorted(set(topics)))
        self._regex = regex or None
        if self._state is S.UNSUBSCRIBED:
            self._join()
        elif self._state in _IN_GROUP:
            self._send_now = True  # the coordinator should hear of the change soon

    def _join(self) -> None:
        self._transition(S.JOINING)
        self.member_epoch = JOIN_EPOCH
        self.owned = frozenset()
        self.owned_names = {}
        self.target = frozenset()
        self._target_local_epoch = self._owned_local_epoch = 0
        self._in_progress = None
        self._reconciled_since_join = False
        self._sent = None
        self._send_now = True

    def prepare_leaving(self) -> bool:
        """unsubscribe()/close(): start leaving. True when the consumer must first run
        ``on_revoke`` for what it owns and then call :meth:`leave_ready`; False when there is
        no membership to leave (a fenced or stale member has nothing the group waits for)."""
        if self._state in _IN_GROUP:
            self._transition(S.PREPARE_LEAVING)
            self._in_progress = None
            return True
        if self._state in (S.FENCED, S.STALE):
            self._transition(S.UNSUBSCRIBED)
        return False

    def leave_ready(self, *, static_leaves_for_good: bool = False) -> None:
        """Revocations done: the leave heartbeat is due (epoch -1, or -2 for a static member
        that will come back; ``static_leaves_for_good`` sends -1 for it as well)."""
        if self._state is not S.PREPARE_LEAVING:
            return
        if self._leaving_fenced:
            self._leaving_fenced = False
            self._transition(S.UNSUBSCRIBED)
            return
        self._transition(S.LEAVING)
        self._leave_epoch = (LEAVE_STATIC_EPOCH if self.instance_id is not None and not static_leaves_for_good
                             else LEAVE_EPOCH)
        self._send_now = True

    def poll_timer_expired(self) -> bool:
        """max.poll.interval.ms passed without a poll: the member leaves (a heartbeat with epoch
        -1 is due) and, on its next poll, gives up its partitions as lost and rejoins."""
        if self._state not in _IN_GROUP:
            return False
        self._transition(S.STALE)
        self._in_progress = None
        self._stale_leave_due = True
        self._send_now = True
        return True

    # --- heartbeats ---------------------------------------------------------------------------

    def heartbeat_delay_ms(self, now_ms: float) -> float | None:
        """How long until the next heartbeat is due (0: now); None when none is to be sent
        (one in flight, or a state that sends none)."""
        if self._in_flight:
            return None
        state = self._state
        if state is S.STALE:
            if not self._stale_leave_due:
                return None
        elif state not in _HEARTBEATING:
            return None
        earliest = max(now_ms, self._backoff_until_ms)
        if not self._send_now:
            earliest = max(earliest, self._next_heartbeat_ms)
        return earliest - now_ms

    def build_heartbeat(self, now_ms: float) -> HeartbeatRequest:
        """The heartbeat to send now (marks it in flight until its response or failure)."""
        state = self._state
        if state is S.LEAVING or state is S.STALE:
            leave_epoch = LEAVE_EPOCH if state is S.STALE else self._leave_epoch
            request = HeartbeatRequest(
                group_id=self.group_id, member_id=self.member_id, member_epoch=leave_epoch,
                instance_id=self.instance_id, rack_id=None, rebalance_timeout_ms=-1,
                subscribed_topic_names=None, subscribed_topic_regex=None, server_assignor=None, owned=None)
            self._in_flight = True
            self._send_now = False
            if state is S.LEAVING:
                # Sent is enough (Kafka's member does the same): the answer changes nothing.
                self._transition(S.UNSUBSCRIBED)
                self.member_epoch = JOIN_EPOCH
                self.owned, self.target = frozenset(), frozenset()
            else:
                self._stale_leave_due = False
            return request
        if state not in _HEARTBEATING:
            raise IllegalMemberTransition(f"no heartbeat is sent in state {state.name}")
        everything = self._sent is None or self.member_epoch == JOIN_EPOCH
        sent = self._sent
        owned = _by_topic(self.owned)
        request = HeartbeatRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=self.member_epoch,
            instance_id=self.instance_id,  # always: the coordinator finds a static member by it
            rack_id=self.rack_id if everything else None,
            rebalance_timeout_ms=self.rebalance_timeout_ms if everything else -1,
            subscribed_topic_names=self._topics if everything or sent is None or sent.topics != self._topics
            else None,
            subscribed_topic_regex=self._regex_field(everything, sent),
            server_assignor=self.server_assignor if everything or sent is None
            or sent.server_assignor != self.server_assignor else None,
            owned=owned if everything or sent is None or sent.owned != self.owned
            or sent.owned_local_epoch != self._owned_local_epoch else None,
        )
        self._sent = _SentFields(self._topics, self._regex, self.server_assignor, self.owned, self._owned_local_epoch)
        self._in_flight = True
        self._send_now = False
        self._next_heartbeat_ms = now_ms + self.heartbeat_interval_ms
        if state is S.ACKNOWLEDGING:
            # The acknowledgement is on its way; a target not reached yet (topics the resolver
            # did not know) is reconciled again.
            self._transition(S.STABLE if self._owned_local_epoch == self._target_local_epoch else S.RECONCILING)
        return request

    def _regex_field(self, everything: bool, sent: _SentFields | None) -> str | None:
        """SubscribedTopicRegex: the regex when joining or changed; "" to drop one the
        coordinator has (null would mean "unchanged")."""
        if everything or sent is None:
            return self._regex
        if sent.regex == self._regex:
            return None
        return "" if self._regex is None else self._regex

    def on_heartbeat_failure(self, now_ms: float) -> None:
        """The heartbeat got no answer (connection lost, timed out, no coordinator): try again
        after the backoff, sending every field (the coordinator may not have seen the last)."""
        self._in_flight = False
        self._sent = None
        self._backoff_until_ms = self._next_heartbeat_ms = now_ms + self.retry_backoff_ms

    def abandon_in_flight(self) -> None:
        """The heartbeat in flight will never be answered here (its task was cancelled)."""
        if self._in_flight:
            self._in_flight = False
            self._sent = None

    def on_heartbeat_response(self, response: HeartbeatResponse, now_ms: float) -> HeartbeatError | None:
        """Apply a heartbeat's answer; returns the error the application should hear of, if any."""
        self._in_flight = False
        code = int(response.error_code)
        if code:
            return self._on_error(code, response.error_message, now_ms)
        self._backoff_until_ms = 0.0
        state = self._state
        if state not in _IN_GROUP and state is not S.PREPARE_LEAVING:
            return None  # the answer to a leave, or to a heartbeat sent before fencing: stale
        if response.member_id:
            self.member_id = response.member_id
        if response.heartbeat_interval_ms > 0:
            self.heartbeat_interval_ms = response.heartbeat_interval_ms
        # The interval counts from the answer (Kafka's member resets its timer there too).
        self._next_heartbeat_ms = now_ms + self.heartbeat_interval_ms
        self.member_epoch = response.member_epoch
        if response.assignment is None:
            return None
        target = frozenset((tid, p) for tid, parts in response.assignment.items() for p in parts)
        changed = target != self.target
        self.target = target
        if changed or state is S.JOINING:
            self._target_local_epoch += 1
        if state is S.JOINING or (changed and state in (S.STABLE, S.ACKNOWLEDGING)):
            self._transition(S.RECONCILING)
        return None

    def _on_error(self, code: int, message: str | None, now_ms: float) -> HeartbeatError | None:
        text = message or _error_name(code)
        self._sent = None
        if self._state in (S.UNSUBSCRIBED, S.STALE, S.FATAL):
            return None  # the answer to a leave heartbeat: the member is out either way
        if code in _COORDINATOR_MOVED:
            # No backoff: the next heartbeat goes as soon as the coordinator is found again.
            self._backoff_until_ms = self._next_heartbeat_ms = now_ms
            return HeartbeatError(code, text, fatal=False, coordinator_moved=True)
        if code in _RETRIABLE:
            self._backoff_until_ms = self._next_heartbeat_ms = now_ms + self.retry_backoff_ms
            return HeartbeatError(code, text, fatal=False)
        if code in _FENCED_CODES:
            self.fence()
            return None
        if code in _NON_FATAL:
            self._backoff_until_ms = now_ms + max(self.retry_backoff_ms, self.heartbeat_interval_ms)
            return HeartbeatError(code, text, fatal=False)
        if code == ErrorCode.unsupported_version:
            text = "the cluster does not support the consumer group protocol (KIP-848); set group.protocol=classic"
        error = HeartbeatError(code, f"ConsumerGroupHeartbeat: {_error_name(code)}: {text}", fatal=True)
        self.fatal_error = error
        self._transition(S.FATAL)
        return error

    def fence(self) -> None:
        """The coordinator no longer knows this member at its epoch (FENCED_MEMBER_EPOCH,
        UNKNOWN_MEMBER_ID): it releases everything and rejoins (after :meth:`lost_handled`)."""
        state = self._state
        if state is S.PREPARE_LEAVING:
            self._leaving_fenced = True  # nothing to leave any more
            return
        if state is S.LEAVING or state not in _IN_GROUP:
            return
        self._transition(S.FENCED)
        self._in_progress = None
        self._sent = None

    # --- reconciliation (the consumer's poll) -------------------------------------------------

    def reconciliation(self, resolve: Callable[[uuid.UUID], str | None]) -> Reconciliation | None:
        """The next reconciliation step, or None (none due, one in progress, or the only change
        waits for topic names: then ``needs_metadata`` is set). ``resolve`` maps a topic id to
        its name (None while metadata does not know it)."""
        if self._in_progress is not None or self._state not in (S.RECONCILING, S.STABLE):
            return None
        if self._state is S.STABLE and self.owned == self.target:
            self.needs_metadata = False
            return None  # nothing waits for topic names
        names: dict[uuid.UUID, str] = dict(self.owned_names)
        resolved: set[TopicIdPartition] = set()
        unresolved = False
        for tid, partition in self.target:
            name = names.get(tid) or resolve(tid)
            if name is None:
                unresolved = True
                continue
            names[tid] = name
            resolved.add((tid, partition))
        self.needs_metadata = unresolved
        owned_after = frozenset(resolved)
        revoke = sorted((names[t], p) for t, p in self.owned - owned_after)
        assign = sorted((names[t], p) for t, p in owned_after - self.owned)
        first = not self._reconciled_since_join
        if not revoke and not assign and not first:
            if self._state is S.RECONCILING:
                # What can be resolved is owned already: acknowledge the target's epoch (as
                # Kafka's member does); the rest follows when metadata names its topics.
                self._owned_local_epoch = self._target_local_epoch
                self._transition(S.ACKNOWLEDGING)
                self._send_now = True
            return None
        if self._state is S.STABLE:
            self._transition(S.RECONCILING)  # metadata now names topics the target had waiting
        step = Reconciliation(revoke=tuple(revoke), assign=tuple(assign), owned_after=owned_after,
                              names={t: names[t] for t, _ in owned_after}, first_since_join=first,
                              member_epoch=self.member_epoch, local_epoch=self._target_local_epoch)
        self._in_progress = step
        return step

    def reconciled(self, step: Reconciliation) -> bool:
        """The consumer carried ``step`` out; the acknowledgement is due at once. False when
        the member was fenced or started leaving meanwhile (the step no longer counts)."""
        if self._in_progress is not step or self._state is not S.RECONCILING:
            return False
        self._in_progress = None
        self._reconciled_since_join = True
        self.owned = step.owned_after
        self._owned_local_epoch = step.local_epoch
        self.owned_names = dict(step.names)
        self._transition(S.ACKNOWLEDGING)
        self._send_now = True
        return True

    def lost_handled(self) -> None:
        """FENCED or STALE: the consumer released every partition (``on_lost``): rejoin with
        epoch 0 under the same member id."""
        if self._state not in (S.FENCED, S.STALE):
            return
        self._join()

    def owned_partition_names(self) -> list[TopicPartitionName]:
        """What the member owns, as (topic name, partition)."""
        return sorted((self.owned_names[t], p) for t, p in self.owned if t in self.owned_names)


@dataclass(frozen=True)
class _SentFields:
    """The fields of the last heartbeat sent, to send only what changed."""

    topics: tuple[str, ...]
    regex: str | None
    server_assignor: str | None
    owned: frozenset[TopicIdPartition]
    owned_local_epoch: int


def _by_topic(partitions: frozenset[TopicIdPartition]) -> tuple[tuple[uuid.UUID, tuple[int, ...]], ...]:
    grouped: dict[uuid.UUID, list[int]] = {}
    for tid, p in partitions:
        grouped.setdefault(tid, []).append(p)
    return tuple((tid, tuple(sorted(ps))) for tid, ps in sorted(grouped.items(), key=lambda kv: str(kv[0])))


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"error {code}"
