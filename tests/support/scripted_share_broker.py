"""A scripted stand-in for a broker's share-group side, to test ShareConsumer's I/O glue.

It speaks the Kafka wire (ApiVersions, Metadata, FindCoordinator, ShareGroupHeartbeat, ShareFetch,
ShareAcknowledge at v1) over a real socket, keeps one share partition's record states in a small
model (available / acquired by a member / acknowledged / archived, with delivery counts), checks
share-session epochs as KIP-932 says, and records every request so a test can assert on what the
client sent. Faults are scripted: ``fail_next_fetch_with`` answers the next ShareFetch with a
top-level error, ``acknowledge_delay_s`` holds every ShareAcknowledge's answer back,
``forget_members`` answers the next heartbeat of a known member UNKNOWN_MEMBER_ID (as a restarted
broker, which keeps no membership, does) while its share session and records stay. It is no
substitute for a real broker (interop tests use one); it lets a unit test see the exact requests.
"""

from __future__ import annotations

import asyncio
import datetime
import struct
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from oncestream.protocol import records as rec
from oncestream.protocol.codec import build, encode_response, reader_for
from oncestream.protocol.schemas import request_class, response_module
from oncestream.protocol.varint import read_uvarint

_HEADER = struct.Struct(">hhih")
_NOW_MS = 1_700_000_000_000
_VERSIONS = {18: (0, 3), 3: (10, 12), 10: (4, 4), 76: (1, 1), 78: (1, 1), 79: (1, 1)}
AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = "available", "acquired", "acknowledged", "archived"


@dataclass
class _Record:
    state: str = AVAILABLE
    owner: str | None = None
    delivery_count: int = 0


@dataclass
class Seen:
    """One request as the broker received it."""

    api_key: int
    request: Any


