"""One QTT case through the SQL engine, as a user of a SQL-server node sees it.

Each statement is parsed by the SQL layer's parser, validated and applied by the node's metastore
(``server.metastore``: the same rules a node applies to its command topic), its topics are created
and its persistent queries started by ``engine.runtime.QueryRuntime`` on Spark, writing through
the exactly-once sink to a real broker; INSERT VALUES goes through the runtime's row writer. The
inputs are produced with confluent-kafka (a real peer) once every statement ran, and the outputs
are read back read_committed with confluent-kafka and compared with the case's.

Rules that make a micro-batch engine comparable with ksqlDB's record-at-a-time tests:

- every query reads from the earliest offset. A stateful query (aggregation, join, window) reads
  at most one offset per trigger (``maxOffsetsPerTrigger`` 1, ``CaseEnvironment.runtime``), so
  each input record is its own micro-batch and an aggregation emits one update per input, as
  ksqlDB's tests (record cache off) expect; one batch over all inputs (``Trigger.AvailableNow``)
  would give only the last update per key. A stateless query (filter, projection, PARTITION BY,
  table functions) gives the same records in the same order from one batch as from many, so it
  reads everything available per trigger (``CaseEnvironment.bulk_runtime``): a micro-batch costs
  seconds on a loaded machine;
- ksqlDB's test driver processes the inputs in the order the case lists them, across topics. A
  query reading several of the inputs' topics at one offset per trigger would read them side by
  side (the first record of each topic in one batch, then the second ...), another order; so
  when a stateful query reads two or more input topics, the inputs are produced in runs of
  consecutive records of one topic (``arrival_runs``), each after the queries consumed the run
  before (as at the end, below);
- a case is finished when every query consumed its source topics up to their last stable
  offset, twice in a row, and no query failed; then each output topic is read to its end;
- each case has its own topics (``qtt<N>_`` + the case's topic name; a C*AS without KAFKA_TOPIC
  gets the prefixed sink name) and query ids, so cases share one broker and one Spark session;
- an expected exception passes when a statement is refused with an error whose message contains
  the expected message (Hamcrest's ``containsString``, as ksqlDB's test does), or whose message
  followed by ``\nStatement: `` and the statement text it carries does (the text a
  ``KsqlStatementException`` gives ksqlDB's test); the expected Java class cannot be compared and
  is shown. A case whose statements are all accepted fails.
"""

from __future__ import annotations

