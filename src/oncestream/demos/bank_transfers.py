"""Bank demo: a Spark streaming pipeline that stays exactly-once while its driver is SIGKILLed.

    python -m oncestream.demos.bank_transfers [--kills 3] [--rate 40]

1. A broker (``oncestream broker`` with two-phase commit) and an SQLite database of accounts.
2. A generator writes transfer requests (JSON) to ``transfers`` until the last kill; some are
   invalid.
3. The Spark driver (a subprocess with a checkpoint directory) runs two streaming queries:
   - validate: ``transfers`` -> drop invalid requests -> one debit and one credit event per
     transfer -> ``ledger``, through the exactly-once sink (KIP-939 two-phase commit);
   - apply: ``ledger`` -> ``dual_write``: balances and the applied entries change in SQLite in the
     same database transaction that stores the PreparedTxnState, and the applied entries go to the
     ``applied`` topic in the prepared transaction.
4. The demo SIGKILLs the whole driver (Python, JVM and workers) several times at random moments
   and restarts it from its checkpoint, showing progress.
5. At the end it checks, and exits non-zero on any violation: every valid transfer is in the
   ledger exactly once (one debit, one credit) and applied to the database exactly once; no
   invalid transfer is anywhere; the total balance is conserved; the database balances equal a
   replay of the ledger; the ``applied`` topic equals the database's applied entries.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from oncestream.broker_process import BrokerStartError, OnceStreamBroker
from oncestream.child_process import die_with_parent
from oncestream.client.producer.producer import Producer
from oncestream.spark.driver_python import launcher_path
from oncestream.spark.log_client import LogClient

ACCOUNTS = 20
INITIAL_BALANCE = 1_000
TOPICS = {"transfers": 2, "ledger": 2, "applied": 1}
READY_TIMEOUT_S = 30.0
DRIVER_START_TIMEOUT_S = 240.0
# A driver that exits by itself (a Spark-internal failure, not one of our kills) is restarted from
# its checkpoint, as a supervisor would; exactly-once must hold across those restarts too.
MAX_DRIVER_FAILURES = 2


class DemoFailure(Exception):
    """The demo could not run to the end (as opposed to a finished run whose checks failed)."""


# --- the Spark driver (runs in the subprocess) -------------------------------------------------


def _apply_ledger(tx, batch_df, batch_id: int) -> None:
    """Dual-write database side: apply each ledger entry to its balance, record it as applied."""
    entries = [json.loads(bytes(r.value)) for r in batch_df.select("value").collect()]
    tx.executemany("UPDATE accounts SET balance = balance + ? WHERE id = ?",
                   [(e["delta"], e["account"]) for e in entries])
    tx.executemany("INSERT INTO applied (transfer_id, account, delta, batch_id) VALUES (?, ?, ?, ?)",
                   [(e["transfer_id"], e["account"], e["delta"], batch_id) for e in entries])


def run_driver(bootstrap: str, checkpoint: Path, db_path: Path, available_now: bool) -> int:
    """The Spark driver: both queries, until killed (or until drained with ``available_now``)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    # The connector's streaming-source process starts through the launcher (Spark gives it 10 s
    # to connect back; see oncestream/spark/driver_python.py), unless the operator chose otherwise.
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", launcher_path())
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import oncestream.spark

    spark = (SparkSession.builder.master("local[2,4]").appName("oncestream-bank-demo")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             # A driver that is killed every few seconds: JIT tier 1 only starts it sooner.
             .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    oncestream.spark.register(spark)

    def stream(topic: str):
        return (spark.readStream.format("oncestream").option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", topic).option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", "1000").load())

    schema = "id STRING, src INT, dst INT, amount INT"
    requests = stream("transfers").select(F.from_json(F.col("value").cast("string"), schema).alias("t")).select("t.*")
    valid = requests.where(
        F.col("id").isNotNull() & (F.col("amount") > 0) & (F.col("src") != F.col("dst"))
        & F.col("src").between(0, ACCOUNTS - 1) & F.col("dst").between(0, ACCOUNTS - 1))
    entries = valid.select("id", F.explode(F.array(
        F.struct(F.col("src").alias("account"), (-F.col("amount")).alias("delta")),
        F.struct(F.col("dst").alias("account"), F.col("amount").alias("delta")),
    )).alias("e")).select(
        F.col("e.account").cast("string").cast("binary").alias("key"),
        F.to_json(F.struct(F.col("id").alias("transfer_id"), "e.account", "e.delta")).cast("binary").alias("value"))

    def validate_query():
        writer = (entries.writeStream.format("oncestream").option("kafka.bootstrap.servers", bootstrap)
                  .option("topic", "ledger").option("checkpointLocation", str(checkpoint / "validate")))
        return (writer.trigger(availableNow=True) if available_now
                else writer.trigger(processingTime="500 milliseconds")).start()

    def apply_query():
        writer = stream("ledger").writeStream.foreachBatch(oncestream.spark.dual_write(
            bootstrap_servers=bootstrap, transactional_id="bank-demo-apply",
            store=oncestream.spark.SqliteStore(db_path), apply=_apply_ledger,
            to_log=lambda df: df.select("key", "value"), topic="applied",
        )).option("checkpointLocation", str(checkpoint / "apply"))
        return (writer.trigger(availableNow=True) if available_now
                else writer.trigger(processingTime="500 milliseconds")).start()

    if available_now:
        # Drain in order: the apply query's target is fixed when it starts.
        for start in (validate_query, apply_query):
            query = start()
            query.awaitTermination()
    else:
        # Start the second query once the first has finished a micro-batch: two queries planning
        # their first jobs in the same instant of a fresh JVM have failed task deserialization
        # (java.io.OptionalDataException inside Spark) on this machine.
        validate = validate_query()
        while validate.isActive and validate.lastProgress is None:
            time.sleep(0.2)
        queries = [validate, apply_query()]
        while all(q.isActive for q in queries):
            time.sleep(0.5)
        for q in queries:
            q.awaitTermination()  # raises the failed query's error
    spark.stop()
    return 0