@dataclass
class ScriptedShareBroker:
    """One broker, one topic ``topic`` with one partition holding ``values``."""

    values: list[bytes]
    topic: str = "t"
    topic_id: uuid.UUID = field(default_factory=uuid.uuid4)
    delivery_limit: int = 5
    seen: list[Seen] = field(default_factory=list)
    port: int = 0
    fail_next_fetch_with: int = 0
    acknowledge_delay_s: float = 0.0  # how long a ShareAcknowledge waits for its answer
    forget_members: bool = False  # the next member heartbeat (epoch > 0) gets UNKNOWN_MEMBER_ID
    versions: dict[int, tuple[int, int]] = field(default_factory=lambda: dict(_VERSIONS))

    def __post_init__(self) -> None:
        self.records = [_Record() for _ in self.values]
        self.sessions: dict[str, int] = {}  # member -> next expected epoch
        self.epochs: dict[str, int] = {}
        self.lock = threading.Lock()

    # --- what tests read ----------------------------------------------------------------------

    def states(self) -> list[str]:
        """Each record's state, by offset."""
        with self.lock:
            return [r.state for r in self.records]

    def requests(self, api_key: int) -> list[Any]:
        """Every request of ``api_key`` received so far."""
        with self.lock:
            return [s.request for s in self.seen if s.api_key == api_key]

    # --- serving ------------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                api_key, version, correlation_id, client_len = _HEADER.unpack_from(frame, 0)
                pos = _HEADER.size + max(client_len, 0)
                cls = request_class(api_key, version)
                if cls.__flexible__:
                    count, pos = read_uvarint(frame, pos)
                    assert count == 0, "the client sends no tagged header fields"
                request, _ = reader_for(cls)(frame, pos)
                if api_key == 79 and self.acknowledge_delay_s:
                    await asyncio.sleep(self.acknowledge_delay_s)
                with self.lock:
                    self.seen.append(Seen(api_key, request))
                    response = self._answer(api_key, version, request, writer)
                try:
                    encoded = encode_response(api_key, version, correlation_id, response)
                except TypeError as exc:
                    raise TypeError(f"cannot encode the answer to api {api_key} v{version}: {response!r}") from exc
                writer.write(encoded)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    def _answer(self, api_key: int, version: int, request: Any, writer: asyncio.StreamWriter) -> Any:
        m = response_module(api_key, version)
        zero = datetime.timedelta(0)
        if api_key == 18:
            keys = tuple(build(m.ApiVersion, api_key=k, min_version=lo, max_version=hi)
                         for k, (lo, hi) in self.versions.items())
            return build(m.ApiVersionsResponse, error_code=ErrorCode.none, api_keys=keys, throttle_time=zero)
        if api_key == 3:
            parts = (build(m.MetadataResponsePartition, error_code=ErrorCode.none, partition_index=0, leader_id=0,
                           replica_nodes=(0,), isr_nodes=(0,), offline_replicas=()),)
            topic = build(m.MetadataResponseTopic, error_code=ErrorCode.none, name=self.topic, topic_id=self.topic_id,
                          partitions=parts, topic_authorized_operations=-2147483648)
            broker = build(m.MetadataResponseBroker, node_id=0, host="127.0.0.1", port=self.port)
            return build(m.MetadataResponse, throttle_time=zero, brokers=(broker,), cluster_id="c", controller_id=0,
                         topics=(topic,))
        if api_key == 10:
            coordinator = build(m.Coordinator, key=request.coordinator_keys[0], node_id=0, host="127.0.0.1",
                                port=self.port, error_code=ErrorCode.none, error_message=None)
            return build(m.FindCoordinatorResponse, throttle_time=zero, coordinators=(coordinator,))
        if api_key == 76:
            return self._heartbeat(m, request)
        if api_key == 78:
            return self._share_fetch(m, request)
        return self._share_acknowledge(m, request)

    def _heartbeat(self, m: Any, request: Any) -> Any:
        zero = datetime.timedelta(0)
        member = request.member_id
        if request.member_epoch == -1:
            self._release_member(member)
            self.epochs.pop(member, None)
            return build(m.ShareGroupHeartbeatResponse, throttle_time=zero, error_code=ErrorCode.none,
                         member_id=member, member_epoch=-1, heartbeat_interval=datetime.timedelta(milliseconds=500))
        if self.forget_members and request.member_epoch > 0:
            self.forget_members = False
            self.epochs.pop(member, None)
            return build(m.ShareGroupHeartbeatResponse, throttle_time=zero, error_code=ErrorCode.unknown_member_id,
                         member_id=member, member_epoch=-1, heartbeat_interval=zero)
        epoch = self.epochs.get(member, 0) + 1 if request.member_epoch == 0 else self.epochs.get(member, 1)
        self.epochs[member] = epoch
        assignment = build(m.Assignment, topic_partitions=(build(m.TopicPartitions, topic_id=self.topic_id,
                                                                 partitions=(0,)),))
        return build(m.ShareGroupHeartbeatResponse, throttle_time=zero, error_code=ErrorCode.none, member_id=member,
                     member_epoch=epoch, heartbeat_interval=datetime.timedelta(milliseconds=500), assignment=assignment)

    def _check_epoch(self, member: str, epoch: int, has_acks: bool) -> int:
        expected = self.sessions.get(member)
        if epoch == 0:
            if has_acks:
                return int(ErrorCode.invalid_request)
            if expected is not None:
                self._release_member(member)  # a new session replaces the old one
            self.sessions[member] = 1
            return 0
        if expected is None:
            return int(ErrorCode.share_session_not_found)
        if epoch == -1:
            return 0
        if epoch != expected:
            return int(ErrorCode.invalid_share_session_epoch)
        self.sessions[member] = epoch + 1
        return 0

    def _apply_acks(self, member: str, batches: Any) -> int:
        for batch in batches:
            types = list(batch.acknowledge_types)
            for i, offset in enumerate(range(batch.first_offset, batch.last_offset + 1)):
                kind = types[0] if len(types) == 1 else types[i]
                if not 0 <= offset < len(self.records) or self.records[offset].state != ACQUIRED or (
                        self.records[offset].owner != member):
                    return int(ErrorCode.invalid_record_state)
                record = self.records[offset]
                if kind == 2:  # RELEASE
                    record.state = AVAILABLE if record.delivery_count < self.delivery_limit else ARCHIVED
                elif kind == 3:  # REJECT
                    record.state = ARCHIVED
                else:  # ACCEPT, GAP
                    record.state = ACKNOWLEDGED
                record.owner = None
        return 0

    def _release_member(self, member: str) -> None:
        for record in self.records:
            if record.state == ACQUIRED and record.owner == member:
                record.state = AVAILABLE
                record.owner = None

    def _share_fetch(self, m: Any, request: Any) -> Any:
        zero = datetime.timedelta(0)
        member = request.member_id
        batches = [b for t in request.topics for p in t.partitions for b in p.acknowledgement_batches]
        code = self.fail_next_fetch_with or self._check_epoch(member, request.share_session_epoch, bool(batches))
        self.fail_next_fetch_with = 0
        if code:
            if code in (int(ErrorCode.share_session_not_found), int(ErrorCode.invalid_share_session_epoch)):
                self.sessions.pop(member, None)
            return build(m.ShareFetchResponse, throttle_time=zero, error_code=ErrorCode(code), acquisition_lock_timeout=zero,
                         responses=(), node_endpoints=())
        ack_code = self._apply_acks(member, batches)
        acquired: list[int] = []
        for offset, record in enumerate(self.records):
            if len(acquired) >= request.max_records:
                break
            if record.state == AVAILABLE:
                record.state, record.owner = ACQUIRED, member
                record.delivery_count += 1
                acquired.append(offset)
        data = b""
        ranges = []
        for offset in acquired:  # one batch and one range per record keeps the model simple
            data += rec.encode_batch([rec.NewRecord(value=self.values[offset], key=None, timestamp_ms=_NOW_MS,
                                                    headers=())], now_ms=_NOW_MS, base_offset=offset)
            ranges.append(build(m.AcquiredRecords, first_offset=offset, last_offset=offset,
                                delivery_count=self.records[offset].delivery_count))
        partition = build(m.PartitionData, partition_index=0, error_code=ErrorCode.none, acknowledge_error_code=ack_code,
                          current_leader=build(m.LeaderIdAndEpoch, leader_id=0, leader_epoch=0),
                          records=data, acquired_records=tuple(ranges))
        return build(m.ShareFetchResponse, throttle_time=zero, error_code=ErrorCode.none,
                     acquisition_lock_timeout=datetime.timedelta(seconds=30),
                     responses=(build(m.ShareFetchableTopicResponse, topic_id=self.topic_id, partitions=(partition,)),),
                     node_endpoints=())

    def _share_acknowledge(self, m: Any, request: Any) -> Any:
        zero = datetime.timedelta(0)
        member = request.member_id
        code = self._check_epoch(member, request.share_session_epoch, False)
        if request.share_session_epoch == 0:
            code = int(ErrorCode.invalid_share_session_epoch)
        if code:
            return build(m.ShareAcknowledgeResponse, throttle_time=zero, error_code=ErrorCode(code), responses=(),
                         node_endpoints=())
        out = []
        for t in request.topics:
            parts = tuple(build(m.PartitionData, partition_index=p.partition_index,
                                error_code=ErrorCode(self._apply_acks(member, p.acknowledgement_batches)),
                                current_leader=build(m.LeaderIdAndEpoch, leader_id=0, leader_epoch=0))
                          for p in t.partitions)
            out.append(build(m.ShareAcknowledgeTopicResponse, topic_id=t.topic_id, partitions=parts))
        if request.share_session_epoch == -1:  # closing the session releases what it still holds
            self._release_member(member)
            self.sessions.pop(member, None)
        return build(m.ShareAcknowledgeResponse, throttle_time=zero, error_code=ErrorCode.none, responses=tuple(out),
                     node_endpoints=())


@contextmanager
def running(broker: ScriptedShareBroker) -> Iterator[str]:
    """Serve ``broker`` on a free port from a thread; yields its bootstrap address."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    server: list[asyncio.base_events.Server] = []

    async def start() -> None:
        srv = await asyncio.start_server(broker._serve, "127.0.0.1", 0)
        broker.port = srv.sockets[0].getsockname()[1]
        server.append(srv)
        started.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(start()), loop.run_forever()), daemon=True)
    thread.start()
    if not started.wait(10):
        raise RuntimeError("the scripted share broker did not start")
    try:
        yield f"127.0.0.1:{broker.port}"
    finally:
        loop.call_soon_threadsafe(server[0].close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