import base64
import dataclasses
import itertools
import json
import logging
import re
import shutil
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from oncestream.sql.conformance.mock_schema_ids import SchemaSide, harness_schema_order
from oncestream.sql.conformance.qtt_format import QttCase, QttRecord
from oncestream.sql.conformance.records import (
    ActualRecord,
    RecordCodecError,
    compare_topic,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from oncestream.sql.conformance.registry_records import REGISTRY_FORMATS, RegistrySide, references_of, topic_schemas
from oncestream.sql.conformance.scope import Family, refusal_family, registry_formats, static_family
from oncestream.sql.engine.insert_values import insert_target, values_row
from oncestream.sql.engine.runtime import ERROR, QueryRuntime, checkpoint_location, sink_topic_config
from oncestream.sql.errors import KsqlError, ParseError
from oncestream.sql.language import sql_ast
from oncestream.sql.language.catalog import SourceInfo, registry_subject
from oncestream.sql.language.parser import parse
from oncestream.sql.language.statement_plan import OUTPUT_TOPIC_PREFIX_CONFIG
from oncestream.sql.server.commands import goes_to_command_topic
from oncestream.sql.server.metastore import CommandResult, CreateTopic, DeleteTopic, Metastore, StartQuery, StopQuery

log = logging.getLogger("oncestream.sql.conformance")

CLIENT_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.3
BASE_WAIT_S = 180.0
WAIT_PER_INPUT_S = 8.0
MAX_WAIT_S = 600.0
# Topic configs of every topic a case creates: the tests' timestamps start at 0, which time-based
# retention would delete at once.
TOPIC_CONFIG = {"retention.ms": "-1"}


class Outcome(Enum):
    """PASS, FAIL, OUT_OF_SCOPE; NOT_RUN: the machine kept the case from running (Spark could
    not start a query's Python process in time, engine.runtime.SPARK_START_FAILURES): it says
    nothing about the engine and stays outside the totals."""

    PASS = "PASS"
    FAIL = "FAIL"
    OUT_OF_SCOPE = "OUT_OF_SCOPE"
    NOT_RUN = "NOT_RUN"


@dataclass(frozen=True)
class CaseResult:
    """A case's outcome: for FAIL the difference or error in words, for OUT_OF_SCOPE its family."""

    file: str
    name: str
    outcome: Outcome
    detail: str = ""
    family: Family | None = None
    seconds: float = 0.0
    formats: tuple[str, ...] = ()   # the registry formats the case uses (per-format counts)
    engine: str = ""                # the engine's revision the case ran on (``command.engine_revision``)


# the place ANTLR gives a syntax error (``line 2:74: Syntax Error...``)
_SYNTAX_LINE = re.compile(r"^line (\d+):")
_AT_LINE = re.compile(r"\bat line (\d+):")


def in_script(message: str, lines_before: int) -> str:
    """A syntax error's message with its line counted in the case's whole script (``lines_before``
    lines come before the statement), as ksqlDB's test parses the case's statements as one text."""
    shifted = _SYNTAX_LINE.sub(lambda m: f"line {int(m.group(1)) + lines_before}:", message, count=1)
    # ksqlDB's "Syntax error at or near 'X' at line L:C" names the line in its text too
    return _AT_LINE.sub(lambda m: f"at line {int(m.group(1)) + lines_before}:", shifted)


class _Refused(Exception):
    """A statement the engine refused (carries the engine's message; ``details``: the message with
    the statement text the error carries, as ksqlDB's KsqlStatementException details it)."""

    def __init__(self, message: str, details: str | None = None) -> None:
        super().__init__(message)
        self.details = details


def _refused(error: KsqlError, injected: str | None = None) -> _Refused:
    """``injected``: the ``KAFKA_TOPIC='...'`` property the runner gave a C*AS that had none
    (``renamed``), taken out of the statement text again."""
    text = error.statement_text
    if text and injected:
        text = text.replace(f" WITH ({injected})", "").replace(f"{injected}, ", "").replace(f", {injected}", "")
    details = f"{error.message}\nStatement: {text}" if text else None
    return _Refused(error.message, details)


def _injected_topic(parsed: sql_ast.Statement, statement: sql_ast.Statement) -> str | None:
    if isinstance(parsed, sql_ast.CreateAsSelect) and isinstance(statement, sql_ast.CreateAsSelect) \
            and "KAFKA_TOPIC" not in {k.upper() for k in parsed.properties}:
        return f"KAFKA_TOPIC='{statement.properties['KAFKA_TOPIC']}'"
    return None


class InputProducer:
    """Writes a case's input records with each record's exact timestamp. ksqlDB's tests give most
    inputs timestamp 0 (the epoch; a record without one gets 0 too), which librdkafka cannot write:
    it takes 0 as "now". kafka-python (a real peer too, the ``test`` extra) writes it as given, so
    it is used when installed; otherwise confluent-kafka, and timestamp-0 inputs get the produce
    time (their windows and output timestamps then differ from ksqlDB's). kafka-python refuses a
    record with neither key nor value (ksqlDB's cases have such inputs: a keyless stream's null
    value) and a header without a value (headers.json has them): those are written by
    confluent-kafka, in order (kafka-python's queue flushed before, confluent-kafka's after), with
    the produce time if its timestamp is 0. Thread-safe."""

    def __init__(self, bootstrap: str) -> None:
        self._bootstrap = bootstrap
        self._empty_records: Any = None     # confluent-kafka, for the records kafka-python refuses
        self._order = threading.Lock()
        try:
            from kafka import KafkaProducer
        except ImportError:
            from confluent_kafka import Producer

            self._confluent: Any = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                             "linger.ms": 2, "log_level": 2})
            self._kafka_python: Any = None
        else:
            self._confluent = None
            self._kafka_python = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all",
                                               linger_ms=2)

    def produce(self, topic: str, key: bytes | None, value: bytes | None, timestamp_ms: int,
                headers: list[tuple[str, str | bytes | None]] | None, errors: list[str]) -> None:
        """Queue one record; a delivery failure is appended to ``errors``."""
        if self._kafka_python is not None and ((key is None and value is None)
                                               or any(v is None for _k, v in headers or ())):
            self._produce_refused(topic, key, value, timestamp_ms, headers, errors)
            return
        if self._kafka_python is not None:
            future = self._kafka_python.send(topic, value=value, key=key, headers=headers, timestamp_ms=timestamp_ms)
            future.add_errback(lambda exc: errors.append(str(exc)))
            return

        self._confluent.produce(topic, key=key, value=value, timestamp=timestamp_ms, headers=headers,
                                on_delivery=self._on_delivery(errors))
        self._confluent.poll(0)

    @staticmethod
    def _on_delivery(errors: list[str]) -> Any:
        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        return delivered

    def _produce_refused(self, topic: str, key: bytes | None, value: bytes | None, timestamp_ms: int,
                         headers: list[tuple[str, str | bytes | None]] | None, errors: list[str]) -> None:
        """A record kafka-python refuses, written by confluent-kafka after kafka-python's queue."""
        from confluent_kafka import Producer

        with self._order:
            if self._empty_records is None:
                self._empty_records = Producer({"bootstrap.servers": self._bootstrap, "enable.idempotence": True,
                                                "log_level": 2})
            self._kafka_python.flush(CLIENT_TIMEOUT_S)
            self._empty_records.produce(topic, key=key, value=value, timestamp=timestamp_ms, headers=headers,
                                        on_delivery=self._on_delivery(errors))
            if self._empty_records.flush(CLIENT_TIMEOUT_S) != 0:
                errors.append(f"a record kafka-python refuses (no key and value, or a valueless header) to {topic} "
                              "not acknowledged")

    def flush(self, timeout_s: float) -> bool:
        """Whether every queued record was acknowledged within ``timeout_s``."""
        if self._kafka_python is not None:
            try:
                self._kafka_python.flush(timeout_s)
            except Exception:  # noqa: BLE001 - kafka-python raises its own timeout error
                return False
            return True
        return self._confluent.flush(timeout_s) == 0


