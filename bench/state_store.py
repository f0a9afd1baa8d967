"""Transactional state store (issue 13) benchmarks: recovery after SIGKILL vs wipe-and-replay,
materializer throughput vs a plain consumer, and RocksDB vs SQLite vs LMDB as the backend.

    .venv/bin/python bench/state_store.py backends                 # ~1 min, no broker
    .venv/bin/python bench/state_store.py changelog --keys 1000000 # recovery + throughput, one broker
    .venv/bin/python bench/state_store.py open --keys 1000000      # store open after SIGKILL, full WAL
    .venv/bin/python bench/state_store.py apply --keys 300000      # per-record CPU of each step, no broker

``backends``: the store's write pattern on each engine: ``--keys`` puts in windows of
``--window`` distinct keys, each window committed as one atomic, fsynced transaction together
with a changelog offset (RocksDB WriteBatch with sync WAL; SQLite WAL mode, synchronous=FULL;
LMDB sync write txn), then ``--keys`` random point gets, then a full ordered scan.

``changelog``: one broker, a changelog topic of ``--keys`` distinct keys (100-byte values) over
``--partitions`` partitions.
1. throughput, ``--throughput-rounds`` alternating rounds: a plain consumer (oncestream.client,
   read_committed, manual assignment) reads the topic to the end; the materializer (same client
   inside) reads, applies and commits it to the end into a fresh store, in the same process.
   Ratio of records/s, medians.
2. ``--window`` more records are produced (overwrites), a materializer process applies them and
   is SIGKILLed at its commit (test-only crash point before-batch): a store of ``--keys`` keys
   with a lost uncommitted window, as a crashed Kafka Streams task leaves it. That directory is
   copied aside.
3. ``--recovery-rounds`` alternating rounds, each on a fresh copy of the crashed directory or an
   empty one (written back with ``sync`` before the clock starts, and the benchmark's own garbage
   collected before an in-process round): recovery of the transactional store (RocksDB WAL
   recovery, nothing replayed, the lost window re-read from the stored offsets) vs wipe-and-replay of the whole changelog (what
   KIP-892 replaces under EOS), each timed as a process (``python -m
   oncestream.state.materializer --stop-when-caught-up``: spawn to exit, i.e. interpreter start,
   imports, connect, open, catch up, final commit) and in-process (from ``Materializer(...)`` to
   caught up and committed). Medians, each round printed, with the load average, and the
   transactional in-process round's phases (each phase's end, ms since ``Materializer(...)``:
   store open, metadata, ListOffsets, assign, first records, caught up, committed).

``apply``: no broker; ``--keys`` records (100-byte values) in batches of 500 as one fetch
response; CPU time per record (process CPU, RocksDB's threads included) of each step of the
materializer's path against the plain consumer's decoding: decoding to messages (the client's
decoder), decoding to columns, applying the columns to a store (``apply_columns``), committing
(synced write, background flush), and the message path's apply (``apply_messages``) for
comparison. Best of ``--throughput-rounds``.

This is a benchmark command, not a test.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import signal
import sqlite3
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.topic_offsets import high_watermarks

from tests.support.brokers import BrokerProcess
from tests.support.clients import create_topic
from tests.support.faults import child_environment

VALUE_BYTES = 100
OFFSET = struct.Struct(">q")


def _key(i: int) -> bytes:
    return b"key%09d" % i


def _value(i: int, generation: int = 0) -> bytes:
    head = b"g%d-%d-" % (generation, i)
    return head + b"v" * (VALUE_BYTES - len(head))


# --- backends ----------------------------------------------------------------------------------

class RocksBackend:
    name = "RocksDB (rocksdict 0.3.29)"

    def __init__(self, path: Path) -> None:
        import rocksdict

        self._r = rocksdict
        opts = rocksdict.Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.create_missing_column_families(True)
        opts.set_atomic_flush(True)
        self.db = rocksdict.Rdict(str(path), opts, column_families={"offsets": rocksdict.Options(raw_mode=True)})
        self.cf = self.db.get_column_family_handle("offsets")
        self.sync = rocksdict.WriteOptions()
        self.sync.sync = True

    def commit(self, window: dict[bytes, bytes], offset: int) -> None:
        batch = self._r.WriteBatch(raw_mode=True)
        for k, v in window.items():
            batch.put(k, v)
        batch.put(b"changelog-0", OFFSET.pack(offset), self.cf)
        self.db.write(batch, self.sync)

    def get(self, key: bytes) -> bytes | None:
        return self.db.get(key)

    def scan(self) -> int:
        it = self.db.iter()
        it.seek_to_first()
        n = 0
        while it.valid():
            n += 1
            it.next()
        return n

    def close(self) -> None:
        del self.cf
        self.db.close()


class SqliteBackend:
    name = f"SQLite {sqlite3.sqlite_version} (WAL, synchronous=FULL)"

    def __init__(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(path / "store.db", isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID")
        self.db.execute("CREATE TABLE IF NOT EXISTS offsets (tp TEXT PRIMARY KEY, o INTEGER NOT NULL)")

    def commit(self, window: dict[bytes, bytes], offset: int) -> None:
        self.db.execute("BEGIN")
        self.db.executemany("INSERT OR REPLACE INTO kv VALUES (?, ?)", window.items())
        self.db.execute("INSERT OR REPLACE INTO offsets VALUES ('changelog-0', ?)", (offset,))
        self.db.execute("COMMIT")

    def get(self, key: bytes) -> bytes | None:
        row = self.db.execute("SELECT v FROM kv WHERE k = ?", (key,)).fetchone()
        return row[0] if row else None

    def scan(self) -> int:
        return sum(1 for _ in self.db.execute("SELECT k, v FROM kv ORDER BY k"))

    def close(self) -> None:
        self.db.close()


class LmdbBackend:
    name = "LMDB (py-lmdb, sync)"

    def __init__(self, path: Path) -> None:
        import lmdb

        self.env = lmdb.open(str(path), map_size=8 << 30, max_dbs=2, sync=True, metasync=True)
        self.kv = self.env.open_db(b"kv")
        self.offsets = self.env.open_db(b"offsets")
        self.read = self.env.begin(db=self.kv, buffers=False)
        self._reads = 0

    def commit(self, window: dict[bytes, bytes], offset: int) -> None:
        self.read.abort()
        with self.env.begin(write=True) as txn:
            txn.cursor(db=self.kv).putmulti(window.items())
            txn.put(b"changelog-0", OFFSET.pack(offset), db=self.offsets)
        self.read = self.env.begin(db=self.kv)

    def get(self, key: bytes) -> bytes | None:
        return self.read.get(key)

    def scan(self) -> int:
        return sum(1 for _ in self.read.cursor())

    def close(self) -> None:
        self.read.abort()
        self.env.close()


def run_backends(args: argparse.Namespace) -> None:
    keys = [_key(i) for i in range(args.keys)]
    rng = random.Random(1)
    lookups = [keys[rng.randrange(args.keys)] for _ in range(args.keys)]
    rows = []
    for backend_cls in (RocksBackend, SqliteBackend, LmdbBackend):
        with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
            backend = backend_cls(Path(tmp) / "db")
            start = time.perf_counter()
            commits = 0
            for lo in range(0, args.keys, args.window):
                window = {k: _value(i) for i, k in enumerate(keys[lo:lo + args.window], lo)}
                backend.commit(window, lo + len(window))
                commits += 1
            write_s = time.perf_counter() - start
            start = time.perf_counter()
            for key in lookups:
                backend.get(key)
            get_s = time.perf_counter() - start
            start = time.perf_counter()
            scanned = backend.scan()
            scan_s = time.perf_counter() - start
            assert scanned == args.keys, (backend_cls.name, scanned)
            backend.close()
            size = sum(f.stat().st_size for f in Path(tmp).rglob("*") if f.is_file())
            rows.append((backend_cls.name, args.keys / write_s, write_s / commits * 1000, args.keys / get_s,
                         args.keys / scan_s, size / 1e6))
            print(f"{backend_cls.name}: {rows[-1][1]:,.0f} puts/s committed, {rows[-1][3]:,.0f} gets/s", flush=True)
    print(f"\n{args.keys:,} keys, {VALUE_BYTES}-byte values, {args.window:,} keys per fsynced commit\n")
    print("| backend | puts/s (incl. commits) | ms per commit | random gets/s | scan keys/s | disk MB |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, puts, ms, gets, scan, mb in rows:
        print(f"| {name} | {puts:,.0f} | {ms:.1f} | {gets:,.0f} | {scan:,.0f} | {mb:.0f} |")


# --- open after SIGKILL with the WAL at its bound ------------------------------------------------

def run_open(args: argparse.Namespace) -> None:
    """Worst case of the store's own recovery: a child builds ``--keys`` keys in commits of
    ``--window`` records, then keeps committing until the WAL written since the last flush is
    just under ``flush_after_bytes`` (16 MiB) and SIGKILLs itself; the parent times
    ``StateStore(...)`` (RocksDB replays that WAL and writes it out) and a clean reopen."""
    from oncestream.state import StateStore
    from oncestream.state.store import DEFAULT_FLUSH_AFTER_BYTES

    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        store_dir = Path(tmp) / "store"
        child = f"""
