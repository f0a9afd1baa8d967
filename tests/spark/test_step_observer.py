"""The connector's extension points (``oncestream.spark.plugins``: ``stepObserver``,
``triggerClock``) and the test faults plugged into them (``tests/support/spark_faults.py``),
without a Spark session; and the guard that the connector reads no test option or variable.

The faults' effect on real queries is checked where they are used: test_sink_failures.py,
test_exactly_once_sink.py, test_dual_write.py, test_local_cluster.py, test_option_parity.py."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

from oncestream.spark import plugins
from oncestream.spark.errors import OptionError
from oncestream.spark.options import sink_options, source_options
from oncestream.spark.txn_resolution import HeldTransactions, Outcome
from tests.support import spark_faults
from tests.support.spark_faults import (
    CLOCK_CLASS,
    FAULTS_CLASS,
    FileClock,
    InjectedTaskFailure,
    SparkFaults,
    clock_options,
    fault_options,
)

pytestmark = pytest.mark.spark

SPARK_SRC = Path(__file__).resolve().parents[2] / "src" / "oncestream" / "spark"
BOOTSTRAP = {"kafka.bootstrap.servers": "127.0.0.1:1"}
STATE = "1000:3"


class Recorder:
    """A step observer keeping every step it is told about."""

    def __init__(self, config):
        self.config = dict(config)
        self.steps: list[tuple[str, dict]] = []

    def reached(self, step, info):
        self.steps.append((step, dict(info)))


def test_no_option_means_the_no_op_observer_and_the_monotonic_clock() -> None:
    opts = sink_options({**BOOTSTRAP, "topic": "out"})
    assert opts.step_observer is None
    assert isinstance(plugins.step_observer(opts.step_observer), plugins.NoSteps)
    read = source_options({**BOOTSTRAP, "subscribe": "in"}, streaming=True)
    assert read.trigger_clock is None
    assert isinstance(plugins.trigger_clock(read.trigger_clock), plugins.MonotonicClock)


def test_step_observer_option_names_a_class_and_hands_it_its_own_options() -> None:
    opts = sink_options({**BOOTSTRAP, "STEPOBSERVER": f"{__name__}:Recorder", "stepObserver.Gate": "/g",
                         "stepObserver.other": "x", "kafka.client.id": "c"})
    assert opts.step_observer is not None
    observer = plugins.step_observer(opts.step_observer)
    assert isinstance(observer, Recorder)
    assert observer.config == {"gate": "/g", "other": "x"}
    assert plugins.step_observer(opts.step_observer) is not observer  # one instance per use
    dotted = plugins.plugin_spec({"stepObserver": f"{__name__}.Recorder"}, plugins.STEP_OBSERVER_OPTION)
    assert dotted is not None
    assert dotted.load_class() is Recorder


@pytest.mark.parametrize(("value", "message"), [
    ("no_such_module_here:Observer", "cannot load"),
    (f"{__name__}:Missing", "cannot load"),
    (f"{__name__}:STATE", "is not a class"),
    ("Recorder", "expected module:Class"),
])
def test_a_step_observer_that_cannot_be_loaded_fails_by_the_option_name(value: str, message: str) -> None:
    with pytest.raises(OptionError, match=f"stepObserver.*{message}"):
        sink_options({**BOOTSTRAP, "stepObserver": value})


def test_observer_settings_without_the_observer_are_refused() -> None:
    with pytest.raises(OptionError, match=r"stepobserver\.gatedir are set but stepObserver is not"):
        sink_options({**BOOTSTRAP, "stepObserver.gateDir": "/tmp/g"})


def test_trigger_clock_option_plugs_a_clock_into_the_source(tmp_path) -> None:
    clock_file = tmp_path / "clock_ms"
    clock_file.write_text("1234")
    read = source_options({**BOOTSTRAP, "subscribe": "in", **clock_options(clock_file)}, streaming=True)
    assert read.trigger_clock is not None
    assert read.trigger_clock.class_name == CLOCK_CLASS
    clock = plugins.trigger_clock(read.trigger_clock)
    assert isinstance(clock, FileClock)
    assert clock.now_ms() == 1234.0
    clock_file.write_text("5000")
    assert clock.now_ms() == 5000.0


def test_fault_options_are_sink_options_for_spark_faults(tmp_path) -> None:
    opts = sink_options({**BOOTSTRAP, **fault_options(gate_dir=tmp_path, fail_after_prepare="0,2",
                                                      crash_at="after-record:3", kill_group=0)})
    assert opts.step_observer is not None
    assert opts.step_observer.class_name == FAULTS_CLASS
    faults = plugins.step_observer(opts.step_observer)
    assert isinstance(faults, SparkFaults)
    assert faults.gate_dir == tmp_path
    assert faults.fail_after_prepare == {0, 2}
    assert faults.crash_at == [("after-record", 3)]


def _task(partition: int, attempt: int, **extra) -> dict:
    return {"query_id": "q", "batch_id": 0, "partition": partition, "attempt": attempt,
            "transactional_id": f"p-q-0-{partition}-{attempt}-0", **extra}


def test_gates_do_nothing_without_a_gate_dir(tmp_path) -> None:
    SparkFaults({}).reached(plugins.TASK_BEFORE_PREPARE, _task(0, 0))
    SparkFaults({}).reached(plugins.TASK_AFTER_PREPARE, _task(0, 0, state=STATE))
    SparkFaults({"gateDir": str(tmp_path)}).reached(plugins.TASK_BEFORE_PREPARE, _task(0, 0))  # no fail-0
    assert list(tmp_path.iterdir()) == []


def test_fail_gate_raises_once_released(tmp_path) -> None:
    (tmp_path / "fail-1").touch()
    (tmp_path / "release").touch()
    faults = SparkFaults({"gatedir": str(tmp_path)})
    faults.reached(plugins.TASK_BEFORE_PREPARE, _task(0, 0))  # another partition passes
    with pytest.raises(InjectedTaskFailure, match="partition 1, attempt 2"):
        faults.reached(plugins.TASK_BEFORE_PREPARE, _task(1, 2))


def test_after_prepare_gate_reports_the_prepared_transaction(tmp_path) -> None:
    SparkFaults({"gatedir": str(tmp_path)}).reached(plugins.TASK_AFTER_PREPARE, _task(2, 1, state="1000:4"))
    assert (tmp_path / "prepared-2-1").read_text() == "p-q-0-2-1-0 1000:4\n"
    assert not list(tmp_path.glob("*.tmp"))


def test_crash_points_fire_per_step_and_batch(monkeypatch) -> None:
    crashes: list[tuple[str, int]] = []
    monkeypatch.setattr(SparkFaults, "_crash", lambda self, step, batch_id: crashes.append((step, batch_id)))
    faults = SparkFaults({"crashat": "after-record:3, dual-after-db"})
    for batch_id in (2, 3):
        for step in (plugins.BEFORE_RECORD, plugins.AFTER_RECORD, plugins.AFTER_COMPLETE):
            faults.reached(step, {"query_id": "q", "batch_id": batch_id, "transactions": {}})
    faults.reached(plugins.DUAL_AFTER_PREPARE, {"batch_id": 7, "transactional_id": "t", "state": STATE})
    faults.reached(plugins.DUAL_AFTER_DB, {"batch_id": 7, "transactional_id": "t", "state": STATE})
    assert crashes == [("after-record", 3), ("dual-after-db", 7)]


class _CompletingProducer:
    def __init__(self, txn_id: str, completed: list[str]) -> None:
        self.txn_id, self.completed = txn_id, completed

    def complete_transaction(self, state, timeout):
        self.completed.append(self.txn_id)
        return True

    def abort_transaction(self, timeout):
        pass


def _held(ids: list[str], completed: list[str]) -> HeldTransactions:
    held = HeldTransactions("127.0.0.1:1")
    for txn_id in ids:
        held._producers[txn_id] = _CompletingProducer(txn_id, completed)
        held.held[txn_id] = STATE
    return held


def test_finish_tells_the_observer_around_each_commit_but_not_around_aborts() -> None:
    completed: list[str] = []
    seen: list[tuple[str, str, list[str]]] = []
    lock = threading.Lock()

    def observe(step: str, txn_id: str) -> None:
        with lock:
            seen.append((step, txn_id, list(completed)))

    outcomes = _held(["a", "b", "c"], completed).finish({"a": STATE, "b": STATE}, observe=observe)
    assert outcomes == {"a": Outcome.COMMITTED, "b": Outcome.COMMITTED, "c": Outcome.ABORTED}
    for txn_id in ("a", "b"):
        steps = [(step, done) for step, t, done in seen if t == txn_id]
        assert [step for step, _ in steps] == [plugins.COMPLETING_TRANSACTION, plugins.COMPLETED_TRANSACTION]
        assert txn_id not in steps[0][1]
        assert txn_id in steps[1][1]
    assert all(t != "c" for _step, t, _done in seen)


def test_mid_complete_crashes_with_exactly_one_transaction_committed(monkeypatch) -> None:
    """The driver commits the batch's transactions in parallel: the fault lets the first through,
    holds the others, and crashes once the first is committed."""
    monkeypatch.setattr(spark_faults, "GATE_WAIT_S", 1.0)  # the held ones go on after the fake crash
    completed: list[str] = []
    crashes: list[tuple[str, int, list[str]]] = []
    monkeypatch.setattr(SparkFaults, "_crash",
                        lambda self, step, batch_id: crashes.append((step, batch_id, list(completed))))
    faults = SparkFaults({"crashAt": "mid-complete:4"})
    step = {"query_id": "q", "batch_id": 4, "transactions": dict.fromkeys("abc", STATE)}
    _held(["a", "b", "c"], completed).finish(
        dict.fromkeys("abc", STATE), observe=lambda name, txn_id: faults.reached(name, {**step, "transactional_id": txn_id}))
    assert len(crashes) == 1
    name, batch_id, committed_then = crashes[0]
    assert (name, batch_id) == ("mid-complete", 4)
    assert len(committed_then) == 1


def test_mid_complete_of_another_batch_holds_nothing(monkeypatch) -> None:
    monkeypatch.setattr(SparkFaults, "_crash", lambda self, step, batch_id: pytest.fail("no crash expected"))
    faults = SparkFaults({"crashAt": "mid-complete:4"})
    completed: list[str] = []
    step = {"query_id": "q", "batch_id": 5, "transactions": dict.fromkeys("ab", STATE)}
    _held(["a", "b"], completed).finish(
        dict.fromkeys("ab", STATE), observe=lambda name, txn_id: faults.reached(name, {**step, "transactional_id": txn_id}))
    assert sorted(completed) == ["a", "b"]


# Environment variables the connector may read: production switches, documented for users.
_ALLOWED_ENV = {"ONCESTREAM_NATIVE"}


def test_the_connector_reads_no_test_option_or_variable() -> None:
    """Issue 19, point 1: faults reach the connector through its extension points, never through an
    ``oncestream.test.*`` option or an ``ONCESTREAM_*`` test variable, and it imports no test hook."""
    offenders = []
    for path in sorted(SPARK_SRC.rglob("*.py")):
        text = path.read_text()
        for number, line in enumerate(text.splitlines(), 1):
            if "oncestream.test." in line.lower() or "testing_hooks" in line:
                offenders.append(f"{path.name}:{number}: {line.strip()}")
            for name in re.findall(r"ONCESTREAM_[A-Z0-9_]+", line):
                if name not in _ALLOWED_ENV:
                    offenders.append(f"{path.name}:{number}: {name}")
    assert offenders == []
