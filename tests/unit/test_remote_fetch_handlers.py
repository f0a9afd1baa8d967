"""Fetch, ListOffsets and ShareFetch below the local log start, through the broker's handlers.

A tiered topic's closed segments are copied by hand into a directory store (what the copier
uploads, from ``PartitionLog.closed_segments_to_tier``), local retention then deletes them
locally, and the broker's ``remote_reads`` serves them. Every answer is checked against what the
same log answered while it still had the data locally."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from oncestream.broker.config import BrokerConfig
from oncestream.broker.fetch_response_writer import frame_bytes
from oncestream.broker.handlers import fetch, list_offsets, share
from oncestream.broker.state import BrokerState
from oncestream.protocol import api_keys as k
from oncestream.protocol.codec import RequestHeader, build, reader_for
from oncestream.protocol.record_batch import iter_batches
from oncestream.protocol.schemas import request_module, response_class
from oncestream.remote.local_store import LocalObjectStore
from oncestream.remote.reader import RemotePartition, RemoteReads
from tests.unit._batches import ATTR_TRANSACTIONAL, make_batch
from tests.unit._remote_segments import Seg, layout_keys

TOPIC = "tiered"
P1, P2 = 11, 22
FETCH_VERSION = 12
TIERED_CONFIGS = {
    "remote.storage.enable": "true",
    "segment.bytes": "700",
    "index.interval.bytes": "150",
    "local.retention.bytes": "1",  # every copied segment goes locally
}


key_of = layout_keys(TOPIC, uuid.UUID(int=99))



class GatedStore(LocalObjectStore):
    """The directory store with a gate on ranged reads (a slow store): a test closes the gate and
    reads wait until it opens again."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.gate = threading.Event()
        self.gate.set()

    def get_range(self, key: str, start: int, end: int) -> bytes:
        if not self.gate.wait(30):
            raise TimeoutError("test gate never opened")
        return super().get_range(key, start, end)


@dataclass
class Tiered:
    state: BrokerState
    store: GatedStore
    store_dir: Path
    segments: list[Seg]
    local_start: int
    end_offset: int
    before_bytes: bytes  # the whole partition-0 log as read before tiering
    before_aborted: dict[int, set[tuple[int, int]]]  # fetch offset -> aborts, read locally before
    before_timestamps: dict[int, tuple[int, int] | None]


def _txn(producer_id: int, sequence: int, ts: int) -> bytes:
    return make_batch(2, producer_id=producer_id, producer_epoch=0, base_sequence=sequence,
                      attributes=ATTR_TRANSACTIONAL, timestamp_ms=ts, value_size=30)


def _fill(state: BrokerState) -> None:
    plog = state.logs.get(TOPIC, 0)
    ts = 20_000
    seq = {P1: 0, P2: 0}

    def marker(pid: int, commit: bool) -> None:
        plog.append_marker(producer_id=pid, producer_epoch=0, commit=commit, coordinator_epoch=0, now_ms=ts)

    for round_ in range(4):
        for _ in range(5):
            ts += 10
            plog.append(make_batch(3, timestamp_ms=ts, value_size=40), ts)
        ts += 10
        plog.append(_txn(P1, seq[P1], ts), ts)  # P1's transaction opens...
        seq[P1] += 2
        for _ in range(8):
            ts += 10
            plog.append(make_batch(3, timestamp_ms=ts, value_size=40), ts)
            plog.append(_txn(P2, seq[P2], ts), ts)
            seq[P2] += 2
        marker(P2, True)
        marker(P1, round_ % 2 == 1)  # ...and ends segments later: aborted in rounds 0 and 2
    for _ in range(6):
        ts += 10
        plog.append(make_batch(3, timestamp_ms=ts, value_size=40), ts)
    plog.flush()
    state.logs.get(TOPIC, 1).append(make_batch(2, timestamp_ms=ts), ts)


@pytest.fixture
def tiered(tmp_path: Path) -> Iterator[Tiered]:
    with _tiered(tmp_path, tier_below=None) as made:
        yield made


