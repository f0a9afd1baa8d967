"""Where our broker spends its CPU during a librdkafka produce: per thread (the event loop's, each
TLS connection's pump thread, the rest), over SSL and over PLAINTEXT, alternating, same workload
as bench/produce_consume.py (whose broker start, topic creation and producer it reuses).

The event loop is the broker's one Python thread that every connection waits behind, so its CPU
per GB is the figure a busy or quiet machine cannot change much; the pump threads run beside it.
Threads are read from /proc/PID/task/*/stat every 0.2 s, so a pump thread that ends (the bootstrap
connection's) still counts.

    PYTHONPATH=src:. .venv/bin/python bench/tls_produce_threads.py --rounds 2 --size-mb 100 --record-size 1024
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import produce_consume as pc  # the sibling benchmark's broker and producer
from tests.support.certs import make_pki

_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def _thread_cpu_s(pid: int) -> dict[int, float]:
    out: dict[int, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        out[int(tid)] = (int(fields[11]) + int(fields[12])) * _TICK_S  # utime + stime
    return out


def one_round(protocol: str, record_size: int, size_mb: float, work_dir: Path) -> str:
    pc.TLS_PKI = make_pki(work_dir / f"pki-{uuid.uuid4().hex[:6]}") if protocol == "SSL" else None
    broker = pc.start_broker("ours", work_dir)
    try:
        topic = f"threads-{uuid.uuid4().hex[:8]}"
        pc.create_topic(broker.bootstrap, topic, None, 1)
        pc.create_topic(broker.bootstrap, f"{topic}-warmup")
        before = _thread_cpu_s(broker.pid)
        process_before_s = pc.process_cpu_s(broker.pid)
        latest: dict[int, float] = {}
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                latest.update(_thread_cpu_s(broker.pid))
                time.sleep(0.2)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        produced = pc.produce(pc.client_connection(broker), topic, int(size_mb * pc.MB) // record_size,
                              os.urandom(record_size), f"{topic}-warmup")
        done.set()
        sampler.join()
        latest.update(_thread_cpu_s(broker.pid))
        gb = produced.payload_bytes / 1e9
        process_s = pc.process_cpu_s(broker.pid) - process_before_s
        used = {tid: cpu_s - before.get(tid, 0.0) for tid, cpu_s in latest.items()}
        loop_s = used.pop(broker.pid, 0.0)  # the main thread runs the event loop
        new_s = sum(cpu_s for tid, cpu_s in used.items() if tid not in before)  # the TLS pumps (none on PLAINTEXT)
        other_s = sum(cpu_s for tid, cpu_s in used.items() if tid in before)
        return (f"| {protocol} | {record_size} | {produced.mb_per_s:.1f} | {process_s / gb:.1f} | {loop_s / gb:.1f} |"
                f" {new_s / gb:.1f} | {other_s / gb:.1f} | {os.getloadavg()[0]:.1f} |")
    finally:
        pc.stop_broker(broker)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--size-mb", type=float, default=100)
    parser.add_argument("--record-size", type=int, default=1024)
    args = parser.parse_args()
    pc.PARTITIONS = 1
    work_dir = Path(tempfile.mkdtemp(prefix="oncestream-bench-threads-"))
    print("| listener | record B | produce MB/s | process CPU s/GB | loop thread | pump threads | other threads |"
          " load (1 min) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for _ in range(args.rounds):
        for protocol in ("SSL", "PLAINTEXT"):
            print(one_round(protocol, args.record_size, args.size_mb, work_dir), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
