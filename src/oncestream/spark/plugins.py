"""Pluggable classes named in the connector's options, as Kafka names its interceptors
(``interceptor.classes``) and its principal builder (``principal.builder.class``).

Two extension points, each an option naming a class plus options for that class:

``stepObserver`` (sink and ``dual_write``)
    A ``StepObserver``: told when a write reaches a step of the exactly-once protocol
    (``STEPS`` below), with what is known there (query, batch, partition, attempt, transactional
    id, PreparedTxnState). Uses: tracing or metrics of the two-phase commit, and the connector's
    own fault-injection tests (``tests/support/spark_faults.py``), which hold tasks at a step,
    fail them, or kill the driver there. The observer runs inline: it may block the step (the
    write waits), and an exception it raises fails the step as any error there would (a task
    fails and Spark retries it; the driver's commit fails and Spark replays the batch).
``triggerClock`` (streaming source)
    A ``TriggerClock``: the milliseconds the source's ``maxTriggerDelay`` is measured with
    (default: ``time.monotonic``), as Kafka's ``Time`` lets its tests use ``MockTime``.

Each option's value is ``module:Class`` (or ``module.Class``); options whose name starts with
the option's name and a dot (``stepObserver.someSetting``) are handed to the class's constructor
as one mapping, names lower case and without the prefix, as Kafka hands an interceptor its
configs. The class must be importable where the step runs: in every Python worker of the driver
and the executors (Spark starts them with the ``PYTHONPATH`` of ``spark.executorEnv``).

Why options naming a class, rather than a hook module a ``sitecustomize`` imports into every
worker: the steps run in several processes Spark starts and reuses (the driver's Python workers
run the commit and plan the source, executors' workers run the tasks), and one long-lived Spark
session serves many queries. An option travels with the query to each of them, pickled with
its other options, and configures that query alone; nothing global outlives it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from oncestream.named_class import NamedClassError, load_named
from oncestream.spark.errors import OptionError

STEP_OBSERVER_OPTION = "stepObserver"
TRIGGER_CLOCK_OPTION = "triggerClock"

# The steps a StepObserver is told about, in protocol order (docs/spark-exactly-once.md), and
# the keys of the ``info`` mapping that comes with each.
# A write task (executor), exactlyOnce=true, after producing its rows:
TASK_BEFORE_PREPARE = "task-before-prepare"  # query_id, batch_id, partition, attempt, transactional_id
TASK_AFTER_PREPARE = "task-after-prepare"  # the same and state (the PreparedTxnState)
# The streaming driver's commit of a batch (query_id, batch_id; transactions: {id: state}):
BEFORE_RECORD = "before-record"  # winners held and checked; commit record not written
AFTER_RECORD = "after-record"  # commit record written: the batch is decided
COMPLETING_TRANSACTION = "completing-transaction"  # transactional_id: about to be committed
COMPLETED_TRANSACTION = "completed-transaction"  # transactional_id: committed
AFTER_COMPLETE = "after-complete"  # every transaction committed; Spark's commit log not yet written
# dual_write, on the driver (batch_id, transactional_id, state):
DUAL_AFTER_PREPARE = "dual-after-prepare"  # log transaction prepared, database not written
DUAL_AFTER_DB = "dual-after-db"  # database committed (the commit point), log transaction open
STEPS = (TASK_BEFORE_PREPARE, TASK_AFTER_PREPARE, BEFORE_RECORD, AFTER_RECORD, COMPLETING_TRANSACTION,
         COMPLETED_TRANSACTION, AFTER_COMPLETE, DUAL_AFTER_PREPARE, DUAL_AFTER_DB)


class StepObserver(Protocol):
    """Told when a write reaches a step of the exactly-once protocol (see ``STEPS``)."""

    def reached(self, step: str, info: Mapping[str, Any]) -> None:
        """The write reached ``step``; ``info`` says which query, batch, task and transaction."""


class TriggerClock(Protocol):
    """The source's clock for ``maxTriggerDelay``."""

    def now_ms(self) -> float:
        """Milliseconds since an arbitrary, fixed origin; never decreasing."""


class NoSteps:
    """The default observer: nothing happens at any step."""

    def reached(self, step: str, info: Mapping[str, Any]) -> None:
        """Nothing to do."""


class MonotonicClock:
    """The default trigger clock: ``time.monotonic`` in milliseconds."""

    def now_ms(self) -> float:
        """Milliseconds of the monotonic clock."""
        return time.monotonic() * 1000


@dataclass(frozen=True)
class PluginSpec:
    """A class named by an option, with the options meant for it; picklable, so it travels with
    the query's options to every Python worker, which builds its own instance."""

    option: str
    class_name: str
    config: tuple[tuple[str, str], ...] = ()

    def load_class(self) -> type:
        """The named class, imported now."""
        try:
            found = load_named(self.class_name)
        except NamedClassError as e:
            raise OptionError(f"option {self.option}: {e}") from None
        if not isinstance(found, type):
            raise OptionError(f"option {self.option}: {self.class_name!r} is not a class")
        return found

    def create(self) -> Any:
        """A new instance, built with this plugin's options."""
        return self.load_class()(dict(self.config))


def plugin_spec(options: Mapping[str, str], option: str) -> PluginSpec | None:
    """The plugin ``option`` names in Spark's (case-insensitive) options, checked loadable, or None
    when the option is absent."""
    lowered = {str(k).lower(): str(v) for k, v in options.items()}
    name = option.lower()
    class_name = lowered.get(name, "").strip()
    prefix = name + "."
    config = tuple(sorted((k[len(prefix):], v) for k, v in lowered.items() if k.startswith(prefix)))
    if not class_name:
        if config:
            raise OptionError(f"options {', '.join(prefix + k for k, _ in config)} are set but {option} is not")
        return None
    spec = PluginSpec(option, class_name, config)
    spec.load_class()  # fail on the driver, by the option's name, rather than in every task
    return spec


def step_observer(spec: PluginSpec | None) -> StepObserver:
    """The observer ``spec`` names (a new instance), or the no-op default."""
    return NoSteps() if spec is None else spec.create()


def trigger_clock(spec: PluginSpec | None) -> TriggerClock:
    """The clock ``spec`` names (a new instance), or the monotonic default."""
    return MonotonicClock() if spec is None else spec.create()
