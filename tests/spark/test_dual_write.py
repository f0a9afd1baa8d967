"""The dual-write helper (KIP-939 pattern): each micro-batch goes to the log in a prepared
transaction and to the database together with its PreparedTxnState in one database transaction;
recovery completes or aborts. Under driver SIGKILLs the database and the log must agree, and both
must hold every input record exactly once."""

from __future__ import annotations

import sqlite3
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.spark.spark_support import DriverRun, committed_values, drain_in_session
from tests.spark.test_exactly_once_sink import _produce, _topics

pytestmark = [pytest.mark.spark, pytest.mark.chaos]


CRASH_STEPS = (("dual-after-prepare", 1), ("dual-after-db", 2))


def _run_with_crashes(tmp: Path, bootstrap: str, store: str, *, records: int = 300,
                      crashes: tuple[tuple[str, int], ...] = CRASH_STEPS,
                      random_kill: bool = True, spark: Any = None) -> tuple[list[bytes], str]:
    """Drivers SIGKILLed at each of ``crashes`` (step, batch), then (``random_kill``) one killed
    after its first batch, then one draining the input (available-now; in ``spark``, the test's
    own session, if given): (input values, output topic)."""
    topic_in, topic_out = f"in-{uuid.uuid4().hex[:8]}", f"out-{uuid.uuid4().hex[:8]}"
    _topics(bootstrap, topic_in, topic_out)
    expected = _produce(bootstrap, topic_in, 0, records)
    argv = ["--bootstrap", bootstrap, "--checkpoint", str(tmp / "checkpoint"), "--in-topic", topic_in,
            "--out-topic", topic_out, "--mode", "dualwrite", "--store", store, "--max-offsets", "60"]
    for step, batch in crashes:
        run = DriverRun(tmp / "logs", argv, crash_at=f"{step}:{batch}")
        run.wait(300)
        assert run.killed_itself(), f"{step}: driver ended with {run.process.returncode}:\n{run.stderr_tail()}"
    if random_kill:
        run = DriverRun(tmp / "logs", argv)
        run.wait_for_batches(1)
        run.kill()
    if spark is not None:
        drain_in_session(spark, argv)
    else:
        final = DriverRun(tmp / "logs", [*argv, "--available-now"])
        assert final.wait(300) == 0, final.stderr_tail()
    return expected, topic_out


def _check(expected: list[bytes], log_values: list[bytes], db_values: list[str]) -> None:
    want = Counter(expected)
    assert Counter(log_values) == want, f"log: missing {sorted((want - Counter(log_values)).elements())[:5]}"
    assert Counter(v.encode() for v in db_values) == want, "database and log disagree"


# The same crashes as the PostgreSQL case below, which is the default run's proof of the
# guarantee (a real database server); this one, the embedded store, runs with the slow soaks.
@pytest.mark.slow
@pytest.mark.timeout(900)  # four driver runs, each starting a JVM
def test_dual_write_sqlite_under_driver_sigkill(tmp_path, eos_broker):
    """SQLite (embedded default): crash after prepare, after the database commit, and at random."""
    db = tmp_path / "state.db"
    expected, topic_out = _run_with_crashes(tmp_path, eos_broker.bootstrap, f"sqlite:{db}")
    with sqlite3.connect(db) as conn:
        db_values = [r[0] for r in conn.execute("SELECT v FROM events")]
        (state,) = conn.execute("SELECT batch_id, prepared_txn_state FROM oncestream_dual_write").fetchall()
    _check(expected, [v for v in committed_values(eos_broker.bootstrap, topic_out)], db_values)
    assert state[0] >= 4
    assert ":" in state[1]


@pytest.mark.timeout(900)
def test_dual_write_postgres_under_driver_sigkill(tmp_path, eos_broker, postgres, spark):
    """PostgreSQL via psycopg: the same crashes, the same agreement (the last, draining run resumes
    the checkpoint in the test's own session: one driver JVM fewer)."""
    import psycopg

    dbname = f"dw_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {dbname}")
    dsn = postgres.dsn(dbname)
    expected, topic_out = _run_with_crashes(tmp_path, eos_broker.bootstrap, f"postgres:{dsn}", spark=spark)
    with psycopg.connect(dsn) as conn:
        db_values = [r[0] for r in conn.execute("SELECT v FROM events").fetchall()]
    _check(expected, [v for v in committed_values(eos_broker.bootstrap, topic_out)], db_values)