class CaseEnvironment:
    """What every case shares: the broker (``bootstrap``), the query runtimes on one Spark session
    (``runtime`` one offset per trigger, ``bulk_runtime`` all available: see the module
    docstring), the Schema Registry client, confluent-kafka's admin and the inputs' producer.
    Thread-safe: ``--jobs`` cases run side by side."""

    def __init__(self, bootstrap: str, runtime: QueryRuntime, bulk_runtime: QueryRuntime | None = None,
                 registry: Any = None) -> None:
        from confluent_kafka.admin import AdminClient

        self.bootstrap = bootstrap
        # The Schema Registry (a spark.schema_registry_client.RegistryClient) the registry
        # formats' cases register their schemas in; None: those cases fail on their first record.
        self.registry = registry
        self.runtime = runtime
        self.bulk_runtime = bulk_runtime or runtime
        # librdkafka log level 2 (critical): a stopped broker's reconnect attempts stay off stderr
        # (delivery and admin errors still reach the callbacks and futures).
        self.admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})
        self.producer = InputProducer(bootstrap)
        self._lock = threading.Lock()
        self._offsets = itertools.count(1)
        self._cases = itertools.count(1)

    def next_offset(self) -> int:
        """A command offset unique in this run (query ids derive from it)."""
        with self._lock:
            return next(self._offsets)

    def next_case_prefix(self) -> str:
        with self._lock:
            return f"qtt{next(self._cases)}_"

    def topics(self) -> dict[str, int]:
        """Existing topics with their partition counts."""
        meta = self.admin.list_topics(timeout=CLIENT_TIMEOUT_S)
        return {name: len(t.partitions) for name, t in meta.topics.items()}

    def create_topic(self, name: str, partitions: int, config: Mapping[str, str]) -> None:
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import NewTopic

        futures = self.admin.create_topics([NewTopic(name, partitions, 1, config={**TOPIC_CONFIG, **config})])
        for future in futures.values():
            try:
                future.result(CLIENT_TIMEOUT_S)
            except KafkaException as e:
                if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise

    def close(self) -> None:
        """Stop every query of both runtimes and flush the producer."""
        self.producer.flush(CLIENT_TIMEOUT_S)
        self.runtime.stop_all()
        if self.bulk_runtime is not self.runtime:
            self.bulk_runtime.stop_all()


_SCHEMA_ID_PROPS = ("KEY_SCHEMA_ID", "VALUE_SCHEMA_ID")
_KAFKA_TOPIC = re.compile(r"\bKAFKA_TOPIC\s*=\s*'([^']*)'", re.IGNORECASE)
_PARTITIONS = re.compile(r"\bPARTITIONS\s*=", re.IGNORECASE)
_AS_SELECT = re.compile(r"\bAS\s+SELECT\b", re.IGNORECASE)


def topics_to_create(case: QttCase) -> dict[str, int]:
    """Topics a case's harness creates before its statements, as ksqlDB's test does: its
    ``topics``, the topics of its CREATE STREAM/TABLE statements without PARTITIONS, and its
    input topics (name -> partitions). A topic a CREATE gives PARTITIONS is left to that
    statement (ksqlDB's ``TestCaseBuilderUtil.getAllTopics`` takes its partitions from the
    statement), unless ``topics`` gives its partitions."""
    out: dict[str, int] = {}
    by_statement: set[str] = set()
    for text in case.statements:
        if _AS_SELECT.search(text):
            continue
        names = _KAFKA_TOPIC.findall(text)
        if _PARTITIONS.search(text):
            by_statement.update(names)
            continue
        for name in names:
            out.setdefault(name, 1)
    for topic in case.topics:
        name = str(topic["name"])
        if topic.get("partitions") is not None or name not in by_statement:
            out[name] = int(topic.get("partitions") or 1)
    for record in case.inputs:
        if record.topic not in by_statement:
            out.setdefault(record.topic, 1)
    return out