# --- the orchestrator --------------------------------------------------------------------------


def _start_broker(work: Path) -> OnceStreamBroker:
    """Our broker with two-phase commit on a free port, its data and log in the work dir."""
    broker = OnceStreamBroker(work / "broker", config={"transaction.two.phase.commit.enable": "true"},
                              log_file=work / "broker.log", ready_timeout_s=READY_TIMEOUT_S)
    try:
        return broker.start()  # type: ignore[return-value]
    except BrokerStartError as exc:
        raise DemoFailure(str(exc)) from None


def _init_database(db_path: Path) -> None:
    with sqlite3.connect(db_path) as conn:
        conn.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL)")
        conn.execute("CREATE TABLE applied (transfer_id TEXT NOT NULL, account INTEGER NOT NULL, "
                     "delta INTEGER NOT NULL, batch_id INTEGER NOT NULL)")
        conn.executemany("INSERT INTO accounts VALUES (?, ?)", [(i, INITIAL_BALANCE) for i in range(ACCOUNTS)])


class Generator(threading.Thread):
    """Writes transfer requests at a steady rate until stopped; about one in four is invalid."""

    def __init__(self, bootstrap: str, rate_per_s: float, seed: int) -> None:
        super().__init__(daemon=True, name="transfer-generator")
        self.bootstrap, self.rate_per_s = bootstrap, rate_per_s
        self.stop_event = threading.Event()
        self.rng = random.Random(seed)
        self.valid: dict[str, tuple[int, int, int]] = {}
        self.invalid: set[str] = set()
        self.sent = 0
        self.error: BaseException | None = None

    def _request(self, i: int) -> dict:
        rng = self.rng
        src, dst, amount = rng.randrange(ACCOUNTS), rng.randrange(ACCOUNTS), rng.randint(1, 200)
        kind = rng.randrange(12)
        if kind == 0:
            amount = -amount
        elif kind == 1:
            dst = src
        elif kind == 2:
            dst = ACCOUNTS + 5
        transfer_id = f"t{i:06d}"
        if amount > 0 and src != dst and 0 <= dst < ACCOUNTS:
            self.valid[transfer_id] = (src, dst, amount)
        else:
            self.invalid.add(transfer_id)
        return {"id": transfer_id, "src": src, "dst": dst, "amount": amount}

    def run(self) -> None:
        """Produce until stopped (idempotent, acks=all); errors are kept for the orchestrator."""
        try:
            producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True,
                                 "acks": "all", "linger.ms": 5})
            start = time.monotonic()
            i = 0
            while not self.stop_event.is_set():
                request = self._request(i)
                producer.produce("transfers", value=json.dumps(request).encode(), key=request["id"].encode())
                i += 1
                self.sent = i
                delay = start + i / self.rate_per_s - time.monotonic()
                if delay > 0:
                    producer.poll(0)
                    time.sleep(delay)
            if producer.flush(60):
                raise DemoFailure("generator: records left unacknowledged")
            producer.close(10)
        except BaseException as exc:  # noqa: BLE001 - reported by the orchestrator
            self.error = exc


