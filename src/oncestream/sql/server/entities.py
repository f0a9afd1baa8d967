"""ksqlDB's ``/ksql`` response entities, built from the metastore, as its REST API writes them
(``io.confluent.ksql.rest.entity``): every entity has ``"@type"``, ``"statementText"`` and
``"warnings": []``.

Runtime state (which queries run where, their errors) is not in the metastore: callers pass it
in (``states``: query id -> ``RUNNING`` / ``ERROR`` / ``PENDING`` / ``UNRESPONSIVE``...; for EXPLAIN
``host_states``: ``"host:port"`` -> state). Queries with no state given are reported RUNNING only
if ``default_state`` says so (the node decides).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from oncestream.sql.language import functions
from oncestream.sql.language.catalog import Column, QueryInfo, SourceInfo
from oncestream.sql.language.types import BaseType, SqlType
from oncestream.sql.server.metastore import Metastore

# ksqlDB's query-level properties (PropertiesList.QueryLevelProperties): SET-able per query.
QUERY_LEVEL_PROPERTIES = frozenset({
    "auto.offset.reset", "buffered.records.per.partition", "cache.max.bytes.buffering", "ksql.fail.on.deserialization.error",
    "ksql.functions.string.case.toggle", "ksql.nested.error.set.null", "ksql.query.retry.backoff.max.ms",
    "ksql.query.pull.max.allowed.offset.lag", "ksql.query.pull.table.scan.enabled", "ksql.timestamp.throw.on.invalid",
    "max.task.idle.ms", "task.timeout.ms",
})


def _entity(kind: str, statement_text: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"@type": kind, "statementText": statement_text, **body, "warnings": []}


# -- schemas ------------------------------------------------------------------------------------


def schema_info(ty: SqlType) -> dict[str, Any]:
    """ksqlDB's ``SchemaInfo``: ``{"type", "fields", "memberSchema"}`` (+ ``parameters`` for
    DECIMAL)."""
    out: dict[str, Any] = {"type": ty.base.value, "fields": None, "memberSchema": None}
    if ty.base is BaseType.STRUCT:
        out["fields"] = [{"name": f.name, "schema": schema_info(f.type)} for f in ty.fields]
    elif ty.base is BaseType.ARRAY and ty.element is not None:
        out["memberSchema"] = schema_info(ty.element)
    elif ty.base is BaseType.MAP and ty.element is not None:
        out["memberSchema"] = schema_info(ty.element)
    elif ty.base is BaseType.DECIMAL:
        out["parameters"] = {"precision": ty.precision, "scale": ty.scale}
    return out


def field_info(col: Column) -> dict[str, Any]:
    """ksqlDB's ``FieldInfo``: ``type`` is ``"KEY"`` for key columns, ``"HEADER"`` for header
    columns (with ``headerKey`` for HEADER('k')) and absent otherwise."""
    out: dict[str, Any] = {"name": col.name, "schema": schema_info(col.type)}
    if col.is_key:
        out["type"] = "KEY"
    elif col.is_header:
        out["type"] = "HEADER"
        if col.header_key is not None:
            out["headerKey"] = col.header_key
    return out


def fields(columns: Iterable[Column]) -> list[dict[str, Any]]:
    return [field_info(c) for c in columns]


def _window_type(source: SourceInfo) -> str | None:
    return None if source.window is None else source.window.kind.value


# -- lists ----------------------------------------------------------------------------------------


def _source_info(s: SourceInfo) -> dict[str, Any]:
    return {"type": s.kind.value, "name": s.name, "topic": s.topic, "keyFormat": s.key_format.value,
            "valueFormat": s.value_format.value, "isWindowed": s.window is not None}


def streams(metastore: Metastore, statement_text: str) -> dict[str, Any]:
    """``SHOW STREAMS``: ``{"@type": "streams", "streams": [...]}``."""
    items = [_source_info(s) for s in metastore.sources() if s.kind.value == "STREAM"]
    return _entity("streams", statement_text, {"streams": items})


def tables(metastore: Metastore, statement_text: str) -> dict[str, Any]:
    """``SHOW TABLES``: ``{"@type": "tables", "tables": [...]}``."""
    items = [_source_info(s) for s in metastore.sources() if s.kind.value == "TABLE"]
    return _entity("tables", statement_text, {"tables": items})


def running_query(metastore: Metastore, q: QueryInfo, states: Mapping[str, str],
                  default_state: str = "RUNNING") -> dict[str, Any]:
    """ksqlDB's ``RunningQuery`` (an item of SHOW QUERIES, readQueries, writeQueries)."""
    state = states.get(q.query_id, default_state)
    sink = metastore.source(q.sink)
    return {"queryString": q.statement, "sinks": [q.sink], "sinkKafkaTopics": [sink.topic] if sink else [],
            "id": q.query_id, "statusCount": {state: 1}, "queryType": "PERSISTENT", "state": state}


