"""The Spark reader's two column builders agree (issue 11, fast reads): the C builder
(``oncestream._native.record_columns``) and the pure-Python fallback turn the same fetched
records into equal Arrow batches, and reject the same malformed records with CorruptRecordError.

The logs are the codec property test's (``test_protocol_codec_property``): plain and
transactional batches under every codec, COMMIT/ABORT markers, null keys and values, headers with
non-ASCII keys, long timestamp deltas; read from a random position to a random end under both
isolation levels (KIP-98: aborted transactions and control batches hidden under read_committed).
"""

from __future__ import annotations

import os
import random
import struct

import crc32c
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncestream.errors import CorruptRecordError
from oncestream.protocol import record_batch as rb
from oncestream.protocol.records import NewRecord, encode_batch
from oncestream.spark import partition_reader as pr
from oncestream.spark.arrow_columns import NativeColumns, PythonColumns, native_available, new_builder
from tests.unit.test_protocol_codec_property import _build_log, _step

NOW_MS = 1_700_000_000_000


def test_the_native_builder_is_built() -> None:
    """The install builds the extension (setup.py); without it every other test here would only
    compare the Python builder with itself."""
    assert native_available(), "build it: pip install -e . (or python setup.py build_ext --inplace)"
    assert isinstance(new_builder(True), NativeColumns)
    assert isinstance(new_builder(False), PythonColumns)


def test_oncestream_native_0_selects_the_python_builder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONCESTREAM_NATIVE", "0")
    assert isinstance(new_builder(), PythonColumns)
    monkeypatch.setenv("ONCESTREAM_NATIVE", "1")
    assert isinstance(new_builder(), NativeColumns)


def _both(blob: bytes, position: int, end: int, read_committed: bool, aborted) -> tuple[list, list]:
    out = []
    for native in (True, False):
        out.append(list(pr.decode_to_arrow(blob, "t", 3, position, end, read_committed=read_committed,
                                           aborted=aborted, native=native)))
    return out[0], out[1]


def _assert_same(native: list[pa.RecordBatch], python: list[pa.RecordBatch]) -> None:
    assert len(native) == len(python)
    for a, b in zip(native, python):
        a.validate(full=True)
        assert a.schema == b.schema == pr.ARROW_SCHEMA
        assert a.to_pydict() == b.to_pydict()
        assert a.equals(b)


@given(
    steps=st.lists(_step, min_size=1, max_size=16),
    closing_commits=st.lists(st.booleans(), min_size=2, max_size=2),
    position_fraction=st.floats(0, 1),
    end_fraction=st.floats(0, 1),
    cut_fraction=st.one_of(st.just(1.0), st.floats(0, 1)),
    read_committed=st.booleans(),
)
@settings(max_examples=250, deadline=None)
def test_native_and_python_builders_make_the_same_arrow_batches(steps, closing_commits, position_fraction,
                                                               end_fraction, cut_fraction, read_committed) -> None:
    batches, aborted = _build_log(steps, closing_commits)
    full = b"".join(blob for blob, _ in batches)
    blob = full[: int(len(full) * cut_fraction)]
    last = sum(len(records) for _, records in batches) + len(batches)  # past every offset
    position = int(last * position_fraction)
    end = position + int((last - position) * end_fraction) + 1
    native, python = _both(blob, position, end, read_committed, aborted)
    _assert_same(native, python)


def test_many_arrow_batches_from_one_decoder_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """Arrow batches are cut after whole Kafka batches; the builder starts empty after each."""
    monkeypatch.setattr(pr, "ROWS_PER_ARROW_BATCH", 7)
    blobs, offset = [], 0
    for i in range(12):
        records = [NewRecord(value=None if j == 2 else b"v" * (i * 50 + j), key=None if j % 2 else b"k%d" % j,
                             headers=(("h\u00e9", b"x"), ("n", None)) if j == 1 else ())
                   for j in range(i % 4 + 1)]
        blobs.append(encode_batch(records, now_ms=NOW_MS, base_offset=offset, compression=i % 5))
        offset += len(records)
    native, python = _both(b"".join(blobs), 1, offset - 1, True, ())
    assert len(native) > 2
    _assert_same(native, python)


