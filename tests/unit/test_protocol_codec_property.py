"""One record codec, every consumer (issue 10): random partition logs encoded with
``protocol.records.encode_batch`` decode to the same records through the record codec itself
(``decode_batches``, ``committed_records``), the log's compaction view (``iter_raw_records``),
the client's fetch decoder and the Spark reader's column builder, and the one read_committed
filter (KIP-98) hides exactly the records of aborted transactions and every control batch.

The logs are built as a broker would write them: plain batches, transactional batches that open
a producer's transaction at their first offset, and COMMIT/ABORT markers that close it; the
aborted list is what a Fetch response carries, (producer id, first offset) per aborted
transaction. Each example is read from a random fetch position and cut at a random byte, as a
fetch response may end inside a batch.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from oncestream.client.consumer.fetch_decoder import decode_partition
from oncestream.log.batch_records import iter_raw_records
from oncestream.protocol import record_batch as rb
from oncestream.protocol.aborted_filter import AbortedFilter
from oncestream.protocol.batch_walk import complete_batches_end
from oncestream.protocol.compression import COMPRESSION_BY_NAME
from oncestream.protocol.markers import CONTROL_ABORT, CONTROL_COMMIT
from oncestream.protocol.records import NewRecord, committed_records, decode_batches, encode_batch, encode_control_batch

NOW_MS = 1_700_000_000_000
CODECS = sorted(COMPRESSION_BY_NAME.values())

_big = st.builds(lambda size, byte: bytes([byte]) * size, st.integers(60, 9000), st.integers(0, 255))
_field = st.one_of(st.none(), st.binary(max_size=40), _big)  # 1-, 2- and 3-byte length varints
_header_key = st.text(alphabet=st.characters(codec="utf-8"), max_size=8)
_record = st.tuples(
    _field,
    _field,
    st.lists(st.tuples(_header_key, st.one_of(st.none(), st.binary(max_size=20))), max_size=2),
    st.one_of(st.none(), st.integers(-(10**6), 10**9)),  # long timestamp deltas: the slow varint path
)
_records = st.lists(_record, min_size=1, max_size=4)
_step = st.one_of(
    st.tuples(st.just("plain"), st.integers(0, 1), _records, st.sampled_from(CODECS)),
    st.tuples(st.just("txn"), st.integers(0, 1), _records, st.sampled_from(CODECS)),
    st.tuples(st.just("end"), st.integers(0, 1), st.booleans(), st.just(0)),
)


@dataclass
class Aborted:
    """An entry of a Fetch response's aborted_transactions."""

    producer_id: int
    first_offset: int


@dataclass(frozen=True)
class Expected:
    """One data record as every decoder must return it."""

    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    aborted: bool  # belongs to an aborted transaction


def _build_log(steps, closing_commits) -> tuple[list[tuple[bytes, list[Expected]]], list[tuple[int, int]]]:
    """(batches with the data records each holds, aborted list) of a log written by ``steps``."""
    batches: list[tuple[bytes, list[Expected]]] = []
    aborted: list[tuple[int, int]] = []
    open_txns: dict[int, tuple[int, list[Expected]]] = {}  # producer id -> first offset, its records
    offset = 0
    pending: dict[int, list[list[Expected]]] = {}

    def end(pid: int, commit: bool) -> None:
        nonlocal offset
        first, _ = open_txns.pop(pid)
        marker = encode_control_batch(marker=CONTROL_COMMIT if commit else CONTROL_ABORT, producer_id=pid,
                                      producer_epoch=0, coordinator_epoch=0, now_ms=NOW_MS, base_offset=offset)
        batches.append((marker, []))
        offset += 1
        if not commit:
            aborted.append((pid, first))
            for records in pending.pop(pid):
                records[:] = [Expected(r.offset, r.timestamp_ms, r.key, r.value, r.headers, True) for r in records]
        else:
            pending.pop(pid)

    for kind, pid, payload, codec in steps:
        if kind == "end":
            if pid + 100 in open_txns:
                end(pid + 100, payload)
            continue
        news = [NewRecord(value=v, key=k, headers=tuple(h), timestamp_ms=None if t is None else NOW_MS + t)
                for k, v, h, t in payload]
        transactional = kind == "txn"
        producer_id = pid + 100 if transactional else -1
        blob = encode_batch(news, now_ms=NOW_MS, base_offset=offset, producer_id=producer_id,
                            producer_epoch=0 if transactional else -1, base_sequence=0 if transactional else -1,
                            transactional=transactional, compression=codec)
        base_ts = news[0].timestamp_ms if news[0].timestamp_ms is not None else NOW_MS
        expected = [Expected(offset + i, base_ts if n.timestamp_ms is None else n.timestamp_ms, n.key, n.value,
                             tuple(n.headers), False) for i, n in enumerate(news)]
        if transactional:
            if producer_id not in open_txns:
                open_txns[producer_id] = (offset, [])
                pending[producer_id] = []
            pending[producer_id].append(expected)
        batches.append((blob, expected))
        offset += len(news)
    for pid, commit in zip(sorted(open_txns), closing_commits):
        end(pid, commit)
    for pid in sorted(open_txns):
        end(pid, True)
    return batches, aborted