import os, signal
from oncestream.state import StateStore
store = StateStore({str(store_dir)!r})
value = b"v" * {VALUE_BYTES}
i = 0
def window():
    global i
    store.put_many([(b"key%09d" % k, value) for k in range(i, i + {args.window})])
    i += {args.window}
    store.commit({{("changelog", 0): i}})
while i < {args.keys}:
    window()
while store._unflushed_bytes + 2 * {args.window} * ({VALUE_BYTES} + 40) < {DEFAULT_FLUSH_AFTER_BYTES}:
    window()
print(i, store._unflushed_bytes, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
        out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=False)
        keys, unflushed = (int(x) for x in out.stdout.split())
        wal = sum(f.stat().st_size for f in (store_dir / "rocksdb").glob("*.log"))
        start = time.perf_counter()
        store = StateStore(store_dir)
        open_s = time.perf_counter() - start
        assert store.committed_offsets() == {("changelog", 0): keys}
        store.close()
        start = time.perf_counter()
        StateStore(store_dir).close()
        clean_s = time.perf_counter() - start
    print(f"store of {keys:,} keys SIGKILLed with {unflushed / 1e6:.1f} MB committed since the last flush "
          f"({wal / 1e6:.1f} MB of WAL files): open after SIGKILL {open_s * 1000:.0f} ms, "
          f"clean reopen {clean_s * 1000:.0f} ms")