def test_the_arrow_batch_is_also_cut_by_record_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Binary columns have int32 offsets: a batch of large records is cut by bytes, not rows."""
    monkeypatch.setattr(pr, "SECTION_BYTES_PER_ARROW_BATCH", 5000)
    blob = b"".join(encode_batch([NewRecord(value=b"x" * 3000)], now_ms=NOW_MS, base_offset=i) for i in range(4))
    native, python = _both(blob, 0, 4, False, ())
    assert [b.num_rows for b in native] == [2, 2]
    _assert_same(native, python)


def _raw_batch(section: bytes, record_count: int, *, base_offset: int = 10, base_ts: int = NOW_MS,
               max_ts: int | None = None, attributes: int = 0) -> memoryview:
    """A batch around a hand-made records section (CRC correct, records not validated)."""
    length = rb.HEADER_SIZE_BYTES - rb.LOG_OVERHEAD_BYTES + len(section)
    head = rb.HEADER_STRUCT.pack(base_offset, length, 0, 2, 0, attributes, max(record_count - 1, 0), base_ts,
                                 base_ts if max_ts is None else max_ts, -1, -1, -1, record_count)
    batch = bytearray(head + section)
    struct.pack_into(">I", batch, rb.CRC_OFFSET, crc32c.crc32c(bytes(batch[rb.ATTRIBUTES_OFFSET:])))
    return memoryview(bytes(batch))


def _outcome(cls, batch: memoryview, position: int, end: int):
    """The Arrow rows a builder makes of one batch, or "corrupt"."""
    header = rb.parse_header(batch)
    cols = cls()
    try:
        cols.append(header, batch, position, end)
        return cols.to_arrow("t", 0).to_pydict()
    except (CorruptRecordError, IndexError):  # ColumnDecoder turns the Python builder's IndexError into corrupt
        return "corrupt"


def _zigzag(value: int) -> bytes:
    raw, out = (value << 1) ^ (value >> 63), bytearray()
    while raw > 0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def test_a_header_key_that_is_not_utf8_is_replaced_alike() -> None:
    body = b"\x00" + _zigzag(0) + _zigzag(0) + _zigzag(-1) + _zigzag(1) + b"v" + _zigzag(1)
    body += _zigzag(3) + b"a\xffb" + _zigzag(-1)
    batch = _raw_batch(_zigzag(len(body)) + body, 1)
    native = _outcome(NativeColumns, batch, 0, 100)
    assert native == _outcome(PythonColumns, batch, 0, 100)
    assert native["headers"] == [[{"key": "a\ufffdb", "value": None}]]


def test_a_timestamp_past_int64_microseconds_is_corrupt_alike() -> None:
    body = b"\x00" + _zigzag(0) + _zigzag(0) + _zigzag(-1) + _zigzag(-1) + _zigzag(0)
    batch = _raw_batch(_zigzag(len(body)) + body, 1, base_ts=2**62)
    assert _outcome(NativeColumns, batch, 0, 100) == _outcome(PythonColumns, batch, 0, 100) == "corrupt"


@given(seed=st.integers(0, 2**32 - 1), flips=st.integers(1, 4), position=st.integers(0, 12))
@settings(max_examples=400, deadline=None)
def test_damaged_records_are_rejected_or_read_alike(seed: int, flips: int, position: int) -> None:
    """Bytes of a records section changed at random (the CRC made to match, as a buggy or hostile
    producer could): both builders raise CorruptRecordError, or both return the same rows."""
    rnd = random.Random(seed)
    records = [NewRecord(value=os.urandom(rnd.choice((0, 5, 70, 200))) if rnd.random() < 0.8 else None,
                         key=b"k" * rnd.randrange(3) if rnd.random() < 0.7 else None,
                         headers=(("hk", b"hv"),) if rnd.random() < 0.3 else ())
                   for _ in range(rnd.randrange(1, 6))]
    good = encode_batch(records, now_ms=NOW_MS, base_offset=10)
    section = bytearray(good[rb.HEADER_SIZE_BYTES:])
    for _ in range(flips):
        section[rnd.randrange(len(section))] = rnd.randrange(256)
    if rnd.random() < 0.2:
        del section[rnd.randrange(len(section)):]
    batch = _raw_batch(bytes(section), len(records) + rnd.choice((0, 0, 1, -1)))
    assert _outcome(NativeColumns, batch, 10 + position % 6, 16) == _outcome(PythonColumns, batch,
                                                                             10 + position % 6, 16)


def test_a_failed_append_leaves_an_empty_native_builder() -> None:
    body = b"\x00" + _zigzag(0) + _zigzag(0) + _zigzag(-1) + _zigzag(5) + b"v"  # value runs past the record
    batch = _raw_batch(_zigzag(len(body)) + body, 1)
    cols = NativeColumns()
    cols.append(rb.parse_header(good := _raw_batch(_zigzag(7) + b"\x00\x00\x00\x01\x02v\x00", 1)), good, 0, 100)
    assert len(cols) == 1
    with pytest.raises(CorruptRecordError):
        cols.append(rb.parse_header(batch), batch, 0, 100)
    assert len(cols) == 0
    assert cols.to_arrow("t", 0).num_rows == 0



def test_log_append_time_batches_agree() -> None:
    """A LogAppendTime batch (timestamp type 1): every record carries the batch's max timestamp."""
    body = b"\x00" + _zigzag(5) + _zigzag(0) + _zigzag(-1) + _zigzag(1) + b"v" + _zigzag(0)
    batch = _raw_batch(_zigzag(len(body)) + body, 1, max_ts=NOW_MS + 7,
                       attributes=rb.ATTR_TIMESTAMP_TYPE_LOG_APPEND)
    native = _outcome(NativeColumns, batch, 0, 100)
    assert native == _outcome(PythonColumns, batch, 0, 100)
    assert native["timestampType"] == [1]
    assert [t.timestamp() * 1000 for t in native["timestamp"]] == [NOW_MS + 7]