def renamed(statement: sql_ast.Statement, prefix: str,
            schema_ids: Mapping[int, int] | None = None, output_prefix: str = "") -> sql_ast.Statement:
    """``statement`` writing and reading the case's own topics: ``prefix`` before KAFKA_TOPIC, and
    a C*AS without one gets ``prefix`` + ``output_prefix`` (the case's ``ksql.output.topic.name.prefix``)
    + its sink name (ksqlDB's default topic). ``schema_ids``
    maps the ids the case names (``KEY_SCHEMA_ID``/``VALUE_SCHEMA_ID``) to the ids its schemas got
    in the shared registry."""
    if isinstance(statement, (sql_ast.CreateSource, sql_ast.CreateAsSelect)):
        props = dict(statement.properties)
        if isinstance(statement, sql_ast.CreateAsSelect):
            props["KAFKA_TOPIC"] = prefix + str(props.get("KAFKA_TOPIC") or output_prefix + statement.name)
        elif props.get("KAFKA_TOPIC") is not None:
            props["KAFKA_TOPIC"] = prefix + str(props["KAFKA_TOPIC"])
        for name in _SCHEMA_ID_PROPS:
            if props.get(name) is not None and schema_ids:
                try:
                    props[name] = schema_ids.get(int(props[name]), props[name])
                except (TypeError, ValueError):
                    pass  # not a number: the engine refuses it with its own message
        return dataclasses.replace(statement, properties=props)
    return statement


# The formats whose schema ksqlDB's harness registers from a CREATE statement's columns.
_SCHEMA_FROM_COLUMNS = ("AVRO", "JSON_SR", "PROTOBUF")


def _names_schema_id(statement: sql_ast.Statement) -> bool:
    return isinstance(statement, (sql_ast.CreateSource, sql_ast.CreateAsSelect)) and \
        any(statement.properties.get(name) is not None for name in _SCHEMA_ID_PROPS)


def declared_schema_sides(case: QttCase) -> list[SchemaSide]:
    """The topic sides whose schema ksqlDB's harness takes from a CREATE STREAM/TABLE statement's
    columns (``TestCaseBuilderUtil.createTopicFromStatement``): a side in a registry format with
    columns, in statement order. A statement that does not parse here declares nothing."""
    defaults = {True: str(case.properties.get("ksql.persistence.default.format.key") or "KAFKA"),
                False: str(case.properties.get("ksql.persistence.default.format.value") or "")}
    out: list[SchemaSide] = []
    for text in case.statements:
        if _AS_SELECT.search(text):
            continue
        try:
            parsed = parse(text)
        except KsqlError:
            continue
        for statement in parsed:
            if not isinstance(statement, sql_ast.CreateSource) or statement.properties.get("KAFKA_TOPIC") is None:
                continue
            props = statement.properties
            for key in (True, False):
                fmt = str(props.get("KEY_FORMAT" if key else "VALUE_FORMAT") or props.get("FORMAT") or defaults[key])
                has_columns = any(c.key == key and not c.headers for c in statement.columns)
                if fmt.upper() in _SCHEMA_FROM_COLUMNS and has_columns:
                    out.append(SchemaSide(str(props["KAFKA_TOPIC"]), key))
    return out


def case_topic_names(case: QttCase) -> list[str]:
    """Every topic name of a case in the order ksqlDB's harness first puts it in its map: the
    ``topics`` entries, the KAFKA_TOPIC of its CREATE STREAM/TABLE statements, then its input and
    output records' topics."""
    names = [str(t["name"]) for t in case.topics]
    names += [n for text in case.statements if not _AS_SELECT.search(text) for n in _KAFKA_TOPIC.findall(text)]
    names += [r.topic for r in (*case.inputs, *case.outputs)]
    return list(dict.fromkeys(names))


def expected_error_matches(case: QttCase, message: str) -> bool:
    """The rule for expected exceptions (module docstring)."""
    expected = case.expected_exception
    assert expected is not None
    return expected.message is None or expected.message in message


