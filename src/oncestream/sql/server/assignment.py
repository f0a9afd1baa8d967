"""Query placement: each persistent query runs on exactly one node of a service id, shared out
with the Kafka group membership protocol as Kafka Connect's distributed workers share out
connectors.

One group per service id, ``_confluent-ksql-<service id>_query_assignment``, protocol type
``oncestream-sql`` (not ``consumer``: the group holds no partitions and no offsets). Each member
joins with JSON metadata: its REST URL, the queries it runs now (``owned``), and the
command-topic offset of the last command that changed the set of persistent queries it knows
(``queryOffset``). The leader waits until its own metastore has reached the highest
``queryOffset`` of the group, computes the assignment (``compute_assignment``: deterministic,
balanced, sticky, cooperative) and hands every member the whole map through SyncGroup, so every
node knows where each query runs (EXPLAIN, /clusterStatus).

A member rejoins (which makes the coordinator start a rebalance, because its metadata changed)
whenever the set of queries it knows changes (CREATE ... AS SELECT, TERMINATE, DROP) or the set it
runs changes. A dead node stops heartbeating: after ``session.timeout.ms`` the coordinator drops it
and the survivors' next generation gives its queries to them; they restart from their
checkpoints (``checkpoint.root`` reachable by every node), and the exactly-once sink's
transactional ids (derived from the service and query ids) fence the dead writer.

Static membership (KIP-345): a node joins with a ``group.instance.id`` of its own (stable across
restarts, see ``node_identity``). A node that crashed and comes back before its session timed out
takes its slot over at once, without a rebalance: the coordinator hands the new process the
current generation's assignment, which it reads under its previous member id
(``Assignment.taken_over``), so it restarts its queries right away instead of waiting out
``session.timeout.ms``. A clean stop still leaves the group (LeaveGroup naming the instance id)
so the others take its queries at once. Should another process join with the same instance id,
this one is fenced (FENCED_INSTANCE_ID): it stops its queries and stays out.

Cooperative moves (as Kafka's incremental cooperative rebalancing): a query owned by a live
member is never handed to another member in the same generation. The leader first takes it off
its owner's list; the owner stops it (at a batch boundary) and rejoins with a smaller ``owned``;
the next generation gives it to its new node. So two nodes never run one query (and its
checkpoint) at once, short of a node that lost its membership and has not noticed yet (it stops
every query as soon as it does, and the sink's fencing covers the gap).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from oncestream.client.common.cluster import Cluster
from oncestream.client.common.config import resolve
from oncestream.client.common.errors import KafkaException
from oncestream.client.common.io_thread import IoThread
from oncestream.client.common.sasl import SaslCredentials
from oncestream.client.common.tls import ssl_context_for
from oncestream.client.consumer.group import GroupMembership
from oncestream.sql.server.command_topic import internal_topic_name

log = logging.getLogger("oncestream.sql")

PROTOCOL_TYPE = "oncestream-sql"
PROTOCOL_NAME = "queries-sticky-v1"
FORMAT_VERSION = 1
_LEADER_CATCH_UP_S = 10.0
_LOOP_S = 0.2


def assignment_group_id(service_id: str) -> str:
    """The group through which the nodes of ``service_id`` share out persistent queries."""
    return internal_topic_name(service_id, "query_assignment")


class AssignmentFormatError(ValueError):
    """Member metadata or an assignment this version cannot read."""


@dataclass(frozen=True)
class MemberInfo:
    """One member's JoinGroup metadata."""

    member_id: str
    url: str
    owned: tuple[str, ...] = ()
    query_offset: int = -1
    errors: tuple[tuple[str, str], ...] = ()        # (query id, error) of its failed queries
    instance_id: str | None = None                  # its group.instance.id (KIP-345), None: dynamic

    def encode(self) -> bytes:
        doc: dict[str, Any] = {"version": FORMAT_VERSION, "url": self.url, "owned": sorted(self.owned),
                               "queryOffset": self.query_offset, "errors": dict(sorted(self.errors))}
        if self.instance_id is not None:
            doc["instanceId"] = self.instance_id
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def decode(cls, member_id: str, data: bytes) -> MemberInfo:
        try:
            doc = json.loads(bytes(data))
            errors = tuple(sorted((str(k), str(v)) for k, v in dict(doc.get("errors", {})).items()))
            instance_id = doc.get("instanceId")
            return cls(member_id, str(doc["url"]), tuple(doc.get("owned", ())), int(doc.get("queryOffset", -1)),
                       errors, None if instance_id is None else str(instance_id))
        except (ValueError, KeyError, TypeError) as exc:
            raise AssignmentFormatError(f"unreadable member metadata of {member_id}: {exc}") from exc