@pytest.mark.parametrize("first_null", [0, 1, 7, 8, 9, 16, 23])
def test_a_validity_bitmap_begun_at_the_first_null_marks_every_earlier_row_valid(first_null: int) -> None:
    """The C builder writes a validity bitmap only once a null appears (none means all valid, in
    Arrow); the rows before that null, across byte boundaries, must read as valid."""
    rows = first_null + 10
    records = [NewRecord(key=None if i in (first_null, rows - 1) else b"k%d" % i,
                         value=None if i == first_null + 3 else b"v%d" % i,
                         headers=(("h", b"x"),) if i % 3 == 0 else ())
               for i in range(rows)]
    native, python = _both(encode_batch(records, now_ms=NOW_MS, base_offset=0), 0, rows, False, ())
    _assert_same(native, python)
    (batch,) = native
    assert batch.column("key").null_count == 2
    assert batch.column("value").null_count == 1
    assert batch.column("key").to_pylist()[:first_null] == [b"k%d" % i for i in range(first_null)]
    no_nulls = next(iter(pr.decode_to_arrow(encode_batch(records[:first_null] or [NewRecord(key=b"k", value=b"v")],
                                                    now_ms=NOW_MS, base_offset=0), "t", 0, 0, rows,
                                       read_committed=False, native=True)))
    assert no_nulls.column("key").buffers()[0] is None  # all valid: no bitmap at all


def test_pooled_column_memory_is_reused_only_after_its_batch_is_dropped() -> None:
    """Finished column buffers go back to the builder's memory pool when Arrow drops them; a batch
    still held must keep its bytes while later batches are built (and reuse freed memory)."""
    def batch_of(fill: bytes) -> pa.RecordBatch:
        records = [NewRecord(key=b"k%d" % i, value=fill * 100_000) for i in range(3)]  # 300 KB values: pooled
        (out,) = pr.decode_to_arrow(encode_batch(records, now_ms=NOW_MS, base_offset=0), "t", 0, 0, 3,
                                    read_committed=False, native=True)
        return out

    held = batch_of(b"a")
    expected = held.to_pydict()
    for fill in (b"b", b"c", b"d"):
        later = batch_of(fill)  # dropped at once: its memory returns to the pool for the next one
        assert later.column("value").to_pylist() == [fill * 100_000] * 3
        del later
    assert held.to_pydict() == expected
    held.validate(full=True)


def test_building_arrow_batches_does_not_import_pandas() -> None:
    """Spark's Python workers do not import pandas; ``pa.scalar`` would (pyarrow checks for pandas
    types), costing each fresh worker ~0.25 s of CPU on its first batch. Checked in a fresh
    interpreter, as a worker starts."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from oncestream.protocol.records import NewRecord, encode_batch\n"
        "from oncestream.spark import partition_reader as pr\n"
        "blob = encode_batch([NewRecord(key=b'k', value=b'v', headers=(('h', b'x'),))], now_ms=0, base_offset=0)\n"
        "(batch,) = pr.decode_to_arrow(blob, 'topic', 3, 0, 1, read_committed=True, native=True)\n"
        "assert batch.column('topic').to_pylist() == ['topic'] and batch.column('partition').to_pylist() == [3]\n"
        "batch.drop_columns(['headers'])\n"
        "print('pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False", out.stderr