class CaseRun:
    """One case's run (``run`` returns its result; every query it started is stopped)."""

    def __init__(self, case: QttCase, env: CaseEnvironment) -> None:
        self.case = case
        self.env = env
        self.prefix = env.next_case_prefix()
        self.metastore = Metastore()
        self.properties: dict[str, Any] = {"auto.offset.reset": "earliest", **case.properties}
        self.started: list[StartQuery] = []
        self._runtime_of: dict[str, QueryRuntime] = {}
        self.inserted = False
        self.schema_ids: dict[int, int] = {}   # the case's schema ids -> the registry's

    def run(self) -> CaseResult:
        began = time.monotonic()
        family = static_family(self.case)
        if family is not None:
            return self._result(Outcome.OUT_OF_SCOPE, family.name, began, family)
        try:
            outcome, detail, family = self._run()
        except RecordCodecError as e:
            outcome, detail, family = Outcome.FAIL, f"input not writable: {e}", None
        except Exception as e:  # a case's harness failure is that case's FAIL: the run goes on
            log.exception("case %s", self.case.name)
            outcome, detail, family = Outcome.FAIL, f"runner error: {type(e).__name__}: {e}", None
        finally:
            self._stop_queries()
        return self._result(outcome, detail, began, family)

    def _result(self, outcome: Outcome, detail: str, began: float, family: Family | None = None) -> CaseResult:
        return CaseResult(self.case.file, self.case.name, outcome, detail, family, time.monotonic() - began,
                          tuple(registry_formats(self.case)))

    def _topic(self, name: str) -> str:
        return self.prefix + name

    def _run(self) -> tuple[Outcome, str, Family | None]:
        case = self.case
        for name, partitions in topics_to_create(case).items():
            self.env.create_topic(self._topic(name), partitions, {})
        try:
            self._register_topic_schemas()
            lines_before = 0
            for text in case.statements:
                self._execute(text, lines_before)
                lines_before += text.count("\n") + 1
        except _Refused as refused:
            # the case's topics as the case names them (the prefix is the runner's renaming)
            message = str(refused).replace(self.prefix, "")
            details = refused.details.replace(self.prefix, "") if refused.details else None
            if case.expected_exception is not None:
                if expected_error_matches(case, message) or (details and expected_error_matches(case, details)):
                    return Outcome.PASS, "", None
                return Outcome.FAIL, (f"refused with another error: expected {case.expected_exception.type or ''} "
                                      f"{case.expected_exception.message!r}, got {message!r}"), None
            family = refusal_family(message)
            if family is not None:
                return Outcome.OUT_OF_SCOPE, message, family
            return Outcome.FAIL, f"statement refused: {message}", None
        if case.expected_exception is not None:
            return Outcome.FAIL, (f"expected {case.expected_exception.type or 'an error'} "
                                  f"{case.expected_exception.message or ''!r}, but every statement was accepted"), None
        missing = self._post_conditions()
        if missing:
            return Outcome.FAIL, missing, None
        for run in arrival_runs(self.case.inputs, self._paced()):
            self._produce_inputs(run)
            failure = self._wait_for_queries()
            if failure:
                return Outcome.FAIL, failure, None
        difference = self._compare_outputs()
        if difference:
            return Outcome.FAIL, difference, None
        return Outcome.PASS, "", None

    # -- statements ----------------------------------------------------------------------------

    def _register_topic_schemas(self) -> None:
        """The schemas of the case's ``topics`` (and those they reference) registered before the
        statements, as ksqlDB's runner does (``registry_records``)."""
        if self.env.registry is None:
            return
        try:
            # A referenced schema's subject is its name, prefixed as the case's topics are
            versions: dict[str, int] = {}
            for name, schema_type, text in references_of(self.case):
                self.env.registry.register(self.prefix + name, schema_type, text)
                latest = self.env.registry.latest(self.prefix + name)
                versions[name] = latest.version if latest is not None and latest.version else 1
            for schema in topic_schemas(self.case):
                subject = registry_subject(self._topic(schema.topic), key=schema.key)
                refs = [{"name": n, "subject": self.prefix + n, "version": versions.get(n, 1)} for n in schema.references]
                got = self.env.registry.register(subject, schema.schema_type, schema.schema, refs or None)
                if schema.case_id is not None:
                    self.schema_ids[schema.case_id] = got
        except Exception as e:  # noqa: BLE001 - a schema the registry refuses: the case's statements see no schema
            raise _Refused(f"the registry refused a schema of the case's topics: {e}") from None

    def _harness_schema_ids(self) -> dict[int, int]:
        """The ids ksqlDB's harness would have given the case's schemas (``mock_schema_ids``) ->
        the ids the same subjects hold in the shared registry now. The mock registry gives an
        identical schema its first id again; a side not registered yet still takes its number."""
        registry = self.env.registry
        if registry is None:
            return {}
        out: dict[int, int] = {}
        seen: set[int] = set()
        mock_id = 1
        for side in harness_schema_order(self._topic_section_sides(), declared_schema_sides(self.case),
                                         case_topic_names(self.case)):
            latest = registry.latest(registry_subject(self._topic(side.topic), key=side.key))
            real = latest.schema_id if latest is not None else None
            if real is not None:
                if real in seen:
                    continue
                seen.add(real)
                out[mock_id] = real
            mock_id += 1
        return out

    def _topic_section_sides(self) -> list[SchemaSide]:
        return [SchemaSide(s.topic, s.key) for s in topic_schemas(self.case)]

    def _register_declared_schema(self, source: SourceInfo) -> None:
        """A CREATE with columns in a registry format registers its columns' schema when the
        subject has none yet (ksqlDB's runner: the statement's schema, if ``topics`` gave none)."""
        from oncestream.sql.language.schema_mapping import schema_of, unwraps_single

        registry = self.env.registry
        if registry is None or source.created_by is not None:
            return
        for key, fmt, columns, nullable in (
                (True, source.key_format.value, source.key_columns, source.key_protobuf_nullable),
                (False, source.value_format.value, source.value_columns, source.value_protobuf_nullable)):
            if fmt not in _SCHEMA_FROM_COLUMNS or not columns:
                continue
            subject = registry_subject(source.topic, key=key)
            if registry.latest(subject) is None:
                unwrapped = unwraps_single(fmt, len(columns), key=key, value_unwrapped=source.value_unwrapped)
                schema_type, text = schema_of(fmt, [(c.name, c.type) for c in columns], unwrapped=unwrapped,
                                              protobuf_nullable=nullable)
                registry.register(subject, schema_type, text)

    def _codec(self, source: SourceInfo | None, key: bool) -> RegistrySide | None:
        """How one side of ``source``'s topic is written and read when it is in a registry format."""
        if source is None:
            return None
        fmt = (source.key_format if key else source.value_format).value
        if fmt not in REGISTRY_FORMATS:
            return None
        columns_proto = None
        if fmt == "PROTOBUF_NOSR":
            from oncestream.sql.language.protobuf_schema import protobuf_schema

            columns = source.key_columns if key else source.value_columns
            columns_proto = protobuf_schema([(c.name, c.type) for c in columns],
                                            nullable=source.key_protobuf_nullable if key else source.value_protobuf_nullable)[1]
        return RegistrySide(self.env.registry, fmt, registry_subject(source.topic, key=key), columns_proto,
                            source.key_schema_name if key else source.value_schema_name)

    def _execute(self, text: str, lines_before: int = 0) -> None:
        """Run one of the case's statements; ``lines_before``: the lines of the statements before
        it, which ksqlDB's test parses as one text (its statements joined by newlines), so that
        a syntax error's line counts them."""
        try:
            statements = parse(text, self.metastore.custom_types())
        except KsqlError as e:
            if isinstance(e, ParseError):
                e.message = in_script(e.message, lines_before)
            raise _refused(e) from None
        for parsed in statements:
            schema_ids = {**self._harness_schema_ids(), **self.schema_ids} if _names_schema_id(parsed) else None
            statement = renamed(parsed, self.prefix, schema_ids,
                                str(self.properties.get(OUTPUT_TOPIC_PREFIX_CONFIG) or ""))
            try:
                self._execute_one(statement)
            except KsqlError as e:
                raise _refused(e, _injected_topic(parsed, statement)) from None

    def _execute_one(self, statement: sql_ast.Statement) -> None:
        if isinstance(statement, sql_ast.SetProperty):
            self.properties[statement.name] = statement.value
            return
        if isinstance(statement, sql_ast.UnsetProperty):
            self.properties.pop(statement.name, None)
            return
        if isinstance(statement, sql_ast.InsertValues):
            sink = insert_target(statement, self.metastore.source(statement.target), self.metastore.sources())
            self.env.runtime.insert_values(sink, values_row(statement, sink))
            self.inserted = True
            return
        if not goes_to_command_topic(statement):
            return  # SHOW, DESCRIBE, EXPLAIN, SELECT: nothing a QTT case compares
        command = self.metastore.validate(statement, self.properties, self.env.topics(), self.env.registry)
        effects = self.metastore.apply(command, self.env.next_offset())
        if isinstance(statement, sql_ast.CreateSource):
            created = self.metastore.source(statement.name)
            if created is not None:
                self._register_declared_schema(created)
        for effect in effects:
            if isinstance(effect, CreateTopic):
                source = next((s for s in self.metastore.sources() if s.topic == effect.topic), None)
                config = sink_topic_config(source) if source is not None else {}
                self.env.create_topic(effect.topic, effect.partitions, config)
            elif isinstance(effect, DeleteTopic):
                self.env.admin.delete_topics([effect.topic])
            elif isinstance(effect, StartQuery):
                analyzed = effect.analyzed
                stateful = analyzed.is_aggregate or bool(analyzed.joins) or analyzed.window is not None
                runtime = self.env.runtime if stateful else self.env.bulk_runtime
                self._runtime_of[effect.query.query_id] = runtime
                runtime.start_persistent(effect.query, analyzed, effect.sink, {**self.properties, **effect.properties})
                self.started.append(effect)
            elif isinstance(effect, StopQuery):
                self._runtime(effect.query_id).stop_persistent(effect.query_id)
            elif isinstance(effect, CommandResult) and effect.status == "ERROR":
                raise KsqlError(effect.message)

    def _runtime(self, query_id: str) -> QueryRuntime:
        return self._runtime_of.get(query_id, self.env.runtime)

    def _post_conditions(self) -> str:
        for condition in self.case.post_sources:
            source = self.metastore.source(condition.name.upper()) or self.metastore.source(condition.name)
            if source is None:
                return f"post condition: source {condition.name} does not exist"
            if condition.type is not None and source.kind.value.lower() != condition.type.lower():
                return f"post condition: {condition.name} is a {source.kind.value.lower()}, expected a {condition.type}"
        return ""

    # -- records -------------------------------------------------------------------------------

    def _source_for(self, topic: str, *, reading: bool) -> SourceInfo | None:
        """The source declared on ``topic``: for inputs the one a CREATE declared (not a C*AS
        sink), for outputs the one a query writes."""
        sources = [s for s in self.metastore.sources() if s.topic == topic]
        if reading:
            declared = [s for s in sources if s.created_by is None]
            sources = declared or sources
        else:
            written = [s for s in sources if s.created_by is not None]
            sources = written or sources
        return sources[0] if sources else None

    def _paced(self) -> bool:
        """Whether a query reading one offset per trigger reads two or more of the inputs' topics
        (the module docstring: then the inputs are produced in arrival runs)."""
        input_topics = {self._topic(r.topic) for r in self.case.inputs}
        for query in self.started:
            if self._runtime(query.query.query_id) is not self.env.runtime:
                continue
            if len({s.topic for s in query.analyzed.sources.values()} & input_topics) > 1:
                return True
        return False

    def _produce_inputs(self, records: Iterable[QttRecord]) -> None:
        producer = self.env.producer
        errors: list[str] = []
        for record in records:
            topic = self._topic(record.topic)
            source = self._source_for(topic, reading=True)
            headers: list[tuple[str, str | bytes | None]] | None = None
            if record.headers is not None:
                headers = [(k, None if v is None else base64.b64decode(v)) for k, v in record.headers]
            producer.produce(topic, encode_key(record, source, self._codec(source, True)),
                             encode_value(record, source, self._codec(source, False)),
                             record.timestamp_ms or 0, headers, errors)
        if not producer.flush(CLIENT_TIMEOUT_S) or errors:
            raise RuntimeError(f"inputs not acknowledged: {errors[:3]}")

    def _wait_for_queries(self) -> str:
        """Empty when every started query consumed its inputs (module docstring); else why not."""
        if not self.started:
            return ""
        timeout_s = min(MAX_WAIT_S, BASE_WAIT_S + WAIT_PER_INPUT_S * len(self.case.inputs))
        deadline = time.monotonic() + timeout_s
        topics = {s.topic for q in self.started for s in q.analyzed.sources.values()}
        offsets = _StableOffsets(self.env.bootstrap)
        stable: dict[tuple[str, int], int] = {}
        try:
            settled = 0
            while time.monotonic() < deadline:
                for query in self.started:
                    status = self._runtime(query.query.query_id).status(query.query.query_id)
                    if status.state == ERROR:
                        return f"query {query.query.query_id} failed: {status.error}"
                stable = offsets.latest(topics)
                if all(self._consumed(q, stable) for q in self.started):
                    settled += 1
                    if settled >= 2:
                        return ""
                else:
                    settled = 0
                time.sleep(POLL_INTERVAL_S)
        finally:
            offsets.close()
        behind = [q.query.query_id for q in self.started if not self._consumed(q, stable)]
        return f"queries had not consumed their inputs after {timeout_s:.0f} s ({len(behind)} of {len(self.started)} behind)"

    def _consumed(self, query: StartQuery, stable: Mapping[tuple[str, int], int]) -> bool:
        query_id = query.query.query_id
        return _consumed(self._runtime(query_id).progress(query_id), stable, query)

    def _compare_outputs(self) -> str:
        by_topic: dict[str, list[QttRecord]] = {}
        for record in self.case.outputs:
            by_topic.setdefault(record.topic, []).append(record)
        for name, expected in by_topic.items():
            topic = self._topic(name)
            sink = self._source_for(topic, reading=False)
            actual = []
            key_codec, value_codec = self._codec(sink, True), self._codec(sink, False)
            for partition, (key_bytes, value_bytes, timestamp_ms) in read_committed(self.env.bootstrap, topic):
                key, window = decode_key(key_bytes, sink, key_codec)
                actual.append(ActualRecord(key, decode_value(value_bytes, sink, value_codec), timestamp_ms, window,
                                           partition))
            difference = compare_topic(name, expected, actual, check_zero_timestamps=not self.inserted)
            if difference:
                return difference
        return ""

    def _stop_queries(self) -> None:
        for query in self.started:
            query_id = query.query.query_id
            runtime = self._runtime(query_id)
            try:
                runtime.stop_persistent(query_id)
            except Exception as e:  # noqa: BLE001 - stopping is best effort; the next case goes on
                log.warning("stopping %s: %s", query_id, e)
            shutil.rmtree(checkpoint_location(runtime.settings, query_id), ignore_errors=True)