class Driver:
    """The Spark driver subprocess, in its own session so a SIGKILL takes its whole group."""

    def __init__(self, work: Path, bootstrap: str, available_now: bool = False) -> None:
        self.log_path = work / "driver.log"
        argv = [sys.executable, "-m", "oncestream.demos.bank_transfers", "--driver", "--bootstrap", bootstrap,
                "--work", str(work)]
        if available_now:
            argv.append("--available-now")
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True, env=env, preexec_fn=die_with_parent)

    def alive(self) -> bool:
        """The driver process has not exited."""
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the driver's process group (Python driver + JVM) and reap it."""
        if self.alive():
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


def _applied_count(db_path: Path) -> int:
    try:
        with sqlite3.connect(db_path, timeout=5) as conn:
            return conn.execute("SELECT count(*) FROM applied").fetchone()[0]
    except sqlite3.Error:
        return -1


def _log_end(bootstrap: str, topic: str) -> int:
    with LogClient(bootstrap) as client:
        parts = client.metadata([topic])[topic]
        return sum(client.list_offsets([(topic, p) for p in parts], -1, read_committed=True).values())


def _read_topic(bootstrap: str, topic: str) -> list[dict]:
    """Every committed record of a topic (read_committed), decoded from JSON."""
    from oncestream.spark.partition_reader import OffsetRange, read_range

    out: list[dict] = []
    with LogClient(bootstrap) as client:
        parts = client.metadata([topic])[topic]
        tps = [(topic, p) for p in parts]
        starts = client.list_offsets(tps, -2, read_committed=False)
        ends = client.list_offsets(tps, -1, read_committed=True)
        for tp in tps:
            rng = OffsetRange(topic, tp[1], starts[tp], ends[tp], bootstrap, True, True)
            for batch in read_range(rng, client):
                out.extend(json.loads(v) for v in batch.column("value").to_pylist())
    return out


def _status(gen: Generator, bootstrap: str, db_path: Path, kills: int, note: str = "") -> None:
    try:
        ledger = _log_end(bootstrap, "ledger")
    except Exception:  # noqa: BLE001 - status only
        ledger = -1
    print(f"  transfers sent {gen.sent:5d} | ledger end offset {ledger:6d} | applied rows {_applied_count(db_path):6d}"
          f" | driver kills {kills}{'  ' + note if note else ''}", flush=True)


Entry = tuple[str, int, int]  # (transfer id, account, delta)