@contextlib.contextmanager
def _tiered(tmp_path: Path, *, tier_below: int | None) -> Iterator[Tiered]:
    """The topic filled, its closed segments copied (those wholly below ``tier_below`` if given)
    and deleted locally."""
    state = BrokerState(tmp_path / "data", BrokerConfig.from_properties("127.0.0.1", 0, {}))
    try:
        state.logs.create_topic(TOPIC, 2, TIERED_CONFIGS)
        _fill(state)
        plog = state.logs.get(TOPIC, 0)
        end = plog.high_watermark
        before = b"".join(plog.read(0, 2**31 - 1).chunks)
        before_aborted = {o: set(plog.read(o, 2**31 - 1, with_aborted=True).aborted_transactions or ())
                          for o in range(0, end, 5)}
        before_ts = {t: plog.offset_for_timestamp(t) for t in range(19_990, 21_500, 13)}
        store_dir = tmp_path / "store"
        store = GatedStore(store_dir)
        segments = []
        for tierable in plog.closed_segments_to_tier(0):  # what the copier uploads
            if tier_below is not None and tierable.last_offset >= tier_below:
                break
            seg = Seg(uuid.uuid4(), tierable.base_offset, tierable.last_offset, tierable.max_timestamp_ms,
                      tierable.txnindex_path is not None)
            for suffix, path in (("log", tierable.log_path), ("index", tierable.index_path),
                                 ("timeindex", tierable.timeindex_path), ("txnindex", tierable.txnindex_path)):
                if path is not None:
                    store.put(key_of(seg, suffix), path.read_bytes())
            segments.append(seg)
        assert len(segments) >= (3 if tier_below is not None else 8)
        plog.delete_tiered_local_segments(segments[-1].last_offset, 0)
        assert plog.local_log_start_offset == segments[-1].last_offset + 1
        assert plog.log_start_offset == 0
        state.remote_reads = RemoteReads(
            store, lambda topic, p: RemotePartition(tuple(segments) if (topic, p) == (TOPIC, 0) else (), key_of),
            reader_threads=2, index_cache_bytes=1 << 20, fetch_max_wait_ms=500,
        )
        yield Tiered(state, store, store_dir, segments, plog.local_log_start_offset, end, before, before_aborted,
                     before_ts)
    finally:
        state.close()


@dataclass(frozen=True)
class Part:
    partition: int
    error_code: int
    records: bytes
    aborted: set[tuple[int, int]] | None
    log_start_offset: int


def _fetch(state: BrokerState, offsets: dict[int, int], *, read_committed: bool = False,
           max_bytes: int = 1 << 20, partition_max_bytes: int = 600) -> dict[int, Part]:
    m = request_module(k.FETCH, FETCH_VERSION)
    request = build(
        m.FetchRequest, replica_id=-1, max_wait=_ms(0), min_bytes=1, max_bytes=max_bytes,
        isolation_level=1 if read_committed else 0, session_id=0, session_epoch=-1,
        topics=(build(m.FetchTopic, topic=TOPIC, partitions=tuple(
            build(m.FetchPartition, partition=p, current_leader_epoch=-1, fetch_offset=o, last_fetched_epoch=-1,
                  log_start_offset=-1, partition_max_bytes=partition_max_bytes)
            for p, o in offsets.items())),),
        forgotten_topics_data=(), rack_id="",
    )
    buffers = asyncio.run(fetch.handle(state, RequestHeader(k.FETCH, FETCH_VERSION, 7, None, 0), request))
    frame = frame_bytes(buffers)  # local partitions answer with file ranges (zero-copy Fetch)
    response, _size = reader_for(response_class(k.FETCH, FETCH_VERSION))(memoryview(frame).toreadonly(), 9)
    out = {}
    for topic in response.responses:
        for p in topic.partitions:
            aborted = None if p.aborted_transactions is None else {
                (a.producer_id, a.first_offset) for a in p.aborted_transactions}
            out[p.partition_index] = Part(p.partition_index, p.error_code, bytes(p.records or b""), aborted,
                                          p.log_start_offset)
    return out


def _ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


def _spans(records: bytes) -> list[tuple[int, int]]:
    return [(h.base_offset, h.last_offset) for h, _ in iter_batches(records)]


def test_fetch_from_zero_reads_remote_then_local_bytes_as_they_were(tiered: Tiered) -> None:
    offset, data = 0, bytearray()
    while offset < tiered.end_offset:
        part = _fetch(tiered.state, {0: offset})[0]
        assert part.error_code == ErrorCode.none
        assert part.log_start_offset == 0
        spans = _spans(part.records)
        assert spans, offset
        assert spans[0][0] <= offset <= spans[0][1]
        data += part.records
        offset = spans[-1][1] + 1
    assert bytes(data) == tiered.before_bytes


