"""Source task body A/B benchmark (not a test): ``read_range`` of two checkouts on the same topic.

    .venv/bin/python bench/read_range_ab.py --base /path/to/checkout-a [--after .] [--records 100000] [--rounds 4]

One oncestream broker on a free port, one topic of 2 partitions filled by librdkafka with 1 KiB
values. Each round runs one child process per checkout (alternating which goes first), with that
checkout's ``src`` first on its path; each child reads the whole topic ``--reads`` times through
``oncestream.spark.partition_reader.read_range`` (no Spark: the Python side of a source task) and
reports wall seconds and the process's CPU seconds (all its threads) per read. The first read of
each child (imports, connections) is left out. Medians per checkout are printed. Steadier than
bench/spark_read.py on a shared machine, because no JVM takes part.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (str(ROOT / "src"), str(ROOT), str(ROOT / "bench")):
    if path not in sys.path:
        sys.path.insert(0, path)

from oncestream.broker_process import OnceStreamBroker  # noqa: E402
from spark_pipeline import _create_topics, _fill  # noqa: E402

PARTITIONS = 2
CHILD = r"""
import json, sys, time
from oncestream.spark.log_client import ClientSettings, LogClient
from oncestream.spark.partition_reader import OffsetRange, read_range
bootstrap, partitions, reads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with LogClient(bootstrap) as client:
    ends = client.list_offsets([("in", p) for p in range(partitions)], -1, read_committed=True)
out = []
for _ in range(reads):
    t0, c0, rows = time.perf_counter(), time.process_time(), 0
    for p in range(partitions):
        rng = OffsetRange("in", p, 0, ends[("in", p)], bootstrap, True, True, ClientSettings())
        rows += sum(batch.num_rows for batch in read_range(rng))
    out.append((time.perf_counter() - t0, time.process_time() - c0, rows))
print(json.dumps(out))
"""


def _child(checkout: Path, bootstrap: str, reads: int) -> list[tuple[float, float, int]]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join((str(checkout / "src"), str(checkout))))
    done = subprocess.run([sys.executable, "-c", CHILD, bootstrap, str(PARTITIONS), str(reads)], env=env,
                          capture_output=True, text=True, check=True, timeout=600)
    return [tuple(r) for r in json.loads(done.stdout.strip().splitlines()[-1])]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="checkout A (e.g. a worktree of main)")
    parser.add_argument("--after", type=Path, default=ROOT, help="checkout B (default: this one)")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--record-bytes", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--reads", type=int, default=3, help="reads per child process (the first is left out)")
    args = parser.parse_args()
    checkouts = {"base": args.base.resolve(), "after": args.after.resolve()}
    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="oncestream-read-range-ab-"))
    broker = OnceStreamBroker(work / "data")
    broker.start()
    try:
        _create_topics(broker.bootstrap, PARTITIONS, "in")
        _fill(broker.bootstrap, "in", args.records, args.record_bytes)
        runs: dict[str, list[tuple[float, float, int]]] = {name: [] for name in checkouts}
        for r in range(args.rounds):
            for name in (list(checkouts) if r % 2 == 0 else list(checkouts)[::-1]):
                got = _child(checkouts[name], broker.bootstrap, args.reads)
                if any(rows != args.records for _, _, rows in got):
                    raise SystemExit(f"{name} read {[rows for _, _, rows in got]} rows, not {args.records}")
                runs[name] += got[1:]
    finally:
        broker.stop()
    mb = args.records * args.record_bytes / 1e6
    print(f"load average before: {load_before}, after: {os.getloadavg()}")
    for name, got in runs.items():
        wall = statistics.median(w for w, _, _ in got)
        cpu = statistics.median(c for _, c, _ in got)
        print(f"{name} ({checkouts[name]}): median {mb / wall:.0f} MB/s wall, {cpu:.3f} CPU-s per read of "
              f"{mb:.0f} MB ({len(got)} reads)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