def arrival_runs(inputs: Sequence[QttRecord], paced: bool) -> list[list[QttRecord]]:
    """The inputs in the batches they are produced in (each followed by waiting for the queries,
    so there is at least one, maybe empty): all at once, or (``paced``) in runs of
    consecutive records of one topic, so that a query reading one offset per trigger from each
    topic processes them in the case's order (ksqlDB's test driver pipes them one by one)."""
    if not paced or not inputs:
        return [list(inputs)]
    runs: list[list[QttRecord]] = []
    for record in inputs:
        if runs and runs[-1][-1].topic == record.topic:
            runs[-1].append(record)
        else:
            runs.append([record])
    return runs


def _progress_entry(progress: Any) -> dict[str, Any]:
    if isinstance(progress, dict):
        return progress
    text = progress.json
    return json.loads(text() if callable(text) else text)


def _consumed(progress: list[Any], stable: Mapping[tuple[str, int], int], query: StartQuery) -> bool:
    """Whether ``query``'s last batch ended at or past the stable offsets of its source topics.
    A query with a watermark (windows, stream-stream joins) must also have reported a batch
    without input rows since: Spark writes what the watermark closes (EMIT FINAL windows,
    sessions, outer joins' unmatched rows) in a batch without data after the last one with data,
    or reports itself idle when there is nothing to close."""
    topics = {s.topic for s in query.analyzed.sources.values()}
    wanted = {tp: o for tp, o in stable.items() if tp[0] in topics}
    if not any(wanted.values()):
        return True
    if not progress:
        return False
    last = _progress_entry(progress[-1])
    if "watermark" in (last.get("eventTime") or {}) and last.get("numInputRows", 0) != 0:
        return False
    ended: dict[tuple[str, int], int] = {}
    for source in last.get("sources", []):
        raw = source.get("endOffset")
        parsed = json.loads(raw) if isinstance(raw, str) else raw
        for topic, parts in (parsed or {}).items():
            for partition, offset in parts.items():
                ended[(topic, int(partition))] = int(offset)
    return all(ended.get(tp, 0) >= offset for tp, offset in wanted.items())