def _client_rows(blob: bytes, position: int, read_committed: bool, aborted) -> list[tuple]:
    result = decode_partition(blob, "t", 0, position, read_committed=read_committed, aborted=aborted, check_crcs=True)
    return [(m.offset(), m.timestamp()[1], m.key(), m.value(), tuple(m.headers() or ())) for m in result.messages]


def _spark_rows(blob: bytes, position: int, read_committed: bool, aborted) -> list[tuple]:
    import pyarrow as pa

    from oncestream.spark.partition_reader import decode_to_arrow

    rows = []
    for batch in decode_to_arrow(blob, "t", 0, position, 2**62, read_committed=read_committed, aborted=aborted):
        stamps_us = batch.column("timestamp").cast(pa.int64()).to_pylist()
        for r, ts_us in zip(batch.to_pylist(), stamps_us):
            rows.append((r["offset"], ts_us // 1000, r["key"], r["value"],
                         tuple((h["key"], h["value"]) for h in r["headers"] or ())))
    return rows


def _has_pyarrow() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


@given(
    steps=st.lists(_step, min_size=1, max_size=16),
    closing_commits=st.lists(st.booleans(), min_size=2, max_size=2),
    position_fraction=st.floats(0, 1),
    cut_fraction=st.one_of(st.just(1.0), st.floats(0, 1)),
)
@settings(max_examples=300, deadline=None)
def test_every_consumer_of_the_codec_reads_the_same_records(steps, closing_commits, position_fraction,
                                                             cut_fraction) -> None:
    """KIP-98: read_committed readers see exactly the records outside aborted transactions,
    read_uncommitted readers every data record; nobody sees a control record; a batch cut off
    by the end of the response is left for the next fetch."""
    batches, aborted = _build_log(steps, closing_commits)
    full = b"".join(blob for blob, _ in batches)
    blob = full[: int(len(full) * cut_fraction)]
    whole, kept_bytes = [], 0
    for batch, records in batches:
        if kept_bytes + len(batch) > len(blob):
            break
        kept_bytes += len(batch)
        whole.extend(records)
    end_offset = max((r.offset for r in whole), default=-1) + 1
    position = int(end_offset * position_fraction)
    assert complete_batches_end(blob)[0] == kept_bytes

    def rows(records: list[Expected]) -> list[tuple]:
        return [(r.offset, r.timestamp_ms, r.key, r.value, r.headers) for r in records]

    everything = rows(whole)
    committed = rows([r for r in whole if not r.aborted])

    # The record codec itself: every data record, and committed_records' view of both isolation levels.
    decoded = [(r.offset, r.timestamp_ms, r.key, r.value, r.headers)
               for b in decode_batches(blob, allow_partial=True) if not b.header.is_control for r in b.records]
    assert decoded == everything
    fetch_aborted = [Aborted(pid, first) for pid, first in aborted]
    assert [(r.offset, r.timestamp_ms, r.key, r.value, r.headers)
            for _, r in committed_records(blob, fetch_aborted) if r is not None] == committed
    assert [(r.offset, r.timestamp_ms, r.key, r.value, r.headers)
            for _, r in committed_records(blob, None) if r is not None] == everything

    # The log's compaction view reads the same keys, offsets and tombstones.
    raw = [(header.base_offset + r.offset_delta, r.key, r.has_value)
           for header, batch in rb.iter_batches(blob[:kept_bytes]) if not header.is_control
           for r in iter_raw_records(header, batch)]
    assert raw == [(r.offset, r.key, r.value is not None) for r in whole]

    # The one filter hides exactly the aborted records (and every control batch).
    filt = AbortedFilter(True, aborted)
    hidden = _hidden_offsets(blob[:kept_bytes], filt)
    assert hidden == [r.offset for r in whole if r.aborted]

    # The client's fetch decoder and the Spark column builder, from a fetch position.
    after = [r for r in committed if r[0] >= position]
    assert _client_rows(blob, position, True, aborted) == after
    assert _client_rows(blob, position, False, aborted) == [r for r in everything if r[0] >= position]
    if _has_pyarrow():
        assert _spark_rows(blob, position, True, aborted) == after
        assert _spark_rows(blob, position, False, aborted) == [r for r in everything if r[0] >= position]


def _hidden_offsets(blob: bytes, filt: AbortedFilter) -> list[int]:
    """Offsets of the data records in the batches ``filt`` hides."""
    hidden: list[int] = []
    for header, batch in rb.iter_batches(blob):
        if filt.hides_header(header, batch) and not header.is_control:
            (decoded,) = decode_batches(batch)
            hidden.extend(r.offset for r in decoded.records)
    return hidden