@dataclass(frozen=True)
class Assignment:
    """One generation's placement, as every member receives it."""

    generation: int
    member_id: str                                   # this member
    leader_url: str
    urls: dict[str, str]                             # member id -> URL
    queries: dict[str, tuple[str, ...]]              # member id -> query ids
    query_offset: int = -1
    errors: dict[str, str] = field(default_factory=dict)   # query id -> error on its owner
    instances: dict[str, str] = field(default_factory=dict)  # member id -> group.instance.id (static members)

    @property
    def mine(self) -> tuple[str, ...]:
        return self.queries.get(self.member_id, ())

    def taken_over(self, instance_id: str | None, url: str) -> Assignment:
        """This assignment as seen by a restarted static member (KIP-345).

        A static member that comes back before its session timed out takes its slot over without
        a rebalance: the coordinator hands it the generation's assignment, computed by the leader
        for the member id of its previous incarnation. The member finds its share under that old
        id (the one whose ``group.instance.id`` is its own) and takes it as its own, URL included;
        anything else (a dynamic member, no or several matching entries) is returned unchanged."""
        if instance_id is None or self.member_id in self.queries:
            return self
        previous = [m for m, i in self.instances.items() if i == instance_id and m != self.member_id]
        if len(previous) != 1:
            return self
        old = previous[0]

        def rekey(mapping: dict[str, Any], value: Any) -> dict[str, Any]:
            out = {k: v for k, v in mapping.items() if k != old}
            if old in mapping:
                out[self.member_id] = value if value is not None else mapping[old]
            return out

        leader_url = url if self.leader_url == self.urls.get(old) else self.leader_url
        return Assignment(self.generation, self.member_id, leader_url, rekey(self.urls, url),
                          rekey(self.queries, None), self.query_offset, dict(self.errors), rekey(self.instances, None))

    def owner_url(self, query_id: str) -> str | None:
        """The URL of the node assigned ``query_id`` in this generation (None: nobody yet)."""
        for member_id, ids in self.queries.items():
            if query_id in ids:
                return self.urls.get(member_id)
        return None

    def encode(self) -> bytes:
        return json.dumps({"version": FORMAT_VERSION, "generation": self.generation, "leader": self.leader_url,
                           "members": self.urls, "assignment": {m: list(q) for m, q in self.queries.items()},
                           "queryOffset": self.query_offset, "errors": self.errors, "instances": self.instances},
                          sort_keys=True).encode()

    @classmethod
    def decode(cls, member_id: str, data: bytes) -> Assignment:
        try:
            doc = json.loads(bytes(data))
            if int(doc["version"]) > FORMAT_VERSION:
                raise AssignmentFormatError(f"assignment format version {doc['version']} is newer than {FORMAT_VERSION}")
            return cls(int(doc["generation"]), member_id, str(doc["leader"]),
                       {str(k): str(v) for k, v in doc["members"].items()},
                       {str(k): tuple(v) for k, v in doc["assignment"].items()}, int(doc.get("queryOffset", -1)),
                       {str(k): str(v) for k, v in dict(doc.get("errors", {})).items()},
                       {str(k): str(v) for k, v in dict(doc.get("instances", {})).items()})
        except (ValueError, KeyError, TypeError) as exc:
            raise AssignmentFormatError(f"unreadable assignment: {exc}") from exc


def compute_assignment(members: Sequence[MemberInfo], queries: Sequence[str]) -> dict[str, list[str]]:
    """Place ``queries`` on ``members``: deterministic (same inputs, same answer, whatever their
    order), balanced (each member gets at most ceil(Q/M)), sticky (a member keeps what it runs, up
    to that bound) and cooperative (a query running on a live member that must move is assigned
    to nobody this generation; its owner stops it and the next generation places it)."""
    ordered = sorted(members, key=lambda m: (m.url, m.member_id))
    result: dict[str, list[str]] = {m.member_id: [] for m in ordered}
    if not ordered:
        return result
    wanted = sorted(set(queries))
    cap = math.ceil(len(wanted) / len(ordered)) if wanted else 0
    placed: set[str] = set()
    running_elsewhere: set[str] = set()
    wanted_set = set(wanted)
    for member in ordered:
        for query_id in sorted(set(member.owned) & wanted_set):
            if query_id in placed:
                continue  # two members claim it (one lost its membership): the first keeps it
            if len(result[member.member_id]) < cap:
                result[member.member_id].append(query_id)
                placed.add(query_id)
            else:
                running_elsewhere.add(query_id)
    for query_id in wanted:
        if query_id in placed or query_id in running_elsewhere:
            continue
        target = min(ordered, key=lambda m: (len(result[m.member_id]), m.url, m.member_id))
        result[target.member_id].append(query_id)
        placed.add(query_id)
    return {member_id: sorted(ids) for member_id, ids in result.items()}