class _StableOffsets:
    """Last stable offsets (read_committed end offsets) of topics, asked with confluent-kafka."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Consumer

        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "oncestream-conformance-offsets",
                                   "isolation.level": "read_committed", "enable.auto.commit": False})

    def latest(self, topics: Iterable[str]) -> dict[tuple[str, int], int]:
        from confluent_kafka import TopicPartition

        out: dict[tuple[str, int], int] = {}
        for topic in topics:
            meta = self._consumer.list_topics(topic, timeout=CLIENT_TIMEOUT_S)
            for partition in meta.topics[topic].partitions:
                _low, high = self._consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                                  timeout=CLIENT_TIMEOUT_S, cached=False)
                out[(topic, partition)] = high
        return out

    def close(self) -> None:
        self._consumer.close()


def read_committed(bootstrap: str, topic: str) -> list[tuple[int, tuple[bytes | None, bytes | None, int]]]:
    """Every committed record of ``topic`` (its partition, and key, value, timestamp ms), read with
    confluent-kafka (read_committed) to the end of each partition; partitions one after another."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "oncestream-conformance-read",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        meta = consumer.list_topics(topic, timeout=CLIENT_TIMEOUT_S)
        if topic not in meta.topics or meta.topics[topic].error is not None:
            return []
        partitions = sorted(meta.topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        at_end: set[int] = set()
        by_partition: dict[int, list[tuple[bytes | None, bytes | None, int]]] = {p: [] for p in partitions}
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(at_end) < len(partitions) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error, partition = msg.error(), msg.partition()
            if partition is None:
                continue
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(partition)
                continue
            by_partition[partition].append((msg.key(), msg.value(), msg.timestamp()[1]))
        if len(at_end) < len(partitions):
            raise RuntimeError(f"{topic}: the end of partitions {sorted(set(partitions) - at_end)} not reached "
                               f"in {CLIENT_TIMEOUT_S:.0f} s")
        return [(p, r) for p in partitions for r in by_partition[p]]
    finally:
        consumer.close()
