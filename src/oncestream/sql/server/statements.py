"""The statements of a ``/ksql`` request, run in order on one node: those that change the
metastore (CREATE, DROP, INSERT INTO ... SELECT, TERMINATE, PAUSE, RESUME) go through the command
topic and are answered once this node's runner applied them, with their real status and
``commandSequenceNumber``; SET / UNSET change the request's properties; DEFINE / UNDEFINE its
variables (ksqlDB's ``sessionVariables``: the request brings the session's, a DEFINE counts for
the later statements of the same request, and ``${name}`` is substituted before a statement is
parsed); INSERT ... VALUES writes the row directly; SHOW / DESCRIBE / EXPLAIN are answered locally
(``local_statements``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from oncestream.client import Admin, KafkaException, NewTopic
from oncestream.sql.engine.serde import current_registry
from oncestream.sql.errors import COMMAND_QUEUE_CATCHUP_TIMEOUT, QUERY_ENDPOINT, DegradedError, KsqlError, StatementError
from oncestream.sql.language import sql_ast
from oncestream.sql.language.parser import PendingStatement, parse_request
from oncestream.sql.language.parser.variables import VARIABLE_SUBSTITUTION_ENABLE, SessionVariables
from oncestream.sql.language.statement_plan import with_server_defaults
from oncestream.sql.server import commands, entities
from oncestream.sql.server.command_topic import CommandWriter, PreparedCommand
from oncestream.sql.server.local_statements import LocalStatements
from oncestream.sql.server.metastore import Metastore
from oncestream.sql.server.node_context import NodeContext
from oncestream.sql.server.queries import QueryService

log = logging.getLogger("oncestream.sql")


class StatementExecutor:
    """Runs ``/ksql`` requests for one node (see the module docstring)."""

    def __init__(self, context: NodeContext, writer: CommandWriter, local: LocalStatements,
                 queries: QueryService) -> None:
        self._context = context
        self._writer = writer
        self._local = local
        self._queries = queries

    async def execute(self, ksql: str, streams_properties: Mapping[str, Any],
                      command_sequence_number: int | None = None,
                      session_variables: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """The entities of the request's statements (``SqlEngine.execute``); ``session_variables``
        the request's ``sessionVariables`` (the variables DEFINE'd earlier in the session)."""
        self._context.check_ready()
        runner = self._context.runner
        if command_sequence_number is not None and command_sequence_number >= 0:
            caught_up = await asyncio.to_thread(runner.wait_position, command_sequence_number + 1,
                                                self._context.settings.command_timeout_ms / 1000)
            if not caught_up:
                raise KsqlError("Timed out while waiting for a previous command to execute. "
                                f"command sequence number: {command_sequence_number}",
                                error_code=COMMAND_QUEUE_CATCHUP_TIMEOUT)
        pending = parse_request(ksql)
        properties = dict(streams_properties)
        variables = SessionVariables(session_variables)
        results: list[dict[str, Any]] = []
        for one in pending:
            statement: sql_ast.Statement | None = None
            try:
                custom_types = self._context.snapshot().custom_types() if one.parsed is None or one.names_types else None
                statement = one.resolve(variables if self._substitution_enabled(properties) else None, custom_types)
                if _is_variable_statement(statement):
                    entity = _variable_statement(statement, variables)
                else:
                    entity = await asyncio.to_thread(self._execute_one, statement, properties)
            except KsqlError as exc:
                if exc.statement_text is None and isinstance(exc, StatementError | DegradedError):
                    exc.statement_text = statement.text if statement is not None else _text_of(one)
                exc.entities = results
                raise
            if entity is not None:
                results.append(entity)
        return results

    def _substitution_enabled(self, properties: Mapping[str, Any]) -> bool:
        """``ksql.variable.substitution.enable``: the request's value if it set one, else the
        server's (default true), as ksqlDB's RequestHandler decides."""
        for value in (properties.get(VARIABLE_SUBSTITUTION_ENABLE),
                      self._context.settings.properties.get(VARIABLE_SUBSTITUTION_ENABLE)):
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().lower() in ("true", "false"):
                return value.strip().lower() == "true"
        return True

    def _execute_one(self, statement: sql_ast.Statement, properties: dict[str, Any]) -> dict[str, Any] | None:
        if isinstance(statement, sql_ast.SetProperty):
            properties[statement.name] = statement.value
            return None
        if isinstance(statement, sql_ast.UnsetProperty):
            properties.pop(statement.name, None)
            return None
        if commands.goes_to_command_topic(statement):
            return self._write(statement, properties)
        if isinstance(statement, sql_ast.InsertValues):
            self._queries.insert_values(statement)
            return None
        if isinstance(statement, sql_ast.QueryStatement | sql_ast.PrintTopic):
            raise KsqlError("The following statement types should be issued to the websocket endpoint '/query':\n"
                            "\t* PRINT\n\t* SELECT", error_code=QUERY_ENDPOINT, statement_text=statement.text)
        return self._local.answer(statement, properties)

    # --- writes through the command topic ---------------------------------------------------------------

    def _write(self, statement: sql_ast.Statement, properties: dict[str, Any]) -> dict[str, Any]:
        degraded = self._context.runner.degraded_reason
        if degraded is not None:
            raise DegradedError(f"The server is not accepting statements: {degraded}", statement_text=statement.text)

        # A default the server's config sets and the request does not (ksqlDB: the request's
        # properties over the server's) is recorded in the command, so every node applies it alike.
        properties = with_server_defaults(properties, self._context.settings.properties)

        def prepare(snapshot: Metastore) -> PreparedCommand:
            command = snapshot.validate(statement, properties, _TopicLookup(self._context.admin), current_registry())
            key, value = commands.encode(command)
            before, after = self._topic_actions(statement, command, snapshot)
            return PreparedCommand(key, value, before, after)

        result = self._writer.write(prepare, self._context.snapshot)
        status = result.status
        if status.state.value == "ERROR":
            raise StatementError(status.message, statement_text=statement.text)
        return {"@type": "currentStatus", "statementText": statement.text, "commandId": status.command_id,
                "commandStatus": status.to_json(), "commandSequenceNumber": result.offset, "warnings": []}

    def _topic_actions(self, statement: sql_ast.Statement, command: commands.Command,
                       snapshot: Metastore) -> tuple[Callable[[], None] | None, Callable[[], None] | None]:
        """What the writer does around the commit (ksqlDB's topic injector, DELETE TOPIC)."""
        plan = command.plan
        if plan.get("createTopic"):
            topic, partitions = str(plan["topic"]), int(plan["partitions"])
            replicas = int(plan.get("replicas") or self._context.settings.replication_factor)
            compact = getattr(statement, "kind", None) is sql_ast.SourceKind.TABLE
            return (lambda: self._create_topic(topic, partitions, replicas, compact)), None
        if isinstance(statement, sql_ast.DropSource) and statement.delete_topic:
            source = snapshot.source(statement.name)
            if source is not None:
                topic_name = source.topic
                return None, (lambda: self._delete_topic(topic_name))
        return None, None

    def _create_topic(self, topic: str, partitions: int, replicas: int, compact: bool) -> None:
        config = {"cleanup.policy": "compact"} if compact else {}
        result = self._context.admin.create_topics([NewTopic(topic, partitions, replicas, config)], timeout=30)
        error = result.get(topic)
        if error is not None and error.code() != ErrorCode.topic_already_exists:
            raise KsqlError(f"Could not create topic '{topic}': {error}")

    def _delete_topic(self, topic: str) -> None:
        try:
            self._context.admin.delete_topics([topic], timeout=30)
        except (KafkaException, TimeoutError) as exc:
            log.warning("oncestream sql: DELETE TOPIC %s failed: %s", topic, exc)


def _is_variable_statement(statement: sql_ast.Statement) -> bool:
    return isinstance(statement, sql_ast.DefineVariable | sql_ast.UndefineVariable) or (
        isinstance(statement, sql_ast.Show) and statement.what is sql_ast.ShowWhat.VARIABLES)


def _variable_statement(statement: sql_ast.Statement, variables: SessionVariables) -> dict[str, Any] | None:
    """DEFINE / UNDEFINE / SHOW VARIABLES (ksqlDB's VariableExecutor, ListVariablesExecutor)."""
    if isinstance(statement, sql_ast.DefineVariable):
        variables.define(statement.name, statement.value)
        return None
    if isinstance(statement, sql_ast.UndefineVariable):
        if not variables.undefine(statement.name):
            return entities.warning(statement.text,
                                    f"Cannot undefine variable '{statement.name}' which was never defined")
        return None
    return entities.variables(statement.text, variables)


def _text_of(pending: PendingStatement) -> str:
    if pending.parsed is not None:
        return pending.parsed.text
    start = pending.tokens[0].start
    return pending.text[start:pending.end] + ("" if pending.semicolon is not None else ";")


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