# --- changelog: throughput and recovery ---------------------------------------------------------

def _produce(bootstrap: str, topic: str, partitions: int, ids: range, generation: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                         "queue.buffering.max.messages": 1_000_000, "enable.idempotence": True})
    for i in ids:
        while True:
            try:
                producer.produce(topic, _value(i, generation), key=_key(i), partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0


def _plain_consume(bootstrap: str, topic: str, partitions: int, total: int) -> tuple[float, float]:
    """(seconds to read ``total`` records, CPU seconds of this process meanwhile: every thread,
    the consumer's I/O thread included)."""
    from oncestream.client import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "isolation.level": "read_committed",
                         "enable.auto.commit": False})
    gc.collect()  # as before a materializer round: the previous rounds' garbage is not this one's
    start, cpu_start = time.perf_counter(), time.process_time()
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    n = 0
    while n < total:
        for msg in consumer.consume(500, 1.0):
            if msg.error() is None:
                n += 1
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    consumer.close()
    return elapsed, cpu


def _time_phases(m: Any, source: Any, phases: dict[str, float], start: float, cpu0: float) -> None:
    """Wrap the materializer's store open and the source's calls made during ``start()`` so
    each records when it ended (seconds since ``start``, and process CPU seconds since ``cpu0``
    under ``NAME cpu``) into ``phases``."""
    def timed(name: str, fn: Any) -> Any:
        def run(*a: Any, **kw: Any) -> Any:
            try:
                return fn(*a, **kw)
            finally:
                phases.setdefault(name, time.perf_counter() - start)
                phases.setdefault(f"{name} cpu", time.process_time() - cpu0)
        return run

    m._open_store = timed("store open", m._open_store)
    source.partition_count = timed("metadata", source.partition_count)
    source.watermarks = timed("ListOffsets", source.watermarks)
    source.assign = timed("assign", source.assign)