class _QueryGroup(GroupMembership):
    """The group membership with the SQL server's protocol: the leader runs ``assign``."""

    def __init__(self, conf: dict[str, Any], cluster: Cluster, wake: Callable[[], None],
                 assign: Callable[[list[MemberInfo]], Any]) -> None:
        super().__init__(conf, cluster, [PROTOCOL_NAME], wake, protocol_type=PROTOCOL_TYPE)
        self._assign_members = assign

    async def _assign(self, protocol: str, members: Any) -> dict[str, bytes]:
        infos = []
        for member in members:
            try:
                infos.append(MemberInfo.decode(member.member_id, member.metadata))
            except AssignmentFormatError as exc:
                log.warning("oncestream sql: %s; that member gets nothing", exc)
                infos.append(MemberInfo(member.member_id, "", ()))
        result: dict[str, bytes] = await self._assign_members(infos)
        return result


@dataclass
class _State:
    current: Assignment | None = None
    joined_metadata: bytes | None = None
    last_error: str | None = None
    members_seen: dict[str, float] = field(default_factory=dict)


class QueryAssignment:
    """This node's member of the query-placement group, run by a thread of its own.

    The node supplies: ``known_queries()`` -> (queryOffset, persistent query ids of its
    metastore); ``owned()`` -> ids it runs now; ``wait_for_offset(offset, timeout_s)`` (the leader
    waits for its metastore); ``on_assignment(assignment or None)`` (None: membership lost, stop
    everything). ``on_assignment`` runs on this member's thread; it must not block for long."""

    def __init__(self, *, service_id: str, url: str, client_conf: Mapping[str, Any],
                 known_queries: Callable[[], tuple[int, list[str]]], owned: Callable[[], list[str]],
                 errors: Callable[[], dict[str, str]] | None = None,
                 wait_for_offset: Callable[[int, float], bool],
                 on_assignment: Callable[[Assignment | None], None],
                 session_timeout_ms: int = 10_000, heartbeat_interval_ms: int = 1_000,
                 rebalance_timeout_ms: int = 60_000, instance_id: str | None = None) -> None:
        self.url = url
        self.instance_id = instance_id
        self.group_id = assignment_group_id(service_id)
        self._known_queries = known_queries
        self._owned = owned
        self._errors = errors or dict
        self._wait_for_offset = wait_for_offset
        self._on_assignment = on_assignment
        conf = {k: v for k, v in client_conf.items()}
        conf.update({"group.id": self.group_id, "session.timeout.ms": session_timeout_ms,
                     "heartbeat.interval.ms": heartbeat_interval_ms, "max.poll.interval.ms": rebalance_timeout_ms,
                     "client.id": f"oncestream-sql-{service_id}-assignment", "group.instance.id": instance_id})
        c = resolve(conf, "consumer")
        self._io = IoThread("oncestream-sql-assignment")
        self._cluster = Cluster(
            c["bootstrap.servers"], client_id=c["client.id"], request_timeout_ms=c["request.timeout.ms"],
            socket_timeout_ms=c["socket.connection.setup.timeout.ms"], reconnect_backoff_ms=c["reconnect.backoff.ms"],
            reconnect_backoff_max_ms=c["reconnect.backoff.max.ms"], metadata_max_age_ms=c["metadata.max.age.ms"],
            allow_auto_create_topics=False, sasl=SaslCredentials.from_config(c), ssl_context=ssl_context_for(c),
        )
        self._wake = threading.Event()
        self._group = _QueryGroup(c, self._cluster, self._wake.set, self._leader_assign)
        self._state = _State()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sql-query-assignment", daemon=True)

    # --- public -----------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the cluster connection and the member thread (joins at once)."""
        self._io.run(self._start_cluster(), 10)
        self._thread.start()

    async def _start_cluster(self) -> None:
        self._cluster.start()

    def poke(self) -> None:
        """Something the metadata depends on changed: look at it now (rejoin if it differs)."""
        self._wake.set()

    @property
    def member_id(self) -> str:
        return self._group.member_id

    @property
    def current(self) -> Assignment | None:
        """The last assignment received (None before the first, or after losing membership)."""
        with self._lock:
            return self._state.current

    @property
    def last_error(self) -> str | None:
        with self._lock:
            return self._state.last_error

    def stop(self, timeout_s: float = 10.0) -> None:
        """Leave the group (so the survivors rebalance at once, not after the session timeout); a
        static member too (LeaveGroup naming its instance id): stopping is for good, a crash is
        what static membership is for."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        try:
            self._io.run(self._group.leave(static_too=True), 5)
        except (KafkaException, TimeoutError, OSError, RuntimeError) as exc:
            log.debug("oncestream sql: leaving the assignment group: %s", exc)
        try:
            self._io.run(self._cluster.close(), 5)
        except (TimeoutError, RuntimeError):
            pass
        self._io.stop()

    # --- member loop ------------------------------------------------------------------------------

    def _metadata(self) -> bytes:
        query_offset, _ids = self._known_queries()
        return MemberInfo(self._group.member_id, self.url, tuple(sorted(self._owned())), query_offset,
                          tuple(sorted(self._errors().items())), self.instance_id).encode()

    def _run(self) -> None:
        group = self._group
        while not self._stop.is_set():
            group.last_poll_monotonic = time.monotonic()
            if group.fatal_error is not None:
                self._fenced(group.fatal_error)
                continue
            if group.assignment_lost:
                group.assignment_lost = False
                with self._lock:
                    had = self._state.current
                    self._state.current = None
                if had is not None:
                    log.warning("oncestream sql: lost the query-assignment membership; stopping local queries")
                    self._on_assignment(None)
            metadata = self._metadata()
            if group.rejoin_needed or metadata != self._state.joined_metadata:
                self._join()
                continue
            self._wake.wait(_LOOP_S)
            self._wake.clear()

    def _fenced(self, error: Any) -> None:
        """FENCED_INSTANCE_ID (KIP-345): another process joined with this node's instance id, so it
        holds this node's slot and queries now (this one is a zombie of a restarted node, or two
        nodes were given one id). As Kafka's clients treat it, fatal: stop every local query, stay
        out of the group (rejoining would fence the other process in turn) until stopped."""
        log.error("oncestream sql: %s; this node stops its queries and leaves query placement to the "
                  "process now holding group.instance.id %s", error, self.instance_id)
        with self._lock:
            self._state.last_error = str(error)
            had = self._state.current
            self._state.current = None
        # No heartbeat runs any more (the loop ended on the error, or the join failed with it);
        # forgetting the member id keeps stop() from sending a LeaveGroup that would remove the
        # other process (an empty member id with an instance id is KIP-345's admin removal).
        self._group.member_id = ""
        if had is not None:
            self._on_assignment(None)
        self._stop.wait()

    def _join(self) -> None:
        sent: list[bytes] = []

        def metadata() -> bytes:
            data = self._metadata()
            sent.append(data)
            return data

        def decode(data: bytes) -> Assignment:
            return Assignment.decode(self._group.member_id, data).taken_over(self.instance_id, self.url)

        try:
            assignment: Assignment = self._io.run(self._group.join_protocol(metadata, decode),
                                                  self._group.rebalance_timeout_ms / 1000 + 10)
        except (KafkaException, TimeoutError, AssignmentFormatError, OSError) as exc:
            with self._lock:
                self._state.last_error = str(exc)
            log.warning("oncestream sql: joining the query-assignment group failed: %s", exc)
            self._stop.wait(1.0)
            return
        with self._lock:
            self._state.current = assignment
            self._state.joined_metadata = sent[-1] if sent else None
            self._state.last_error = None
        log.info("oncestream sql: generation %d assigns this node %s", assignment.generation, list(assignment.mine))
        self._on_assignment(assignment)

    async def _leader_assign(self, members: list[MemberInfo]) -> dict[str, bytes]:
        wanted_offset = max((m.query_offset for m in members), default=-1)
        # The leader's metastore may lag a member's: wait (a bounded time) to know every query.
        await asyncio.to_thread(self._wait_for_offset, wanted_offset, _LEADER_CATCH_UP_S)
        query_offset, ids = self._known_queries()
        placement = compute_assignment(members, ids)
        urls = {m.member_id: m.url for m in members}
        generation = self._group.generation_id
        errors = {q: e for m in members for q, e in m.errors if q in placement.get(m.member_id, ())}
        instances = {m.member_id: m.instance_id for m in members if m.instance_id is not None}
        return {
            m.member_id: Assignment(generation, m.member_id, self.url, urls,
                                    {k: tuple(v) for k, v in placement.items()}, query_offset, errors, instances).encode()
            for m in members
        }
