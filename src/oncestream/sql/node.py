"""One SQL-server node: the ``engine.SqlEngine`` the REST layer calls.

- Statements that change the metastore (CREATE, DROP, INSERT INTO ... SELECT, TERMINATE) go
  through the command topic (``command_topic.CommandWriter``); the answer is sent once this node's
  runner has applied the command, with its real status and ``commandSequenceNumber``.
- Local statements (SHOW, LIST, DESCRIBE, EXPLAIN, SET, UNSET) are answered from this node's
  metastore; INSERT INTO ... VALUES writes the row directly (as ksqlDB does: it is not a command).
- Persistent queries run where the query-assignment group puts them (``assignment``); this node
  starts and stops its own share (``local_queries``). Push queries run on the node asked.
- Degraded mode: the runner found a record it cannot read; reads and running queries go on,
  statements are refused with the reason, ``/info`` says ERROR and ``/healthcheck`` unhealthy.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from oncestream.client import Admin, KafkaException, NewTopic
from oncestream.sql import ast, commands, entities
from oncestream.sql.analyzer import analyze_query
from oncestream.sql.assignment import Assignment, QueryAssignment
from oncestream.sql.catalog import SourceInfo
from oncestream.sql.command_runner import Applied, CommandRunner
from oncestream.sql.command_topic import (
    CommandWriter,
    PreparedCommand,
    WriteStepObserver,
    command_topic_name,
    ensure_command_topic,
)
from oncestream.sql.engine import QueryStream
from oncestream.sql.errors import (
    COMMAND_QUEUE_CATCHUP_TIMEOUT,
    QUERY_ENDPOINT,
    SERVER_SHUTTING_DOWN,
    DegradedError,
    KsqlError,
    NotFoundError,
    NotReadyError,
    StatementError,
)
from oncestream.sql.insert_values import json_row, values_row
from oncestream.sql.local_queries import LocalQueries, StartSpec
from oncestream.sql.metastore import CommandResult, Metastore, StartQuery, StopQuery
from oncestream.sql.parser import parse
from oncestream.sql.pull.node_hooks import PullQueries

log = logging.getLogger("oncestream.sql")

VERSION = "0.29.0-oncestream"     # what /info reports (ksqlDB's clients parse major.minor)
_WRITES = (ast.CreateSource, ast.CreateAsSelect, ast.InsertInto, ast.DropSource, ast.Terminate)


@dataclass
class NodeSettings:
    """What one node needs (``server_main`` builds it from the command line)."""

    service_id: str
    bootstrap_servers: str
    client_properties: dict[str, str] = field(default_factory=dict)   # security.protocol, sasl.*, ssl.*
    properties: dict[str, str] = field(default_factory=dict)          # every --config (SHOW PROPERTIES)
    command_timeout_ms: int = 60_000
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 1_000
    replication_factor: int = 1
    state_dir: str | None = None      # materialized tables for pull queries live under it
    instance_id: str | None = None    # group.instance.id in the query-assignment group (node_identity)

    @property
    def client_conf(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap_servers, **self.client_properties}


class Node:
    """A SQL-server node (implements ``engine.SqlEngine``)."""

    def __init__(self, settings: NodeSettings, runtime: Any, *, write_steps: WriteStepObserver | None = None) -> None:
        """``write_steps`` is told each step of the command-topic write protocol (injected;
        command_topic.WriteStepObserver), nobody by default."""
        self.settings = settings
        self.runtime = runtime
        self.url: str | None = None
        self._metastore = Metastore()
        self._query_properties: dict[str, dict[str, Any]] = {}
        self._query_offset = -1          # offset of the last command that changed the query set
        self._terminating = False
        self.topic = command_topic_name(settings.service_id)
        self._admin = Admin(settings.client_conf)
        self._pull = PullQueries(settings.state_dir or ".", settings.bootstrap_servers, settings.client_properties)
        self._runner = CommandRunner(topic=self.topic, client_conf=settings.client_conf, decode=self._decode,
                                     apply=self._apply, incompatible=(commands.IncompatibleCommandError,))
        self._writer = CommandWriter(topic=self.topic, service_id=settings.service_id, client_conf=settings.client_conf,
                                     runner=self._runner, admin=self._admin, steps=write_steps,
                                     timeout_ms=settings.command_timeout_ms)
        self._local = LocalQueries(runtime, self._start_spec, self._queries_changed)
        self._assignment: QueryAssignment | None = None
        self._push: dict[str, QueryStream] = {}
        self._push_lock = threading.Lock()
        self._kafka_cluster_id: str | None = None     # the Kafka cluster's id, read once at start

    # --- lifecycle --------------------------------------------------------------------------------

    def start(self, replay_timeout_s: float | None = None) -> None:
        """Create the command topic if missing and start replaying it."""
        ensure_command_topic(self._admin, self.topic, self.settings.replication_factor)
        # /info's kafkaClusterId (ksqlDB asks DescribeCluster once too): the cluster cannot change
        # its id under a running node, so one answer is enough.
        self._kafka_cluster_id = self._admin.describe_cluster(timeout=30).cluster_id
        self._runner.start()
        self._local.start()
        if replay_timeout_s is not None:
            self._runner.wait_replayed(replay_timeout_s)

    def join_cluster(self, url: str) -> None:
        """Join the query-assignment group as ``url`` (once the REST API listens there)."""
        self.url = url
        self._assignment = QueryAssignment(
            service_id=self.settings.service_id, url=url, client_conf=self.settings.client_conf,
            known_queries=self._known_queries, owned=self._local.owned, errors=self._local.errors,
            wait_for_offset=lambda offset, timeout_s: self._runner.wait_position(offset + 1, timeout_s),
            on_assignment=self._on_assignment, session_timeout_ms=self.settings.session_timeout_ms,
            heartbeat_interval_ms=self.settings.heartbeat_interval_ms, instance_id=self.settings.instance_id)
        self._assignment.start()

    def stop(self) -> None:
        """Stop local queries at a batch boundary, then leave the group (so no other node starts
        a query while it still runs here), then stop replaying."""
        self._terminating = True
        with self._push_lock:
            pushes = list(self._push.values())
            self._push.clear()
        for push in pushes:
            close = getattr(push, "close_sync", None)
            if close is not None:
                close()
        self._local.stop()
        if self._assignment is not None:
            self._assignment.stop()
        self._runner.stop()
        self._pull.close()
        self._admin.close()

    # --- the command runner's side (runner thread, under runner.lock) -------------------------------

    def _decode(self, key: bytes | None, value: bytes | None) -> Any:
        return commands.decode(key, value)

    def _apply(self, command: commands.Command, offset: int) -> Applied:
        effects = self._metastore.apply(command, offset)
        result = Applied("Success")
        queries_changed = False
        for effect in effects:
            # CreateTopic / DeleteTopic were done by the node that wrote the command, around its
            # commit (ksqlDB's injectors); every other node only follows the metastore.
            if isinstance(effect, StartQuery):
                self._query_properties[effect.query.query_id] = dict(command.streams_properties)
                queries_changed = True
            elif isinstance(effect, StopQuery):
                self._query_properties.pop(effect.query_id, None)
                queries_changed = True
            elif isinstance(effect, CommandResult):
                result = Applied(effect.message, effect.query_id, refused=effect.status != "SUCCESS")
        if queries_changed:
            self._query_offset = offset
            self._local.poke()
            if self._assignment is not None:
                self._assignment.poke()
        # Every node materializes every table for pull queries (new tables start, dropped ones go).
        self._pull.metastore_changed(self._metastore.sources())
        return result

    # --- query placement ------------------------------------------------------------------------------

    def _known_queries(self) -> tuple[int, list[str]]:
        with self._runner.lock:
            return self._query_offset, sorted(q.query_id for q in self._metastore.queries())

    def _on_assignment(self, assignment: Assignment | None) -> None:
        self._local.set_desired(set(assignment.mine) if assignment is not None else set())

    def _queries_changed(self) -> None:
        if self._assignment is not None:
            self._assignment.poke()

    def _start_spec(self, query_id: str) -> StartSpec | None:
        with self._runner.lock:
            info = self._metastore.query(query_id)
            if info is None:
                return None
            sink = self._metastore.source(info.sink)
            analyzed = self._metastore.analyzed(query_id)
            properties = dict(self._query_properties.get(query_id, {}))
        if sink is None or analyzed is None:
            return None
        return StartSpec(info, analyzed, sink, properties)

    def _sources_map(self) -> dict[str, SourceInfo]:
        return {s.name: s for s in self._metastore.sources()}

    def query_state(self, query_id: str) -> tuple[str, str | None, str | None]:
        """(state, error, owner URL) of a persistent query as this node knows it."""
        local = self._local.state(query_id)
        if local is not None:
            return local[0], local[1], self.url
        assignment = self._assignment.current if self._assignment is not None else None
        if assignment is None:
            return "PENDING", None, None
        owner = assignment.owner_url(query_id)
        if owner is None:
            return "PENDING", None, None
        error = assignment.errors.get(query_id)
        return ("ERROR" if error else "RUNNING"), error, owner

    def host_statuses(self, query_id: str) -> dict[str, str]:
        """ksqlHostQueryStatus: per node of the cluster, the query's state there (RUNNING or ERROR
        only on the node running it)."""
        state, _error, owner = self.query_state(query_id)
        assignment = self._assignment.current if self._assignment is not None else None
        urls = sorted(set(assignment.urls.values())) if assignment is not None else ([self.url] if self.url else [])
        return {_host_port(url): (state if url == owner else "NOT_RUNNING") for url in urls}

    # --- engine.SqlEngine -----------------------------------------------------------------------------

    @property
    def service_id(self) -> str:
        return self.settings.service_id

    def server_info(self) -> dict[str, Any]:
        if self._terminating:
            status = "TERMINATING"
        elif self._runner.degraded_reason is not None:
            status = "ERROR"
        else:
            status = "RUNNING"
        return {"version": VERSION, "kafkaClusterId": self._cluster_id(), "ksqlServiceId": self.service_id,
                "serverStatus": status}

    def _cluster_id(self) -> str | None:
        """The Kafka cluster's id (Metadata v2+ ``cluster_id``; None from a broker too old to say)."""
        return self._kafka_cluster_id

    def health(self) -> dict[str, Any]:
        """ksqlDB's ``HealthCheckResponse`` (HealthCheckAgent): 200 whatever the checks say, so
        ``isHealthy`` false (degraded replay, Kafka unreachable) is still a 200; only a node that
        is not serving yet (replaying) or any more (shutting down) answers 503, as ksqlDB's
        ServerStateHandler does for every endpoint, /healthcheck included."""
        self._check_ready()
        degraded = self._runner.degraded_reason
        kafka_ok = self._runner.error is None
        details: dict[str, Any] = {
            "metastore": {"isHealthy": self._metastore_readable()},
            "kafka": {"isHealthy": kafka_ok},
            "commandRunner": {"isHealthy": degraded is None},
        }
        if degraded is not None:
            details["commandRunner"]["error"] = degraded
        if self._runner.error is not None:
            details["kafka"]["error"] = self._runner.error
        return {"isHealthy": all(d["isHealthy"] for d in details.values()), "details": details,
                "serverState": "READY"}

    def _metastore_readable(self) -> bool:
        """ksqlDB's metastore check runs ``LIST STREAMS; LIST TABLES; LIST QUERIES;``: the same
        reads, straight from this node's metastore."""
        try:
            snapshot = self._snapshot()
            snapshot.sources()
            snapshot.queries()
        except (KsqlError, ValueError, KeyError, TypeError) as exc:
            log.warning("oncestream sql: health check could not list the metastore: %s", exc)
            return False
        return True

    def cluster_status(self) -> dict[str, Any]:
        assignment = self._assignment.current if self._assignment is not None else None
        now_ms = int(time.time() * 1000)
        urls = sorted(set(assignment.urls.values())) if assignment is not None else ([self.url] if self.url else [])
        status = {}
        for url in urls:
            queries = [q for m, ids in (assignment.queries.items() if assignment else ()) for q in ids
                       if assignment is not None and assignment.urls.get(m) == url]
            status[_host_port(url)] = {"hostAlive": True, "lastStatusUpdateMs": now_ms,
                                       "activeStandbyPerQuery": {q: {"activeStores": [], "standByStores": []}
                                                                 for q in sorted(queries)},
                                       "hostStoreLags": {"stateStoreLags": self._pull.store_lags() if url == self.url else {},
                                                         "updateTimeMs": now_ms}}
        return {"clusterStatus": status}

    def command_status(self, command_id: str) -> dict[str, Any] | None:
        status = self._runner.status(command_id)
        return None if status is None else status.to_json()

    async def execute(self, ksql: str, streams_properties: Mapping[str, Any],
                      session_variables: Mapping[str, Any] | None = None,
                      command_sequence_number: int | None = None) -> list[dict[str, Any]]:
        self._check_ready()
        if command_sequence_number is not None and command_sequence_number >= 0:
            caught_up = await asyncio.to_thread(self._runner.wait_position, command_sequence_number + 1,
                                                self.settings.command_timeout_ms / 1000)
            if not caught_up:
                raise KsqlError("Timed out while waiting for a previous command to execute. "
                                f"command sequence number: {command_sequence_number}",
                                error_code=COMMAND_QUEUE_CATCHUP_TIMEOUT)
        statements = parse(ksql)
        properties = dict(streams_properties)
        results: list[dict[str, Any]] = []
        for statement in statements:
            try:
                entity = await asyncio.to_thread(self._execute_one, statement, properties)
            except KsqlError as exc:
                if exc.statement_text is None and isinstance(exc, StatementError | DegradedError):
                    exc.statement_text = statement.text
                exc.entities = results
                raise
            if entity is not None:
                results.append(entity)
        return results

    def _check_ready(self) -> None:
        if self._terminating:
            raise NotReadyError("The server is shutting down", error_code=SERVER_SHUTTING_DOWN)
        if not self._runner.replayed and self._runner.degraded_reason is None:
            raise NotReadyError("KSQL is not yet ready to serve requests: the command topic is still being replayed")

    def _execute_one(self, statement: ast.Statement, properties: dict[str, Any]) -> dict[str, Any] | None:
        if isinstance(statement, ast.SetProperty):
            properties[statement.name] = statement.value
            return None
        if isinstance(statement, ast.UnsetProperty):
            properties.pop(statement.name, None)
            return None
        if isinstance(statement, _WRITES):
            return self._write(statement, properties)
        if isinstance(statement, ast.InsertValues):
            self._insert_values(statement)
            return None
        if isinstance(statement, ast.QueryStatement):
            raise KsqlError("The following statement types should be issued to the websocket endpoint '/query':\n"
                            "\t* PRINT\n\t* SELECT", error_code=QUERY_ENDPOINT, statement_text=statement.text)
        return self._describe(statement, properties)

    # --- writes through the command topic ---------------------------------------------------------------

    def _snapshot(self) -> Metastore:
        with self._runner.lock:
            return self._metastore.copy()

    def _write(self, statement: ast.Statement, properties: dict[str, Any]) -> dict[str, Any]:
        if self._runner.degraded_reason is not None:
            raise DegradedError(f"The server is not accepting statements: {self._runner.degraded_reason}",
                                statement_text=statement.text)

        def prepare(snapshot: Metastore) -> PreparedCommand:
            command = snapshot.validate(statement, properties, _TopicLookup(self._admin))
            key, value = commands.encode(command)
            before, after = self._topic_actions(statement, command, snapshot)
            return PreparedCommand(key, value, before, after)

        result = self._writer.write(prepare, self._snapshot)
        status = result.status
        if status.state.value == "ERROR":
            raise StatementError(status.message, statement_text=statement.text)
        return {"@type": "currentStatus", "statementText": statement.text, "commandId": status.command_id,
                "commandStatus": status.to_json(), "commandSequenceNumber": result.offset, "warnings": []}

    def _topic_actions(self, statement: ast.Statement, command: commands.Command,
                       snapshot: Metastore) -> tuple[Callable[[], None] | None, Callable[[], None] | None]:
        """What the writer does around the commit (ksqlDB's topic injector, DELETE TOPIC)."""
        plan = command.plan
        if plan.get("createTopic"):
            topic, partitions = str(plan["topic"]), int(plan["partitions"])
            replicas = int(plan.get("replicas") or self.settings.replication_factor)
            compact = getattr(statement, "kind", None) is ast.SourceKind.TABLE
            return (lambda: self._create_topic(topic, partitions, replicas, compact)), None
        if isinstance(statement, ast.DropSource) and statement.delete_topic:
            source = snapshot.source(statement.name)
            if source is not None:
                topic_name = source.topic
                return None, (lambda: self._delete_topic(topic_name))
        return None, None

    def _create_topic(self, topic: str, partitions: int, replicas: int, compact: bool) -> None:
        config = {"cleanup.policy": "compact"} if compact else {}
        result = self._admin.create_topics([NewTopic(topic, partitions, replicas, config)], timeout=30)
        error = result.get(topic)
        if error is not None and error.code() != ErrorCode.topic_already_exists:
            raise KsqlError(f"Could not create topic '{topic}': {error}")

    def _delete_topic(self, topic: str) -> None:
        try:
            self._admin.delete_topics([topic], timeout=30)
        except (KafkaException, TimeoutError) as exc:
            log.warning("oncestream sql: DELETE TOPIC %s failed: %s", topic, exc)

    # --- local statements -------------------------------------------------------------------------------

    def _describe(self, statement: ast.Statement, properties: dict[str, Any]) -> dict[str, Any]:
        """SHOW / LIST / DESCRIBE / EXPLAIN, answered from this node's metastore."""
        text = statement.text
        if isinstance(statement, ast.Show):
            return self._show(statement, properties)
        if isinstance(statement, ast.Describe):
            if statement.function:
                found = entities.describe_function(statement.name or "", text)
                if found is None:
                    raise StatementError(f"Can't find any functions with the name '{statement.name}'", statement_text=text)
                return found
            with self._runner.lock:
                snapshot = self._metastore.copy()
            states = self._query_states(snapshot)
            if statement.name is None:
                kind = (statement.what or ast.ShowWhat.STREAMS).value.rstrip("S")
                return entities.source_descriptions(snapshot, text, kind=kind, extended=statement.extended,
                                                    states=states)
            source = snapshot.source(statement.name)
            if source is None:
                raise StatementError(f"Could not find STREAM/TABLE '{statement.name}' in the Metastore",
                                     statement_text=text)
            description = entities.source_description(snapshot, source, extended=statement.extended, states=states,
                                                      error_stats=self._error_stats(snapshot, source.name)
                                                      if statement.extended else "",
                                                      statistics=self._pull.statistics_text(source.name)
                                                      if statement.extended else "")
            return {"@type": "sourceDescription", "statementText": text, "sourceDescription": description,
                    "warnings": []}
        if isinstance(statement, ast.Explain):
            if statement.query_id is None:
                return self._explain_statement(statement)
            with self._runner.lock:
                snapshot = self._metastore.copy()
            info = snapshot.query(statement.query_id)
            if info is None:
                raise StatementError(f"Query with id:{statement.query_id} does not exist, "
                                     "use SHOW QUERIES to view the full set of running queries.", statement_text=text)
            _state, error, _owner = self.query_state(info.query_id)
            errors = [] if error is None else [entities.query_error(error, int(time.time() * 1000))]
            return entities.query_description_entity(
                snapshot, info, text, host_states=self.host_statuses(info.query_id), errors=errors,
                overridden_properties=self._query_properties.get(info.query_id, {}))
        raise StatementError(f"Unsupported statement: {type(statement).__name__}", statement_text=text)

    def _explain_statement(self, statement: ast.Explain) -> dict[str, Any]:
        """``EXPLAIN <SELECT | CREATE ... AS SELECT | INSERT INTO ... SELECT>``: the query as the
        analyzer sees it, not running anywhere."""
        inner = statement.statement
        query = getattr(inner, "query", None)
        if inner is None or not isinstance(query, ast.Query):
            raise StatementError("EXPLAIN takes a query id or a statement with a query", statement_text=statement.text)
        with self._runner.lock:
            sources = self._sources_map()
        sink = getattr(inner, "name", None) or getattr(inner, "target", None)
        analyzed = analyze_query(query, sources, sink=sink)
        names = list(dict.fromkeys(s.name for s in analyzed.sources.values()))
        return entities.transient_query_description(statement.text, inner.text, analyzed.columns, names)

    def _show(self, statement: ast.Show, properties: dict[str, Any]) -> dict[str, Any]:
        text = statement.text
        with self._runner.lock:
            snapshot = self._metastore.copy()
        what = statement.what
        if what is ast.ShowWhat.STREAMS:
            if statement.extended:
                return entities.source_descriptions(snapshot, text, kind="STREAM", extended=True,
                                                    states=self._query_states(snapshot))
            return entities.streams(snapshot, text)
        if what is ast.ShowWhat.TABLES:
            if statement.extended:
                return entities.source_descriptions(snapshot, text, kind="TABLE", extended=True,
                                                    states=self._query_states(snapshot))
            return entities.tables(snapshot, text)
        if what is ast.ShowWhat.QUERIES:
            return entities.queries(snapshot, text, self._query_states(snapshot))
        if what is ast.ShowWhat.TOPICS:
            return entities.kafka_topics(self._topics(), text)
        if what is ast.ShowWhat.PROPERTIES:
            server = {k: v for k, v in self.settings.properties.items() if not k.startswith(("ssl.", "sasl."))}
            server.setdefault("ksql.service.id", self.service_id)
            server.setdefault("ksql.streams.bootstrap.servers", self.settings.bootstrap_servers)
            return entities.properties(server, properties, text)
        if what is ast.ShowWhat.FUNCTIONS:
            return entities.function_names(text)
        raise StatementError(f"Unsupported statement: SHOW {what}", statement_text=text)

    def _query_states(self, snapshot: Metastore) -> dict[str, str]:
        return {q.query_id: self.query_state(q.query_id)[0] for q in snapshot.queries()}

    def _error_stats(self, snapshot: Metastore, name: str) -> str:
        lines = []
        for q in snapshot.queries():
            if q.sink == name or name in q.sources:
                state, error, _owner = self.query_state(q.query_id)
                if state == "ERROR" and error:
                    lines.append(f"{q.query_id}: {error}")
        return "\n".join(lines)

    def _topics(self) -> dict[str, list[int]]:
        names = [t for t in self._admin.list_topics(timeout=30) if not t.startswith("_")]
        described = self._admin.describe_topics(names, timeout=30)
        return {n: [len(p.replicas) for p in d.partitions] for n, d in described.items() if d.error is None}

    def _insert_values(self, statement: ast.InsertValues) -> None:
        with self._runner.lock:
            sink = self._metastore.source(statement.target)
        if sink is None:
            raise StatementError(f"Cannot insert values into an unknown stream/table: {statement.target}",
                                 statement_text=statement.text)
        if sink.read_only:
            raise StatementError(f"Cannot insert values into read-only {sink.kind.value.lower()}: {sink.name}",
                                 statement_text=statement.text)
        self.runtime.insert_values(sink, values_row(statement, sink))

    # --- push queries and inserts -----------------------------------------------------------------------

    async def start_query(self, sql: str, properties: Mapping[str, Any]) -> QueryStream:
        self._check_ready()
        statements = parse(sql)
        if len(statements) != 1 or not isinstance(statements[0], ast.QueryStatement):
            raise StatementError("The /query endpoint only runs a single SELECT statement",
                                 statement_text=statements[0].text if statements else sql)
        statement = statements[0]
        with self._runner.lock:
            sources = self._sources_map()
        try:
            analyzed = analyze_query(statement.query, sources)
        except KsqlError as exc:
            if exc.statement_text is None:
                exc.statement_text = statement.text
            raise
        if PullQueries.is_pull(statement):
            # Answered from this node's materialized copy; not a push query, so not registered.
            return await self._pull.start_query(analyzed)
        stream: QueryStream = await asyncio.to_thread(self.runtime.start_push, analyzed, dict(properties),
                                                      query=statement.query)
        with self._push_lock:
            # The REST layer closes streams itself when they end: forget the finished ones.
            for finished in [q for q, s in self._push.items() if getattr(s, "done", False)]:
                del self._push[finished]
            self._push[stream.query_id] = stream
        return stream

    async def close_query(self, query_id: str) -> bool:
        with self._push_lock:
            stream = self._push.pop(query_id, None)
        if stream is None:
            return False
        await stream.close()
        return True

    async def insert_row(self, target: str, row: Mapping[str, Any]) -> None:
        self._check_ready()
        with self._runner.lock:
            sink = self._metastore.source(target)
        if sink is None:
            raise NotFoundError(f"Cannot insert values into an unknown stream/table: {target}")
        await asyncio.to_thread(self.runtime.insert_values, sink, json_row(sink, row))

    # --- for tests and the server process -------------------------------------------------------------

    @property
    def runner(self) -> CommandRunner:
        return self._runner

    def metastore_snapshot(self) -> Metastore:
        """A copy of this node's metastore."""
        return self._snapshot()


class _TopicLookup(Mapping[str, int]):
    """The Kafka topics (name -> partition count) as ``Metastore.validate`` asks about them: one
    DescribeTopics per name looked up, instead of describing the whole cluster."""

    def __init__(self, admin: Admin) -> None:
        self._admin = admin
        self._known: dict[str, int | None] = {}

    def _partitions(self, name: str) -> int | None:
        if name not in self._known:
            description = self._admin.describe_topics([name], timeout=30).get(name)
            ok = description is not None and description.error is None and description.partitions
            self._known[name] = len(description.partitions) if ok and description is not None else None
        return self._known[name]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._partitions(name) is not None

    def __getitem__(self, name: str) -> int:
        count = self._partitions(name)
        if count is None:
            raise KeyError(name)
        return count

    def __iter__(self) -> Iterator[str]:
        return iter(self._admin.list_topics(timeout=30))

    def __len__(self) -> int:
        return len(self._admin.list_topics(timeout=30))


def _host_port(url: str) -> str:
    return url.split("://", 1)[-1].rstrip("/")