def _materialize_in_process(bootstrap: str, topic: str, state_dir: Path, ends: dict[int, int],
                            phases_out: dict[str, float] | None = None) -> tuple[float, float, int, float]:
    """(seconds from creating the materializer to caught up and committed, seconds from after
    ``start()`` — store open, offsets checked, partitions assigned — to the same point, records
    applied, CPU seconds of this process over that second span: every thread, RocksDB's
    included)."""
    from oncestream.state.materializer import Materializer
    from oncestream.state.source import KafkaChangelogSource

    # Garbage of the previous rounds (a million-record replay, the throughput rounds) would be
    # collected during this one: a recovering process starts with a fresh heap.
    gc.collect()
    gc_pauses: list[float] = []
    gc_started: list[float] = []

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_started.append(time.perf_counter())
        elif gc_started:
            gc_pauses.append(time.perf_counter() - gc_started.pop())

    gc.callbacks.append(on_gc)
    start, cpu0 = time.perf_counter(), time.process_time()
    source = KafkaChangelogSource(bootstrap)
    m = Materializer(state_dir, topic, source)
    phases: dict[str, float] = {"source": time.perf_counter() - start, "source cpu": time.process_time() - cpu0}
    if phases_out is not None:
        _time_phases(m, source, phases, start, cpu0)
    m.start()
    started, cpu_start = time.perf_counter(), time.process_time()
    phases["start"], phases["start cpu"] = started - start, cpu_start - cpu0
    while any(m.positions().get((topic, p), 0) < end for p, end in ends.items()):
        if m.step(1.0) and "first records" not in phases:
            phases["first records"] = time.perf_counter() - start
            phases["first records cpu"] = time.process_time() - cpu0
    phases["caught up"], phases["caught up cpu"] = time.perf_counter() - start, time.process_time() - cpu0
    m.commit()  # applied and committed (durable): the point being measured
    end_s, cpu = time.perf_counter(), time.process_time() - cpu_start
    phases["committed"], phases["committed cpu"] = end_s - start, time.process_time() - cpu0
    gc.callbacks.remove(on_gc)
    phases["(gc pauses)"] = sum(gc_pauses)
    if phases_out is not None:
        phases_out.update(phases)
    m.close()  # RocksDB flushes its memtables on close: not part of catching up
    return end_s - start, end_s - started, m.applied_records, cpu


def _materializer_process(bootstrap: str, topic: str, state_dir: Path, events: Path,
                          crash: bool = False) -> tuple[float, int]:
    # The crash is injected into the store by the test tree's driver (no switch in shipped code).
    env = child_environment()
    entry = ["tests.support.materializer_with_crash", "--crash-point", "before-batch", "--"] if crash \
        else ["oncestream.state.materializer"]
    cmd = [sys.executable, "-m", *entry, "--bootstrap-server", bootstrap,
           "--topic", topic, "--state-dir", str(state_dir), "--events-file", str(events),
           "--commit-interval-ms", str(10**9 if crash else 1000), "--stop-when-caught-up"]
    start = time.perf_counter()
    rc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False).returncode
    elapsed = time.perf_counter() - start
    expected = -signal.SIGKILL if crash else 0
    assert rc == expected, f"materializer exited {rc}, expected {expected}"
    applied = [json.loads(line) for line in events.read_text().splitlines()]
    last = [e for e in applied if e["event"] in ("closed", "commit-begin")]
    return elapsed, last[-1]["applied"]


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f}/{five:.1f}"


