"""Electing the primary: the instances of one registry join a group (protocol type ``sr``, as the
reference implementation's), and the group leader names the primary in every member's
assignment: the previous primary while it is still a member (so a rebalance does not move it),
else one of the eligible members (``leader.eligibility=true``), the leader itself when it is.

Each member's metadata is its identity (JSON: url, host, port, scheme, eligibility). A member
whose assignment names it becomes primary (``TopicWriter.start`` then fences the previous one
through the transactional id); the others forward writes to the named URL. A member that loses
its membership (its heartbeats failed beyond ``session.timeout.ms``) knows no primary until it
rejoins, and stops writing if it was the primary.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from oncestream.client.common.cluster import Cluster
from oncestream.client.common.config import resolve
from oncestream.client.common.errors import KafkaException
from oncestream.client.common.io_thread import IoThread
from oncestream.client.consumer.group import GroupMembership

log = logging.getLogger(__name__)

PROTOCOL_TYPE = "sr"
PROTOCOL_NAME = "v0"
_LOOP_S = 0.2


@dataclass(frozen=True)
class Identity:
    """One instance as the group knows it."""

    url: str
    eligible: bool = True

    def encode(self) -> bytes:
        return json.dumps({"version": 1, "url": self.url, "master_eligibility": self.eligible}).encode()

    @classmethod
    def decode(cls, data: bytes) -> Identity | None:
        try:
            doc = json.loads(bytes(data))
            return cls(str(doc["url"]), bool(doc.get("master_eligibility", True)))
        except (ValueError, KeyError, TypeError):
            return None


@dataclass(frozen=True)
class Assignment:
    """The leader's word to every member: the generation and the primary's URL (None: no member
    is eligible)."""

    generation: int
    primary_url: str | None

    def encode(self) -> bytes:
        return json.dumps({"version": 1, "error": 0 if self.primary_url else 1, "generation": self.generation,
                           "master_identity": {"url": self.primary_url} if self.primary_url else None}).encode()

    @classmethod
    def decode(cls, data: bytes) -> Assignment:
        try:
            doc = json.loads(bytes(data))
            identity = doc.get("master_identity") or {}
            return cls(int(doc.get("generation", -1)), identity.get("url"))
        except (ValueError, TypeError, AttributeError) as exc:
            raise ValueError(f"unreadable schema registry assignment: {exc}") from exc


def choose_primary(members: Iterable[Identity], current: str | None, leader: Identity) -> str | None:
    """The group leader's pick of the primary's URL among ``members``: the ``current`` primary
    while it is an eligible member (a rebalance does not move it), else the leader itself if
    eligible, else the first eligible member by URL; None when no member is eligible."""
    urls = {i.url for i in members if i.eligible}
    if current in urls:
        return current
    if leader.eligible and leader.url in urls:
        return leader.url
    return min(urls) if urls else None


class _RegistryGroup(GroupMembership):
    def __init__(self, conf: dict[str, Any], cluster: Cluster, wake: Callable[[], None],
                 choose: Callable[[dict[str, Identity]], str | None]) -> None:
        super().__init__(conf, cluster, [PROTOCOL_NAME], wake, protocol_type=PROTOCOL_TYPE)
        self._choose = choose

    async def _assign(self, protocol: str, members: Any) -> dict[str, bytes]:
        identities = {}
        for member in members:
            identity = Identity.decode(member.metadata)
            if identity is not None:
                identities[member.member_id] = identity
        primary = self._choose(identities)
        answer = Assignment(self.generation_id, primary).encode()
        return {member.member_id: answer for member in members}


class PrimaryElection:
    """This instance's member of the registry group, on a thread of its own; calls
    ``on_change(primary_url or None)`` whenever the primary it knows changes."""

    def __init__(self, *, group_id: str, identity: Identity, client_conf: Mapping[str, Any],
                 on_change: Callable[[str | None], None], session_timeout_ms: int = 10_000,
                 heartbeat_interval_ms: int = 1_000, rebalance_timeout_ms: int = 30_000) -> None:
        self.identity = identity
        self._on_change = on_change
        conf = dict(client_conf)
        conf.update({"group.id": group_id, "session.timeout.ms": session_timeout_ms,
                     "heartbeat.interval.ms": heartbeat_interval_ms, "max.poll.interval.ms": rebalance_timeout_ms,
                     "client.id": f"oncestream-schema-registry-{group_id}"})
        c = resolve(conf, "consumer")
        self._io = IoThread("oncestream-schema-registry-group")
        self._cluster = Cluster.from_config(c, allow_auto_create_topics=False)
        self._wake = threading.Event()
        self._group = _RegistryGroup(c, self._cluster, self._wake.set, self._choose)
        self._primary: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="schema-registry-election", daemon=True)

    @property
    def primary_url(self) -> str | None:
        with self._lock:
            return self._primary

    def start(self) -> None:
        self._io.run(self._start_cluster(), 10)
        self._thread.start()

    async def _start_cluster(self) -> None:
        self._cluster.start()

    def _choose(self, members: dict[str, Identity]) -> str | None:
        return choose_primary(members.values(), self.primary_url, self.identity)

    def _set_primary(self, url: str | None) -> None:
        with self._lock:
            changed = url != self._primary
            self._primary = url
        if changed:
            log.info("schema registry: the primary is now %s", url or "unknown")
            self._on_change(url)

    def _run(self) -> None:
        group = self._group
        while not self._stop.is_set():
            group.last_poll_monotonic = time.monotonic()
            if group.assignment_lost:
                group.assignment_lost = False
                self._set_primary(None)
            if group.rejoin_needed:
                self._join()
                continue
            self._wake.wait(_LOOP_S)
            self._wake.clear()

    def _join(self) -> None:
        try:
            assignment: Assignment = self._io.run(
                self._group.join_protocol(self.identity.encode, Assignment.decode),
                self._group.rebalance_timeout_ms / 1000 + 10)
        except (KafkaException, TimeoutError, OSError, ValueError) as exc:
            log.warning("schema registry: joining the registry group failed: %s", exc)
            self._stop.wait(1.0)
            return
        self._set_primary(assignment.primary_url)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Leave the group (the others elect a new primary at once) and stop."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        try:
            self._io.run(self._group.leave(), 5)
        except (KafkaException, TimeoutError, OSError, RuntimeError) as exc:
            log.debug("schema registry: leaving the registry group: %s", exc)
        try:
            self._io.run(self._cluster.close(), 5)
        except (TimeoutError, RuntimeError):
            pass
        self._io.stop()