def test_read_committed_aborts_below_the_local_start_match_the_local_answer(tiered: Tiered) -> None:
    seen_remote_abort = False
    for offset, before in tiered.before_aborted.items():
        part = _fetch(tiered.state, {0: offset}, read_committed=True, partition_max_bytes=1 << 20)[0]
        assert part.error_code == ErrorCode.none
        assert part.aborted is not None
        spans = _spans(part.records)
        if offset >= tiered.local_start:
            continue
        # What the local read listed, cut to the range returned now [offset, last returned offset].
        expected = {(pid, first) for pid, first in before if first <= spans[-1][1]}
        assert part.aborted == expected, offset
        seen_remote_abort |= bool(part.aborted)
    assert seen_remote_abort


def test_a_corrupt_remote_object_fails_only_its_partition(tiered: Tiered) -> None:
    seg = tiered.segments[2]
    path = tiered.store_dir / key_of(seg, "log")
    raw = bytearray(path.read_bytes())
    raw[100] ^= 0x55  # inside the first batch's records: its CRC no longer matches
    path.write_bytes(bytes(raw))
    parts = _fetch(tiered.state, {0: seg.base_offset, 1: 0})
    assert parts[0].error_code == ErrorCode.unknown_server_error
    assert parts[0].records == b""
    assert parts[1].error_code == ErrorCode.none
    assert _spans(parts[1].records) == [(0, 1)]
    # The broker goes on serving the other remote segments.
    assert _fetch(tiered.state, {0: tiered.segments[3].base_offset})[0].error_code == ErrorCode.none


def test_a_deleted_remote_object_is_unknown_server_error(tiered: Tiered) -> None:
    seg = tiered.segments[5]
    tiered.store.delete(key_of(seg, "log"))
    assert _fetch(tiered.state, {0: seg.base_offset})[0].error_code == ErrorCode.unknown_server_error


def test_a_remote_read_past_remote_fetch_max_wait_answers_empty_without_error(tiered: Tiered) -> None:
    tiered.store.gate.clear()
    try:
        parts = _fetch(tiered.state, {0: 0, 1: 0})
    finally:
        tiered.store.gate.set()
    assert (parts[0].error_code, parts[0].records) == (ErrorCode.none, b"")
    assert parts[1].error_code == ErrorCode.none
    assert _spans(parts[1].records) == [(0, 1)]
    assert _spans(_fetch(tiered.state, {0: 0})[0].records)[0][0] == 0  # the next fetch gets it


def _list_offsets(state: BrokerState, version: int, timestamps: list[int]) -> list[tuple[int, int, int]]:
    m = request_module(k.LIST_OFFSETS, version)
    fields: dict[str, Any] = {"replica_id": -1, "isolation_level": 0}
    if version >= 10:
        fields["timeout"] = _ms(5_000)
    request = build(m.ListOffsetsRequest, topics=(build(m.ListOffsetsTopic, name=TOPIC, partitions=tuple(
        build(m.ListOffsetsPartition, partition_index=0, current_leader_epoch=-1, timestamp=t)
        for t in timestamps)),), **fields)
    response: Any = asyncio.run(list_offsets.handle(state, RequestHeader(k.LIST_OFFSETS, version, 3, None, 0), request))
    return [(p.error_code, p.offset, p.timestamp) for t in response.topics for p in t.partitions]


@pytest.mark.parametrize("version", [9, 10])
def test_list_offsets_tiered_positions(tiered: Tiered, version: int) -> None:
    got = _list_offsets(tiered.state, version, [-2, -4, -5, -1])
    assert got == [
        (ErrorCode.none, 0, -1),
        (ErrorCode.none, tiered.local_start, -1),
        (ErrorCode.none, tiered.segments[-1].last_offset, -1),
        (ErrorCode.none, tiered.end_offset, -1),
    ]


def test_list_offsets_earliest_local_and_latest_tiered_need_their_versions(tiered: Tiered) -> None:
    assert [e for e, _o, _t in _list_offsets(tiered.state, 7, [-4, -5])] == [ErrorCode.unsupported_version] * 2
    assert [e for e, _o, _t in _list_offsets(tiered.state, 8, [-4, -5])] == [
        ErrorCode.none, ErrorCode.unsupported_version]


def test_list_offsets_by_timestamp_below_the_local_start(tiered: Tiered) -> None:
    targets = list(tiered.before_timestamps)
    got = _list_offsets(tiered.state, 10, targets)
    remote_hits = 0
    for target, (error, offset, timestamp) in zip(targets, got, strict=True):
        before = tiered.before_timestamps[target]
        assert error == ErrorCode.none
        assert (offset, timestamp) == (before if before is not None else (-1, -1)), target
        remote_hits += before is not None and before[0] < tiered.local_start
    assert remote_hits > 5


