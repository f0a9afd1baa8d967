"""Receive-path variants of the Spark source's Fetch, compared in one process (A/B, interleaved).

Variants (each a ``LogClient`` the partition reader is handed):

- ``kio-copy``: the path before ``protocol/fetch_response_view`` (commit e8f43b6): kio decodes the
  response and copies each partition's records into a new ``bytes``;
- ``view``: today's path: the response frame is received into one ``bytearray`` and the records
  stay a ``memoryview`` of it;
- ``view+mimalloc``, ``view+jemalloc``, ``view+system``: the same, with the frame received into a
  buffer from a pyarrow memory pool (``pa.allocate_buffer``: uninitialized memory, no zero-fill)
  instead of a ``bytearray``; measured and not adopted (docs/benchmarks.md).

Every round reads the whole topic once per variant, in a shuffled order (no variant always runs
first or after the same one); the first round is a warm-up. Figures are this process's user+sys
CPU seconds and minor page faults per read (``getrusage``; the broker is another process).
``--fetch-only`` fetches the same ranges without decoding (the receive path alone).

    PYTHONPATH=src .venv/bin/python bench/fetch_buffers_ab.py --rounds 30
    PYTHONPATH=src .venv/bin/python bench/fetch_buffers_ab.py --rounds 10 --fetch-only
"""

from __future__ import annotations

import argparse
import datetime
import random
import resource
import statistics
import struct
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench")]

import pyarrow as pa  # noqa: E402

from oncestream.broker_process import OnceStreamBroker  # noqa: E402
from oncestream.client.connection import BrokerConnection, BrokerUnreachableError  # noqa: E402
from oncestream.protocol.api_keys import FETCH  # noqa: E402
from oncestream.protocol.batch_walk import complete_batches_end  # noqa: E402
from oncestream.protocol.codec import build  # noqa: E402
from oncestream.spark.arrow_columns import native_available  # noqa: E402
from oncestream.spark.log_client import FetchResult, LogClient  # noqa: E402
from oncestream.spark.partition_reader import OffsetRange, read_range  # noqa: E402
from read_range_cpu import PARTITIONS, _end_offsets  # noqa: E402
from spark_pipeline import _create_topics, _fill  # noqa: E402

_SIZE = struct.Struct(">i")


class KioCopyClient(LogClient):
    """``fetch`` as it was before the view reader: kio decodes, the records are copied to bytes."""

    def fetch(self, tp, offset, *, max_bytes, read_committed, max_wait_ms=500, partition_max_bytes=None,
              min_bytes=1) -> FetchResult:
        per_partition = max_bytes if partition_max_bytes is None else partition_max_bytes
        conn = self._node(self._leader(tp))

        def make(m):
            return build(
                m.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(milliseconds=max_wait_ms),
                min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=1 if read_committed else 0,
                session_id=0, session_epoch=-1,
                topics=(build(m.FetchTopic, topic=tp[0], partitions=(
                    build(m.FetchPartition, partition=tp[1], current_leader_epoch=-1, fetch_offset=offset,
                          last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=per_partition),)),),
                forgotten_topics_data=(), rack_id="")

        (topic,) = conn.call(FETCH, make).responses
        (part,) = topic.partitions
        return FetchResult(error=part.error_code, records=bytes(part.records or b""),  # bytes, as it was then
                           aborted=tuple((int(a.producer_id), int(a.first_offset))
                                         for a in (part.aborted_transactions or ())),
                           high_watermark=int(part.high_watermark), last_stable_offset=int(part.last_stable_offset),
                           log_start_offset=int(part.log_start_offset))


def _pool_client(pool: pa.MemoryPool) -> type[LogClient]:
    """A LogClient whose connections receive each response frame into a buffer of ``pool``."""

    class PoolConnection(BrokerConnection):
        def _recv_frame(self) -> memoryview:
            (size,) = _SIZE.unpack(self._recv_exact(4))
            view = memoryview(pa.allocate_buffer(size, memory_pool=pool)).cast("B")
            got = 0
            while got < size:
                n = self._sock.recv_into(view[got:])
                if not n:
                    raise BrokerUnreachableError("closed")
                got += n
            return view.toreadonly()

    class PoolClient(LogClient):
        def _connect(self, host: str, port: int) -> BrokerConnection:
            return PoolConnection(host, port, client_id=self._client_id, timeout_s=self._timeout_s,
                                  max_versions={FETCH: 12})

    return PoolClient


VARIANTS: dict[str, type[LogClient]] = {
    "kio-copy": KioCopyClient,
    "view": LogClient,
    "view+mimalloc": _pool_client(pa.mimalloc_memory_pool()),
    "view+jemalloc": _pool_client(pa.jemalloc_memory_pool()),
    "view+system": _pool_client(pa.system_memory_pool()),
}


def _read(client_class: type[LogClient], bootstrap: str, ends: list[int]) -> int:
    rows = 0
    for partition, end in enumerate(ends):
        with client_class(bootstrap, client_id="oncestream-spark-source") as client:
            rng = OffsetRange("in", partition, 0, end, bootstrap, True, True)
            rows += sum(batch.num_rows for batch in read_range(rng, client))
    return rows


def _fetch_only(client_class: type[LogClient], bootstrap: str, ends: list[int]) -> int:
    rows = 0
    for partition, end in enumerate(ends):
        with client_class(bootstrap, client_id="oncestream-spark-source") as client:
            position = 0
            while position < end:
                result = client.fetch(("in", partition), position, max_bytes=50 << 20, read_committed=True,
                                      partition_max_bytes=4 << 20)
                after = complete_batches_end(result.records)[1]
                rows += after - position
                position = after
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record-bytes", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--fetch-only", action="store_true", help="fetch without decoding")
    args = parser.parse_args()
    if not native_available():
        raise SystemExit("the C column builder is not built in this checkout: python setup.py build_ext --inplace")
    run: Callable[[type[LogClient], str, list[int]], int] = _fetch_only if args.fetch_only else _read
    with tempfile.TemporaryDirectory() as work:
        broker = OnceStreamBroker(Path(work) / "data")
        broker.start()
        try:
            _create_topics(broker.bootstrap, PARTITIONS, "in")
            _fill(broker.bootstrap, "in", args.records, args.record_bytes)
            ends = _end_offsets(broker.bootstrap, "in")
            samples: dict[str, list[tuple[float, float, int]]] = {name: [] for name in VARIANTS}
            order = list(VARIANTS)
            shuffle = random.Random(1)
            for round_no in range(args.rounds + 1):
                shuffle.shuffle(order)
                for name in order:
                    before = resource.getrusage(resource.RUSAGE_SELF)
                    if run(VARIANTS[name], broker.bootstrap, ends) != args.records:
                        raise SystemExit(f"{name} read a different number of records")
                    after = resource.getrusage(resource.RUSAGE_SELF)
                    if round_no:  # round 0 warms up
                        samples[name].append((after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime,
                                              after.ru_minflt - before.ru_minflt))
            for name, runs in samples.items():
                user_s = statistics.median(u for u, _, _ in runs)
                sys_s = statistics.median(s for _, s, _ in runs)
                print(f"{name:14s} cpu median {statistics.median(u + s for u, s, _ in runs):.3f}s "
                      f"(user {user_s:.3f}, sys {sys_s:.3f}) minflt median {statistics.median(f for _, _, f in runs):.0f}")
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