def queries(metastore: Metastore, statement_text: str, states: Mapping[str, str] | None = None,
            default_state: str = "RUNNING") -> dict[str, Any]:
    """``SHOW QUERIES``: ``{"@type": "queries", "queries": [RunningQuery...]}``."""
    st = states or {}
    return _entity("queries", statement_text, {"queries": [running_query(metastore, q, st, default_state)
                                                           for q in metastore.queries()]})


def kafka_topics(topics: Mapping[str, Sequence[int]], statement_text: str) -> dict[str, Any]:
    """``SHOW TOPICS``: ``topics`` maps a name to its replica count per partition."""
    items = [{"name": n, "replicaInfo": list(topics[n])} for n in sorted(topics) if not n.startswith("_")]
    return _entity("kafka_topics", statement_text, {"topics": items})


# ksqlDB's PropertiesList.MutableSystemProperties (ALTER SYSTEM-able), by their resolved names.
MUTABLE_SYSTEM_PROPERTIES = frozenset({
    "max.poll.records", "max.poll.interval.ms", "session.timeout.ms", "heartbeat.interval.ms", "fetch.min.bytes",
    "fetch.max.bytes", "fetch.max.wait.ms", "metadata.max.age.ms", "max.partition.fetch.bytes", "batch.size", "linger.ms",
    "delivery.timeout.ms", "max.request.size", "max.block.ms", "buffer.memory", "compression.type",
    "acceptable.recovery.lag", "commit.interval.ms", "max.warmup.replicas", "num.standby.replicas", "poll.ms",
    "probing.rebalance.interval.ms", "processing.guarantee", "window.size.ms",
})


def _property_level(name: str) -> str:
    # as ksqlDB: the exact name decides the level ("ksql.streams.auto.offset.reset" is SERVER) ...
    return "QUERY" if name in QUERY_LEVEL_PROPERTIES else "SERVER"


def _property_editable(name: str) -> bool:
    # ... while editability is judged on the resolved name (prefixes stripped)
    bare = name
    for prefix in ("ksql.streams.consumer.", "ksql.streams.producer.", "ksql.streams.", "ksql.consumer.", "ksql.producer."):
        if name.startswith(prefix):
            bare = name[len(prefix):]
            break
    return bare in QUERY_LEVEL_PROPERTIES or bare in MUTABLE_SYSTEM_PROPERTIES or name in QUERY_LEVEL_PROPERTIES