# --- ShareFetch: served through the same reader ------------------------------------------------------

SHARE_GROUP = "sg"


def _share_fetch(state: BrokerState, epoch: int, topic_id: uuid.UUID,
                 acks: tuple[tuple[int, int], ...] = ()) -> Any:
    m = request_module(k.SHARE_FETCH, 1)
    request = m.ShareFetchRequest(
        group_id=SHARE_GROUP, member_id="member-a", share_session_epoch=epoch, max_wait=_ms(0),
        min_bytes=1, max_bytes=1 << 20, max_records=50, batch_size=50,
        topics=(m.FetchTopic(topic_id=topic_id, partitions=(m.FetchPartition(
            partition_index=0, acknowledgement_batches=tuple(
                m.AcknowledgementBatch(first_offset=first, last_offset=last, acknowledge_types=(1,))
                for first, last in acks)),)),),
        forgotten_topics_data=())
    return asyncio.run(share.handle_share_fetch(state, RequestHeader(k.SHARE_FETCH, 1, 1, "t", 0), request))


def test_share_fetch_below_the_local_start_is_served_from_the_store(tiered: Tiered) -> None:
    state = tiered.state
    state.shares.group_configs[SHARE_GROUP] = {"share.auto.offset.reset": "earliest",
                                               "share.isolation.level": "read_committed"}
    topic_id = state.logs.topics()[TOPIC].topic_id
    before = {h.base_offset: bytes(view) for h, view in iter_batches(tiered.before_bytes)}
    acquired: list[tuple[int, int]] = []
    acks: tuple[tuple[int, int], ...] = ()
    epoch = 0
    while not acquired or acquired[-1][1] < tiered.local_start:
        response = _share_fetch(state, epoch, topic_id, acks)
        [part] = [p for t in response.responses for p in t.partitions]
        assert part.error_code == ErrorCode.none
        ranges = [(r.first_offset, r.last_offset) for r in part.acquired_records]
        assert ranges, f"nothing acquired after {acquired[-1:]}"
        # The batches handed out are the ones the log held before it was tiered.
        for header, view in iter_batches(bytes(part.records)):
            assert before[header.base_offset] == bytes(view)
        acquired += ranges
        acks = tuple(ranges)
        epoch += 1
    assert acquired[0][0] == 0
    # Every acquired offset once, in order, none in an aborted transaction's records.
    offsets = [o for first, last in acquired for o in range(first, last + 1)]
    assert offsets == sorted(set(offsets))
    aborted_records: set[int] = set()
    headers = [h for h, _view in iter_batches(tiered.before_bytes)]
    for pid, first in tiered.before_aborted[0]:
        for header in (h for h in headers if h.producer_id == pid and h.base_offset >= first):
            if header.is_control:
                break  # the transaction's ABORT marker
            aborted_records.update(range(header.base_offset, header.last_offset + 1))
    assert aborted_records
    assert min(aborted_records) < tiered.local_start
    assert not aborted_records & set(offsets)


def test_an_abort_whose_marker_is_only_local_is_listed_for_a_remote_read(tmp_path: Path) -> None:
    """The remote transaction indexes cannot end the search when a transaction read remotely
    ended in a segment still only on local disk: the local index adds its abort."""
    with _tiered(tmp_path / "probe", tier_below=None) as probe:
        headers = [h for h, _view in iter_batches(probe.before_bytes)]
    # P1's round-2 transaction: aborted; its ABORT marker is the third control batch of P1.
    marker_offset = [h.base_offset for h in headers if h.producer_id == P1 and h.is_control][2]
    first_offset = next(first for pid, first in set().union(*probe.before_aborted.values())
                        if pid == P1 and first < marker_offset and all(
                            not (h.producer_id == P1 and h.is_control and first < h.base_offset < marker_offset)
                            for h in headers))
    with _tiered(tmp_path / "cut", tier_below=marker_offset) as cut:
        assert first_offset < cut.local_start <= marker_offset  # starts remote, ends local
        part = _fetch(cut.state, {0: first_offset}, read_committed=True, partition_max_bytes=1 << 20)[0]
        assert part.error_code == ErrorCode.none
        assert _spans(part.records)[0][0] <= first_offset
        assert part.aborted is not None
        assert (P1, first_offset) in part.aborted
