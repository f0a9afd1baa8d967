"""CPU and page faults of the Spark source's task body alone (``partition_reader.read_range``).

Why beside ``spark_read.py``: that benchmark compares whole Spark queries with librdkafka and is
noisy on a shared machine; this one measures only the Python worker's part of the read (Fetch,
response parsing, Arrow building) in this process, as process user+sys CPU seconds and minor page
faults per run (``getrusage(RUSAGE_SELF)``: the broker is a separate process and is not counted).
It fills a 2-partition topic with ``--records`` records of ``--record-bytes`` bytes (200000 x 1 KiB
is 205 MB), reads it once to warm up, then reads it ``--rounds`` times and prints each run.

    PYTHONPATH=src .venv/bin/python bench/read_range_cpu.py --records 200000 --rounds 5

It refuses to run without the C column builder built in the checkout it runs from (``python
setup.py build_ext --inplace``): it would otherwise measure the pure-Python builder. It runs
unchanged on older checkouts (before and after a change: run it from each); ``fetch_buffers_ab.py``
compares variants of the receive path in one process, which is steadier on a shared machine.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench")]

from oncestream.broker_process import OnceStreamBroker  # noqa: E402
from oncestream.spark.arrow_columns import native_available  # noqa: E402
from oncestream.spark.partition_reader import OffsetRange, read_range  # noqa: E402
from spark_pipeline import _create_topics, _fill  # noqa: E402
from topic_offsets import high_watermarks  # noqa: E402

PARTITIONS = 2


def _read_all(bootstrap: str, topic: str, ends: list[int]) -> int:
    """Read every partition as a Spark task does (``read_range`` makes its own client)."""
    rows = 0
    for partition, end in enumerate(ends):
        rows += sum(batch.num_rows for batch in read_range(OffsetRange(topic, partition, 0, end, bootstrap, True, True)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record-bytes", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if not native_available():
        raise SystemExit("the C column builder is not built in this checkout: python setup.py build_ext --inplace")
    with tempfile.TemporaryDirectory() as work:
        broker = OnceStreamBroker(Path(work) / "data")
        broker.start()
        try:
            _create_topics(broker.bootstrap, PARTITIONS, "in")
            _fill(broker.bootstrap, "in", args.records, args.record_bytes)
            ends = list(high_watermarks(broker.bootstrap, "in", PARTITIONS).values())
            if _read_all(broker.bootstrap, "in", ends) != args.records:  # warm-up, and a check
                raise SystemExit("read back a different number of records")
            cpu_s, faults = [], []
            for round_no in range(args.rounds):
                before = resource.getrusage(resource.RUSAGE_SELF)
                started = time.perf_counter()
                rows = _read_all(broker.bootstrap, "in", ends)
                wall_s = time.perf_counter() - started
                after = resource.getrusage(resource.RUSAGE_SELF)
                user_s, sys_s = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
                cpu_s.append(user_s + sys_s)
                faults.append(after.ru_minflt - before.ru_minflt)
                print(f"run {round_no}: rows {rows} wall {wall_s:.3f}s user {user_s:.3f}s sys {sys_s:.3f}s "
                      f"cpu {user_s + sys_s:.3f}s minflt {faults[-1]}", flush=True)
            print(f"median cpu {statistics.median(cpu_s):.3f}s minflt {statistics.median(faults):.0f}")
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
