"""One SQL-server node: the ``engine.interface.SqlEngine`` the REST layer calls, put together
from its parts (``node_context`` is what they share):

- ``statements``: a ``/ksql`` request. Statements that change the metastore (CREATE, DROP, INSERT
  INTO ... SELECT, TERMINATE, PAUSE, RESUME) go through the command topic (``command_topic.CommandWriter``); the
  answer is sent once this node's runner has applied the command, with its real status and
  ``commandSequenceNumber``. Local statements (SHOW, LIST, DESCRIBE, EXPLAIN: ``local_statements``;
  SET, UNSET) are answered from this node's metastore.
- ``queries``: push queries run on the node asked, pull queries are answered from its
  materialized tables, INSERT INTO ... VALUES writes the row directly (as ksqlDB does: it is not a
  command).
- ``placement``: persistent queries run where the query-assignment group puts them
  (``assignment``); this node starts and stops its own share (``local_queries``).
- This module: the lifecycle, the command runner's side (apply each command to the metastore,
  then tell placement and the pull-query tables), ``/info`` and ``/healthcheck``.
- Degraded mode: the runner found a record it cannot read; reads and running queries go on,
  statements are refused with the reason, ``/info`` says ERROR and ``/healthcheck`` unhealthy.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from oncestream.client import Admin
from oncestream.sql.engine.interface import QueryRunner, QueryStream
from oncestream.sql.engine.pull.node_hooks import PullQueries
from oncestream.sql.errors import KsqlError
from oncestream.sql.server import commands
from oncestream.sql.server.command_runner import Applied, CommandRunner
from oncestream.sql.server.command_topic import (
    CommandWriter,
    WriteStepObserver,
    command_topic_name,
    ensure_command_topic,
)
from oncestream.sql.server.local_statements import LocalStatements
from oncestream.sql.server.metastore import ChangeRunState, CommandResult, Metastore, StartQuery, StopQuery
from oncestream.sql.server.metrics import SqlServerMetrics
from oncestream.sql.server.node_context import NodeContext, NodeSettings
from oncestream.sql.server.placement import QueryPlacement
from oncestream.sql.server.queries import QueryService
from oncestream.sql.server.statements import StatementExecutor

log = logging.getLogger("oncestream.sql")

VERSION = "0.29.0-oncestream"     # what /info reports (ksqlDB's clients parse major.minor)

__all__ = ["VERSION", "Node", "NodeSettings"]


class Node:
    """A SQL-server node (implements ``engine.interface.SqlEngine``)."""

    def __init__(self, settings: NodeSettings, runtime: QueryRunner, *, write_steps: WriteStepObserver | None = None) -> None:
        """``write_steps`` is told each step of the command-topic write protocol (injected;
        command_topic.WriteStepObserver), nobody by default."""
        self.settings = settings
        self.runtime = runtime
        self.topic = command_topic_name(settings.service_id)
        admin = Admin(settings.client_conf)
        self._runner = CommandRunner(topic=self.topic, client_conf=settings.client_conf, decode=self._decode,
                                     apply=self._apply, incompatible=(commands.IncompatibleCommandError,))
        self._context = NodeContext(settings, self._runner, Metastore(), admin)
        self._pull = PullQueries(settings.state_dir or ".", settings.bootstrap_servers, settings.client_properties)
        writer = CommandWriter(topic=self.topic, service_id=settings.service_id, client_conf=settings.client_conf,
                               runner=self._runner, admin=admin, steps=write_steps, timeout_ms=settings.command_timeout_ms)
        self._placement = QueryPlacement(self._context, runtime, self._pull.store_lags)
        self.metrics = SqlServerMetrics()  # served when the node is started with metrics.listen
        self._queries = QueryService(self._context, runtime, self._pull, lambda: self._placement.url,
                                     on_pull_done=self.metrics.pull_query_done)
        local = LocalStatements(self._context, self._placement, self._pull.statistics_text)
        self._statements = StatementExecutor(self._context, writer, local, self._queries)
        self._kafka_cluster_id: str | None = None     # the Kafka cluster's id, read once at start

    # --- lifecycle --------------------------------------------------------------------------------

    def start(self, replay_timeout_s: float | None = None) -> None:
        """Create the command topic if missing and start replaying it."""
        admin = self._context.admin
        ensure_command_topic(admin, self.topic, self.settings.replication_factor)
        # /info's kafkaClusterId (ksqlDB asks DescribeCluster once too): the cluster cannot change
        # its id under a running node, so one answer is enough.
        self._kafka_cluster_id = admin.describe_cluster(timeout=30).cluster_id
        self._runner.start()
        self._placement.start()
        if replay_timeout_s is not None:
            self._runner.wait_replayed(replay_timeout_s)

    def join_cluster(self, url: str) -> None:
        """Join the query-assignment group as ``url`` (once the REST API listens there)."""
        self._placement.join_cluster(url)

    @property
    def url(self) -> str | None:
        """This node's REST URL (None before ``join_cluster``)."""
        return self._placement.url

    def stop(self) -> None:
        """Stop push queries, then the local persistent queries at a batch boundary, then leave
        the group (so no other node starts a query while it still runs here), then stop replaying."""
        self._context.terminating = True
        self._queries.close_all()
        self._placement.stop()
        self._runner.stop()
        self._pull.close()
        self._context.admin.close()

    # --- the command runner's side (runner thread, under runner.lock) -------------------------------

    def _decode(self, key: bytes | None, value: bytes | None) -> Any:
        return commands.decode(key, value)

    def _apply(self, command: commands.Command, offset: int) -> Applied:
        metastore = self._context.metastore
        effects = metastore.apply(command, offset)
        result = Applied("Success")
        queries_changed = False
        for effect in effects:
            # CreateTopic / DeleteTopic were done by the node that wrote the command, around its
            # commit (ksqlDB's injectors); every other node only follows the metastore.
            if isinstance(effect, StartQuery | StopQuery | ChangeRunState):
                queries_changed = True
            elif isinstance(effect, CommandResult):
                result = Applied(effect.message, effect.query_id, refused=effect.status != "SUCCESS")
        if queries_changed:
            self._placement.queries_changed_at(offset)
        # Every node materializes every table for pull queries (new tables start, dropped ones go).
        self._pull.metastore_changed(metastore.sources())
        return result

    # --- engine.interface.SqlEngine -------------------------------------------------------------------

    @property
    def service_id(self) -> str:
        return self.settings.service_id

    def server_info(self) -> dict[str, Any]:
        if self._context.terminating:
            status = "TERMINATING"
        elif self._runner.degraded_reason is not None:
            status = "ERROR"
        else:
            status = "RUNNING"
        return {"version": VERSION, "kafkaClusterId": self._kafka_cluster_id, "ksqlServiceId": self.service_id,
                "serverStatus": status}

    def health(self) -> dict[str, Any]:
        """ksqlDB's ``HealthCheckResponse`` (HealthCheckAgent): 200 whatever the checks say, so
        ``isHealthy`` false (degraded replay, Kafka unreachable) is still a 200; only a node that
        is not serving yet (replaying) or any more (shutting down) answers 503, as ksqlDB's
        ServerStateHandler does for every endpoint, /healthcheck included."""
        self._context.check_ready()
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
            snapshot = self._context.snapshot()
            snapshot.sources()
            snapshot.queries()
        except (KsqlError, ValueError, KeyError, TypeError) as exc:
            log.warning("oncestream sql: health check could not list the metastore: %s", exc)
            return False
        return True

    def cluster_status(self) -> dict[str, Any]:
        return self._placement.cluster_status()

    def command_status(self, command_id: str) -> dict[str, Any] | None:
        status = self._runner.status(command_id)
        return None if status is None else status.to_json()

    async def execute(self, ksql: str, streams_properties: Mapping[str, Any],
                      session_variables: Mapping[str, Any] | None = None,
                      command_sequence_number: int | None = None) -> list[dict[str, Any]]:
        return await self._statements.execute(ksql, streams_properties, command_sequence_number, session_variables)

    async def start_query(self, sql: str, properties: Mapping[str, Any], *, query_stream: bool = False) -> QueryStream:
        return await self._queries.start_query(sql, properties, query_stream=query_stream)

    async def close_query(self, query_id: str) -> bool:
        return await self._queries.close_query(query_id)

    async def insert_row(self, target: str, row: Mapping[str, Any]) -> None:
        await self._queries.insert_row(target, row)

    # --- for tests and the server process -------------------------------------------------------------

    @property
    def runner(self) -> CommandRunner:
        return self._runner

    def metastore_snapshot(self) -> Metastore:
        """A copy of this node's metastore."""
        return self._context.snapshot()