def find_violations(
    *,
    valid: dict[str, tuple[int, int, int]],
    invalid: set[str],
    ledger: list[dict],
    applied_log: list[dict],
    balances: dict[int, int],
    applied_db: list[Entry],
) -> list[str]:
    """The end-to-end invariants over what the run left behind; returns the violations (empty
    when everything holds).

    ``valid``: transfer id -> (src, dst, amount) of every valid request sent; ``invalid``: ids of
    the invalid ones; ``ledger`` and ``applied_log``: the decoded committed records of those topics;
    ``balances``: account -> balance in the database; ``applied_db``: its applied entries.
    """
    problems: list[str] = []
    expected_entries: Counter[Entry] = Counter()
    for tid, (src, dst, amount) in valid.items():
        expected_entries[(tid, src, -amount)] += 1
        expected_entries[(tid, dst, amount)] += 1
    ledger_entries = Counter((e["transfer_id"], e["account"], e["delta"]) for e in ledger)
    if ledger_entries != expected_entries:
        missing = expected_entries - ledger_entries
        extra = ledger_entries - expected_entries
        problems.append(f"ledger: {sum(missing.values())} entries missing, {sum(extra.values())} duplicated or "
                        f"foreign (e.g. {list(missing)[:3]} / {list(extra)[:3]})")
    if any(e["transfer_id"] in invalid for e in ledger):
        problems.append("ledger holds entries of invalid transfers")
    db_entries = Counter((t, a, d) for t, a, d in applied_db)
    if db_entries != expected_entries:
        problems.append(f"database: {sum((expected_entries - db_entries).values())} entries not applied, "
                        f"{sum((db_entries - expected_entries).values())} applied twice or foreign")
    log_applied = Counter((e["transfer_id"], e["account"], e["delta"]) for e in applied_log)
    if log_applied != db_entries:
        problems.append("the 'applied' topic and the database's applied entries disagree")
    total = sum(balances.values())
    if total != ACCOUNTS * INITIAL_BALANCE:
        problems.append(f"total balance {total} != {ACCOUNTS * INITIAL_BALANCE}")
    replay = {i: INITIAL_BALANCE for i in range(ACCOUNTS)}
    for e in ledger:
        # An entry for an account the bank does not have (an invalid transfer that got through)
        # starts from nothing, so it shows up in the comparison instead of raising KeyError.
        replay[e["account"]] = replay.get(e["account"], 0) + e["delta"]
    if replay != balances:
        diff = {a: (balances.get(a), replay[a]) for a in replay if balances.get(a) != replay[a]}
        problems.append(f"database balances differ from a replay of the ledger: {diff}")
    return problems


def check(bootstrap: str, db_path: Path, valid: dict[str, tuple[int, int, int]], invalid: set[str]) -> list[str]:
    """Read the topics and the database, then ``find_violations``; returns the violations."""
    ledger = _read_topic(bootstrap, "ledger")
    applied_log = _read_topic(bootstrap, "applied")
    with sqlite3.connect(db_path) as conn:
        balances = dict(conn.execute("SELECT id, balance FROM accounts").fetchall())
        applied_db = conn.execute("SELECT transfer_id, account, delta FROM applied").fetchall()
    problems = find_violations(valid=valid, invalid=invalid, ledger=ledger, applied_log=applied_log,
                               balances=balances, applied_db=applied_db)
    print(f"  ledger entries {len(ledger)} (valid transfers {len(valid)}, invalid {len(invalid)}), applied rows "
          f"{len(applied_db)}, applied topic {len(applied_log)}, total balance {sum(balances.values())}", flush=True)
    return problems


def report(problems: list[str]) -> int:
    """Print the verdict of the final checks; the demo's exit code (1 on any violation, else 0)."""
    for problem in problems:
        print(f"  VIOLATION: {problem}", flush=True)
    if not problems:
        print("  OK: every valid transfer is in the ledger and applied exactly once, the total balance is "
              "conserved, and the database equals a replay of the ledger", flush=True)
    return 1 if problems else 0