def properties(server: Mapping[str, Any], overrides: Mapping[str, Any], statement_text: str,
               defaults: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``SHOW PROPERTIES``: the server's properties with the request's/session's overrides
    applied; ``overwrittenProperties`` lists those the overrides changed, ``defaultProperties``
    those equal to ``defaults``."""
    merged = {k: str(v) for k, v in server.items()}
    merged.update({k: str(v) for k, v in overrides.items()})
    items = []
    for name in sorted(merged):
        items.append({"name": name, "scope": "KSQL", "value": merged[name], "editable": _property_editable(name),
                      "level": _property_level(name)})
    overwritten = [n for n in sorted(merged) if n in overrides and str(server.get(n)) != merged[n]]
    default = [n for n in sorted(merged) if defaults is not None and n in defaults and str(defaults[n]) == merged[n]]
    return _entity("properties", statement_text, {"properties": items, "overwrittenProperties": overwritten,
                                                  "defaultProperties": default})


# -- describe / explain ---------------------------------------------------------------------------


def source_description(metastore: Metastore, source: SourceInfo, *, extended: bool = False,
                       states: Mapping[str, str] | None = None, default_state: str = "RUNNING",
                       statistics: str = "", error_stats: str = "") -> dict[str, Any]:
    """ksqlDB's ``SourceDescription`` (the object inside a ``sourceDescription`` entity)."""
    st = states or {}
    readers = [running_query(metastore, q, st, default_state) for q in metastore.queries() if source.name in q.sources]
    writers = [running_query(metastore, q, st, default_state) for q in metastore.queries() if q.sink == source.name]
    return {
        "name": source.name,
        "windowType": _window_type(source),
        "readQueries": readers,
        "writeQueries": writers,
        "fields": fields(source.columns),
        "type": source.kind.value,
        "timestamp": source.timestamp_column or "",
        "statistics": statistics if extended else "",
        "errorStats": error_stats if extended else "",
        "extended": extended,
        "keyFormat": source.key_format.value,
        "valueFormat": source.value_format.value,
        "topic": source.topic,
        "partitions": source.partitions if extended else 0,
        "replication": source.replicas if extended else 0,
        "statement": source.statement,
        "queryOffsetSummaries": [],
        "sourceConstraints": metastore.referenced_by(source.name),
        "clusterStatistics": [],
        "clusterErrorStats": [],
    }


def source_description_entity(metastore: Metastore, source: SourceInfo, statement_text: str, *, extended: bool = False,
                              states: Mapping[str, str] | None = None, default_state: str = "RUNNING") -> dict[str, Any]:
    """``DESCRIBE name [EXTENDED]``: ``{"@type": "sourceDescription", "sourceDescription": {...}}``."""
    desc = source_description(metastore, source, extended=extended, states=states, default_state=default_state)
    return _entity("sourceDescription", statement_text, {"sourceDescription": desc})


def source_descriptions(metastore: Metastore, statement_text: str, *, kind: str, extended: bool = False,
                        states: Mapping[str, str] | None = None, default_state: str = "RUNNING") -> dict[str, Any]:
    """``DESCRIBE STREAMS|TABLES [EXTENDED]``: ``{"@type": "source_descriptions", "sourceDescriptions": [...]}``."""
    descs = [source_description(metastore, s, extended=extended, states=states, default_state=default_state)
             for s in metastore.sources() if s.kind.value == kind]
    return _entity("source_descriptions", statement_text, {"sourceDescriptions": descs})


def query_description(metastore: Metastore, q: QueryInfo, *, host_states: Mapping[str, str],
                      overridden_properties: Mapping[str, Any] | None = None, errors: Sequence[dict[str, Any]] = (),
                      execution_plan: str = "", topology: str = "", consumer_group_id: str = "") -> dict[str, Any]:
    """ksqlDB's ``QueryDescription``. ``host_states`` is the state per ``"host:port"`` (RUNNING,
    ERROR or PAUSED only on the node it is placed on); ``state`` is RUNNING if any host runs it,
    else the first state other than NOT_RUNNING, else the first reported state."""
    sink = metastore.source(q.sink)
    states = list(host_states.values())
    placed = [s for s in states if s != "NOT_RUNNING"]
    state = "RUNNING" if "RUNNING" in states else (placed or states or ["UNRESPONSIVE"])[0]
    return {
        "id": q.query_id,
        "statementText": q.statement,
        "windowType": None if sink is None else _window_type(sink),
        "fields": fields(q.output_columns),
        "sources": list(q.sources),
        "sinks": [q.sink],
        "topology": topology,
        "executionPlan": execution_plan,
        "overriddenProperties": dict(overridden_properties if overridden_properties is not None
                                     else metastore.query_properties(q.query_id)),
        "ksqlHostQueryStatus": dict(host_states),
        "queryType": "PERSISTENT",
        "queryErrors": list(errors),
        "tasksMetadata": [],
        "state": state,
        "consumerGroupId": consumer_group_id,
    }


# ksqlDB's QueryError.Type: USER for what the user must fix (ksqlDB's AuthorizationClassifier puts
# Kafka authorization failures there; a broker that refuses two-phase commit is fixed by its
# operator the same way), UNKNOWN for the rest. Our errors travel between nodes as text, so the
# class is read from the words every such error carries.
_USER_ERROR_MARKERS = ("AUTHORIZATION_FAILED", "two-phase commit")


def query_error(message: str, timestamp_ms: int) -> dict[str, Any]:
    """One entry of ``queryErrors`` (ksqlDB's ``QueryError``: errorMessage, timestamp, type)."""
    kind = "USER" if any(marker in message for marker in _USER_ERROR_MARKERS) else "UNKNOWN"
    return {"type": kind, "errorMessage": message, "timestamp": timestamp_ms}


def query_description_entity(metastore: Metastore, q: QueryInfo, statement_text: str, *, host_states: Mapping[str, str],
                             **kw: Any) -> dict[str, Any]:
    """``EXPLAIN <query id>``: ``{"@type": "queryDescription", "queryDescription": {...}}``."""
    return _entity("queryDescription", statement_text,
                   {"queryDescription": query_description(metastore, q, host_states=host_states, **kw)})


def transient_query_description(statement_text: str, query_text: str, columns: Sequence[Column], sources: Sequence[str],
                                execution_plan: str = "") -> dict[str, Any]:
    """``EXPLAIN <SELECT ...>``: the description of a query that is not running."""
    body: dict[str, Any] = {
            "id": "", "statementText": query_text, "windowType": None, "fields": fields(columns), "sources": list(sources),
            "sinks": [], "topology": "", "executionPlan": execution_plan, "overriddenProperties": {},
            "ksqlHostQueryStatus": {}, "queryType": "PUSH", "queryErrors": [], "tasksMetadata": [], "state": None,
            "consumerGroupId": ""}
    return _entity("queryDescription", statement_text, {"queryDescription": body})


# -- command status -------------------------------------------------------------------------------


def command_status(status: str, message: str, query_id: str | None = None) -> dict[str, Any]:
    """ksqlDB's ``CommandStatus`` (also the body of ``GET /status/{commandId}``)."""
    return {"status": status, "message": message, "queryId": query_id}


def current_status(statement_text: str, command_id: str, status: str, message: str, sequence_number: int,
                   query_id: str | None = None) -> dict[str, Any]:
    """``CommandStatusEntity``: the answer to CREATE / DROP / TERMINATE / INSERT INTO."""
    return _entity("currentStatus", statement_text, {"commandId": command_id,
                                                     "commandStatus": command_status(status, message, query_id),
                                                     "commandSequenceNumber": sequence_number})


# -- functions ------------------------------------------------------------------------------------


def type_list(statement_text: str, types: Mapping[str, SqlType]) -> dict[str, Any]:
    """``SHOW TYPES``: ``{"@type": "type_list", "types": {name: SchemaInfo}}``."""
    return _entity("type_list", statement_text, {"types": {name: schema_info(ty) for name, ty in types.items()}})


def warning(statement_text: str, message: str) -> dict[str, Any]:
    """ksqlDB's ``WarningEntity``: ``{"@type": "warning_entity", "message"}`` (UNDEFINE of an
    unknown variable)."""
    return _entity("warning_entity", statement_text, {"message": message})


def variables(statement_text: str, values: Mapping[str, str]) -> dict[str, Any]:
    """``SHOW VARIABLES``: ``{"@type": "variables", "variables": [{"name", "value"}]}``."""
    return _entity("variables", statement_text, {"variables": [{"name": k, "value": v} for k, v in values.items()]})


def function_names(statement_text: str) -> dict[str, Any]:
    """``SHOW FUNCTIONS``: ``{"@type": "function_names", "functions": [{"name", "type", "category"}]}``."""
    items = [{"name": name, "type": "AGGREGATE" if fd.aggregate else "SCALAR", "category": fd.category}
             for name, fd in sorted(functions.catalog().items())]
    return _entity("function_names", statement_text, {"functions": items})


def describe_function(name: str, statement_text: str) -> dict[str, Any] | None:
    """``DESCRIBE FUNCTION name``, or None for an unknown function."""
    fd = functions.lookup(name)
    if fd is None:
        return None
    variant = {"arguments": [], "returnType": "", "description": fd.description, "argumentTypes": []}
    return _entity("describe_function", statement_text, {
        "name": fd.name, "description": fd.description, "author": "oncestream", "version": "", "path": "internal",
        "functions": [variant], "type": "AGGREGATE" if fd.aggregate else "SCALAR"})