def run_changelog(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp_name:
        tmp = Path(tmp_name)
        broker = BrokerProcess(data_dir=tmp / "broker").start()
        try:
            topic = "changelog"
            create_topic(broker.bootstrap, topic, partitions=args.partitions)
            t0 = time.perf_counter()
            _produce(broker.bootstrap, topic, args.partitions, range(args.keys), 0)
            print(f"produced {args.keys:,} records in {time.perf_counter() - t0:.1f}s ({_load()})", flush=True)
            ends = high_watermarks(broker.bootstrap, topic, args.partitions)

            # Alternate the two readers so drift of the shared machine lands on both; each
            # materializer round builds a fresh store (the last one is kept for the crash).
            plain_runs, mat_runs, plain_cpus, mat_cpus = [], [], [], []
            store_dir = tmp / "store"
            for round_number in range(1, args.throughput_rounds + 1):
                plain_s, plain_cpu = _plain_consume(broker.bootstrap, topic, args.partitions, args.keys)
                plain_runs.append(plain_s)
                plain_cpus.append(plain_cpu)
                shutil.rmtree(store_dir, ignore_errors=True)
                _total_s, mat_s, applied, mat_cpu = _materialize_in_process(broker.bootstrap, topic, store_dir, ends)
                assert applied == args.keys
                mat_runs.append(mat_s)
                mat_cpus.append(mat_cpu)
                print(f"throughput round {round_number}: plain consumer {args.keys / plain_s:,.0f} records/s "
                      f"({plain_cpu / args.keys * 1e6:.2f} us CPU/record); materializer {args.keys / mat_s:,.0f} "
                      f"records/s applied+committed ({mat_cpu / args.keys * 1e6:.2f} us CPU/record); "
                      f"ratio {plain_s / mat_s:.2f}x ({_load()})", flush=True)
            plain_s, mat_s = statistics.median(plain_runs), statistics.median(mat_runs)
            plain_cpu, mat_cpu = statistics.median(plain_cpus), statistics.median(mat_cpus)

            # One crash: --window more records, a materializer process applies them and is
            # SIGKILLed at its commit. Every recovery round starts from a copy of that directory
            # (the RocksDB files as the killed process left them, WAL included).
            _produce(broker.bootstrap, topic, args.partitions, range(args.window), 1)
            crash_s, lost = _materializer_process(broker.bootstrap, topic, store_dir, tmp / "crash.jsonl", crash=True)
            print(f"SIGKILLed with {lost:,} applied, uncommitted records ({crash_s:.1f}s)", flush=True)
            crashed = tmp / "crashed"
            shutil.copytree(store_dir, crashed)
            total = args.keys + args.window
            ends = high_watermarks(broker.bootstrap, topic, args.partitions)
            recover_dir, replay_dir = tmp / "recover", tmp / "replay"

            def fresh(directory: Path, copy_crashed: bool) -> Path:
                shutil.rmtree(directory, ignore_errors=True)
                if copy_crashed:
                    shutil.copytree(crashed, directory)
                # The copy dirtied the store's size in page cache; the crashed process's files
                # were written long before its crash. Written back now, so RocksDB's fsyncs while
                # opening do not wait behind the benchmark's own copy (both sides, every round).
                os.sync()
                return directory

            rows = []
            phase_rows: list[dict[str, float]] = []
            for n in range(1, args.recovery_rounds + 1):
                txn_s, reread = _materializer_process(broker.bootstrap, topic, fresh(recover_dir, True),
                                                      tmp / f"recover{n}.jsonl")
                replay_s, replayed = _materializer_process(broker.bootstrap, topic, fresh(replay_dir, False),
                                                           tmp / f"replay{n}.jsonl")
                assert replayed == total, replayed
                phases: dict[str, float] = {}
                txn_in_s, _, reread_in, _ = _materialize_in_process(broker.bootstrap, topic, fresh(recover_dir, True), ends,
                                                                    phases)
                phase_rows.append(phases)
                replay_phases: dict[str, float] = {}
                replay_in_s, _, replayed_in, _ = _materialize_in_process(broker.bootstrap, topic, fresh(replay_dir, False),
                                                                      ends, replay_phases)
                assert replayed_in == total, replayed_in
                # Process CPU (every thread of this process) from Materializer(...) to committed:
                # the work each side does, which the machine's load does not stretch as it
                # stretches wall time.
                txn_cpu, replay_cpu = phases["committed cpu"], replay_phases["committed cpu"]
                rows.append((txn_s, reread, replay_s, txn_in_s, reread_in, replay_in_s, txn_cpu, replay_cpu))
                print(f"recovery round {n}: process: transactional {txn_s:.2f}s re-reading {reread:,}, "
                      f"wipe-and-replay {replay_s:.2f}s replaying {replayed:,} ({replay_s / txn_s:.1f}x); in-process: "
                      f"{txn_in_s:.3f}s re-reading {reread_in:,}, {replay_in_s:.2f}s replaying {replayed_in:,} "
                      f"({replay_in_s / txn_in_s:.1f}x); in-process CPU {txn_cpu * 1000:.0f} ms vs "
                      f"{replay_cpu:.2f} s ({replay_cpu / txn_cpu:.1f}x) ({_load()})", flush=True)
                print("  transactional in-process phases, ms since Materializer(...) at each one's end, wall / process "
                      "CPU: " + ", ".join(f"{k} {v * 1000:.0f} / {phases.get(k + ' cpu', 0) * 1000:.0f}"
                                          for k, v in phases.items() if not k.endswith(" cpu")), flush=True)
            med = [statistics.median(r[i] for r in rows) for i in range(8)]
            names = list(dict.fromkeys(k for r in phase_rows for k in r))
            print("\ntransactional in-process phases, medians, ms since Materializer(...) at each one's end (CPU: "
                  "process CPU ms): " + ", ".join(
                      f"{k} {statistics.median(r[k] for r in phase_rows if k in r) * 1000:.0f}" for k in names))
            print(f"\nmedians of {args.recovery_rounds} alternating recovery rounds ({_load()}):")
            print("\n| measurement | transactional store | wipe-and-replay | ratio |\n| --- | ---: | ---: | ---: |")
            print(f"| recovery, in-process, from Materializer(...) to caught up and committed | {med[3]:.3f} s "
                  f"({med[4]:,.0f} records re-read) | {med[5]:.2f} s ({total:,} records) | {med[5] / med[3]:.1f}x |")
            print(f"| process CPU of the in-process recovery (every thread) | {med[6] * 1000:.0f} ms | "
                  f"{med[7]:.2f} s | {med[7] / med[6]:.1f}x |")
            print(f"| recovery, process spawn to exit | {med[0]:.2f} s ({med[1]:,.0f} records re-read) | "
                  f"{med[2]:.2f} s ({total:,} records) | {med[2] / med[0]:.1f}x |")
            print(f"\nthroughput, median of {args.throughput_rounds} alternating rounds")
            print(f"\n| reader | records/s | CPU per record |\n| --- | ---: | ---: |\n"
                  f"| plain consumer (oncestream.client) | {args.keys / plain_s:,.0f} | "
                  f"{plain_cpu / args.keys * 1e6:.2f} us |\n| materializer (applied + committed) | "
                  f"{args.keys / mat_s:,.0f} | {mat_cpu / args.keys * 1e6:.2f} us |"
                  f"\n\nratio materializer / plain consumer: {plain_s / mat_s:.2f}x (rounds "
                  f"{', '.join(f'{p / m:.2f}' for p, m in zip(plain_runs, mat_runs))})")
        finally:
            broker.stop()


def run_apply(args: argparse.Namespace) -> None:
    from oncestream.client.consumer.batch_reader import decode_columns, native_available
    from oncestream.client.consumer.fetch_decoder import decode_partition
    from oncestream.protocol.records import NewRecord, encode_batch
    from oncestream.state.store import StateStore

    n = args.keys
    data = b"".join(encode_batch([NewRecord(_value(i), _key(i)) for i in range(lo, min(n, lo + 500))],
                                 now_ms=0, base_offset=lo) for lo in range(0, n, 500))
    rounds = max(1, args.throughput_rounds)

    def best(label: str, run, prepare=None) -> float:
        times = []
        for _ in range(rounds):
            state = prepare() if prepare is not None else None
            start = time.process_time()
            run(state)
            times.append(time.process_time() - start)
        us = min(times) / n * 1e6
        print(f"| {label} | {us:.3f} us |", flush=True)
        return us

    print(f"{n:,} records, {len(data) / 1e6:.1f} MB of batches, C column builder: {native_available()} ({_load()})\n")
    print("| step | CPU per record (best of rounds) |\n| --- | ---: |")
    best("decode to messages (the plain consumer's decoder)",
         lambda _: decode_partition(data, "t", 0, 0, read_committed=True))
    best("decode to columns (C builder, keys and values cut into bytes)",
         lambda _: decode_columns(data, "t", 0, 0, read_committed=True))
    chunk = decode_columns(data, "t", 0, 0, read_committed=True)
    messages = decode_partition(data, "t", 0, 0, read_committed=True).messages
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp_name:
        stores: list[StateStore] = []

        def fresh_store() -> StateStore:
            for old in stores:
                old.close()
            stores.clear()
            directory = Path(tmp_name) / f"s{random.getrandbits(32)}"
            stores.append(StateStore(directory, uncommitted_max_bytes=1 << 40))
            return stores[-1]

        best("apply_columns (bulk: WriteBatch.put via map, index dict.update)",
             lambda store: store.apply_columns(chunk.keys, chunk.values), fresh_store)
        best("apply_messages (entry by entry, the previous path)",
             lambda store: store.apply_messages(messages), fresh_store)

        def filled() -> StateStore:
            store = fresh_store()
            store.apply_columns(chunk.keys, chunk.values)
            return store

        best("commit (synced write of the batch; the background flush it starts is not counted)",
             lambda store: store.commit({("t", 0): n}), filled)
        for old in stores:
            old.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("backends", "changelog", "open", "apply"))
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--window", type=int, default=10_000, help="uncommitted window (records)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--throughput-rounds", type=int, default=3,
                        help="alternating plain-consumer / materializer rounds (medians reported)")
    parser.add_argument("--recovery-rounds", type=int, default=3,
                        help="alternating recovery / wipe-and-replay rounds from the one crashed store (medians)")
    parser.add_argument("--tmp", default=None, help="directory for the stores (default: system temp)")
    args = parser.parse_args()
    if args.what == "backends":
        run_backends(args)
    elif args.what == "open":
        run_open(args)
    elif args.what == "apply":
        run_apply(args)
    else:
        run_changelog(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