def _driver_failed(driver: Driver, failures: int) -> int:
    """Count a driver that exited by itself; DemoFailure past MAX_DRIVER_FAILURES."""
    failures += 1
    print(f"  the Spark driver exited by itself ({driver.process.returncode}); restarting it from its checkpoint "
          f"({failures}/{MAX_DRIVER_FAILURES}); see {driver.log_path}", flush=True)
    if failures > MAX_DRIVER_FAILURES:
        raise DemoFailure(f"driver failed {failures} times; see {driver.log_path}")
    return failures


def _await_progress(driver: Driver, db_path: Path) -> bool:
    """Wait until the driver has applied new rows (True) or has exited by itself (False)."""
    applied_before = _applied_count(db_path)
    deadline = time.monotonic() + DRIVER_START_TIMEOUT_S
    while _applied_count(db_path) <= applied_before:
        if not driver.alive():
            return False
        if time.monotonic() > deadline:
            raise DemoFailure(f"driver made no progress in {DRIVER_START_TIMEOUT_S:.0f} s; see {driver.log_path}")
        time.sleep(1)
    return True


def run_demo(kills: int, rate_per_s: float, seed: int, keep: bool) -> int:
    """Orchestrate: broker, database, generator, driver kills and restarts, final checks."""
    work = Path(tempfile.mkdtemp(prefix="oncestream-bank-"))
    rng = random.Random(seed)
    broker = _start_broker(work)
    bootstrap = broker.bootstrap
    driver: Driver | None = None
    succeeded = False
    try:
        with LogClient(bootstrap) as client:
            for topic, partitions in TOPICS.items():
                client.create_topic(topic, partitions)
        db_path = work / "bank.db"
        _init_database(db_path)
        print(f"bank demo: broker {bootstrap}, {ACCOUNTS} accounts x {INITIAL_BALANCE}, transfer requests at "
              f"{rate_per_s:.0f}/s, {kills} driver SIGKILLs; work dir {work}", flush=True)
        gen = Generator(bootstrap, rate_per_s, seed)
        gen.start()
        failures = 0
        round_no = 1
        while round_no <= kills:
            driver = Driver(work, bootstrap)
            if not _await_progress(driver, db_path):
                failures = _driver_failed(driver, failures)
                continue
            run_for = rng.uniform(2.0, 8.0)
            end = time.monotonic() + run_for
            while time.monotonic() < end:
                _status(gen, bootstrap, db_path, round_no - 1)
                time.sleep(min(2.0, max(0.0, end - time.monotonic())))
            driver.kill()
            _status(gen, bootstrap, db_path, round_no, f"<- SIGKILLed the Spark driver (pid {driver.process.pid})")
            round_no += 1
        gen.stop_event.set()
        gen.join()
        if gen.error is not None:
            raise DemoFailure(f"generator failed: {gen.error!r}")
        print("generator done; restarting the driver to drain everything (Trigger.AvailableNow)", flush=True)
        while True:
            driver = Driver(work, bootstrap, available_now=True)
            while driver.alive():
                _status(gen, bootstrap, db_path, kills, "(draining)")
                time.sleep(3)
            if driver.process.returncode == 0:
                break
            failures = _driver_failed(driver, failures)
        print(f"checks ({kills} driver SIGKILLs, {failures} driver restarts after a failure of its own):", flush=True)
        code = report(check(bootstrap, db_path, gen.valid, gen.invalid))
        succeeded = code == 0
        return code
    finally:
        if driver is not None:
            driver.kill()
        broker.stop()
        if succeeded and not keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"work directory kept for inspection: {work}", flush=True)


def main(argv: list[str] | None = None) -> int:
    """Entry point: the demo, or (``--driver``) the Spark driver subprocess it runs."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=40.0, help="transfer requests per second")
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--seed", type=int, default=939)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--driver", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--available-now", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.driver:
        work = Path(args.work)
        return run_driver(args.bootstrap, work / "checkpoint", work / "bank.db", args.available_now)
    try:
        return run_demo(args.kills, args.rate, args.seed, args.keep)
    except DemoFailure as exc:
        print(f"bank demo could not finish: {exc}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
