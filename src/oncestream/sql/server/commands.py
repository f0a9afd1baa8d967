"""The command-topic record: one statement that changes the metastore, as ksqlDB writes it.

Key: ksqlDB's command id (``CommandId.toString()``), ``<type>/<entity>/<action>``:

- ``stream/`NAME`/create`` for CREATE STREAM, CREATE STREAM AS SELECT and INSERT INTO (the target);
- ``table/`NAME`/create`` for CREATE TABLE and CREATE TABLE AS SELECT;
- ``stream/NAME/drop``, ``table/NAME/drop`` (ksqlDB uses the bare name here);
- ``terminate/CSAS_X_3/execute``, ``terminate/ALL/execute``; ``pause/.../execute`` and
  ``resume/.../execute`` the same way (PAUSE / RESUME query id or ALL);
- ``type/NAME/create``, ``type/NAME/drop`` (CREATE / DROP TYPE), ``stream/NAME/alter``,
  ``table/NAME/alter`` (ALTER STREAM|TABLE ... ADD COLUMN).

Value: UTF-8 JSON ``{"statement": text, "streamsProperties": {...}, "originalProperties": {...},
"plan": {...}, "version": 1}``. ``plan`` holds what validation resolved against the outside world
and every node must apply identically (the topic's partition count for a CREATE over an existing
topic), the way ksqlDB's own ``plan`` field carries the validated execution plan. A record whose
version is newer than ``COMMAND_VERSION``, or that is not such a JSON object, raises
``IncompatibleCommandError``: the node then goes degraded instead of skipping it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from oncestream.sql.language import sql_ast

COMMAND_VERSION = 1
# The command id types this version reads (ksqlDB's CommandId.Type, lower-cased).
_COMMAND_TYPES = frozenset({"stream", "table", "terminate", "pause", "resume", "type"})


class IncompatibleCommandError(Exception):
    """A command-topic record this node cannot apply (unreadable, or written by a newer version)."""


@dataclass(frozen=True)
class Command:
    """A validated statement, ready for the command topic (``encode``) and for
    ``Metastore.apply``. ``statement_ast`` is the parsed statement when the command was built
    in this process (saves a re-parse); decoded commands have None and are parsed on apply."""

    command_id: str
    statement: str
    streams_properties: dict[str, Any] = field(default_factory=dict)
    original_properties: dict[str, Any] = field(default_factory=dict)
    plan: dict[str, Any] = field(default_factory=dict)
    version: int = COMMAND_VERSION
    statement_ast: sql_ast.Statement | None = field(default=None, compare=False, repr=False)

    @property
    def kind(self) -> str:
        """The command id's type: ``stream``, ``table``, ``terminate``, ``pause``, ``resume`` or ``type``."""
        return self.command_id.split("/", 1)[0]

    @property
    def action(self) -> str:
        return self.command_id.rsplit("/", 1)[-1]


def command_id(stmt: sql_ast.Statement) -> str:
    """ksqlDB's command id for a statement that goes to the command topic."""
    if isinstance(stmt, (sql_ast.CreateSource, sql_ast.CreateAsSelect)):
        kind = "stream" if stmt.kind is sql_ast.SourceKind.STREAM else "table"
        return f"{kind}/`{stmt.name}`/create"
    if isinstance(stmt, sql_ast.InsertInto):
        return f"stream/`{stmt.target}`/create"
    if isinstance(stmt, sql_ast.DropSource):
        kind = "stream" if stmt.kind is sql_ast.SourceKind.STREAM else "table"
        return f"{kind}/{stmt.name}/drop"
    if isinstance(stmt, sql_ast.Terminate):
        return f"terminate/{stmt.query_id or 'ALL'}/execute"
    if isinstance(stmt, sql_ast.PauseQuery):
        return f"pause/{stmt.query_id or 'ALL'}/execute"
    if isinstance(stmt, sql_ast.ResumeQuery):
        return f"resume/{stmt.query_id or 'ALL'}/execute"
    if isinstance(stmt, sql_ast.CreateType):
        return f"type/{stmt.name}/create"
    if isinstance(stmt, sql_ast.DropType):
        return f"type/{stmt.name}/drop"
    if isinstance(stmt, sql_ast.AlterSource):
        kind = "stream" if stmt.kind is sql_ast.SourceKind.STREAM else "table"
        return f"{kind}/{stmt.name}/alter"
    raise ValueError(f"{type(stmt).__name__} does not go to the command topic")


def goes_to_command_topic(stmt: sql_ast.Statement) -> bool:
    """True for statements that change the shared metastore (CREATE, DROP, INSERT INTO ... SELECT,
    TERMINATE, PAUSE, RESUME, CREATE / DROP TYPE, ALTER); SET/UNSET/SHOW/DESCRIBE/EXPLAIN, SELECT and INSERT ...
    VALUES are answered locally."""
    return isinstance(stmt, (sql_ast.CreateSource, sql_ast.CreateAsSelect, sql_ast.InsertInto, sql_ast.DropSource,
                             sql_ast.Terminate, sql_ast.PauseQuery, sql_ast.ResumeQuery, sql_ast.CreateType,
                             sql_ast.DropType, sql_ast.AlterSource))


def encode(cmd: Command) -> tuple[bytes, bytes]:
    """The record's key and value bytes."""
    value: dict[str, Any] = {
        "statement": cmd.statement,
        "streamsProperties": cmd.streams_properties,
        "originalProperties": cmd.original_properties,
        "plan": cmd.plan,
        "version": cmd.version,
    }
    return cmd.command_id.encode("utf-8"), json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8")


def decode(key: bytes | None, value: bytes | None) -> Command:
    """A record read back from the command topic; raises ``IncompatibleCommandError``."""
    if key is None or value is None:
        raise IncompatibleCommandError("command-topic record with a null key or value")
    try:
        command_id_text = key.decode("utf-8")
        body = json.loads(value.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise IncompatibleCommandError(f"unreadable command-topic record: {e}") from e
    if not isinstance(body, dict):
        raise IncompatibleCommandError("command-topic record value is not a JSON object")
    version = body.get("version", COMMAND_VERSION)
    if not isinstance(version, int) or isinstance(version, bool):
        raise IncompatibleCommandError(f"command-topic record has an invalid version: {version!r}")
    if version > COMMAND_VERSION:
        raise IncompatibleCommandError(
            f"command-topic record version {version} is newer than this server's ({COMMAND_VERSION}); upgrade the server")
    statement = body.get("statement")
    if not isinstance(statement, str):
        raise IncompatibleCommandError("command-topic record has no statement")
    parts = command_id_text.split("/")
    if len(parts) != 3 or parts[0] not in _COMMAND_TYPES \
            or parts[2] not in ("create", "drop", "execute", "alter"):
        raise IncompatibleCommandError(f"unknown command id: {command_id_text!r}")
    props, original, plan = (body.get(k) or {} for k in ("streamsProperties", "originalProperties", "plan"))
    if not all(isinstance(x, dict) for x in (props, original, plan)):
        raise IncompatibleCommandError("command-topic record has malformed properties")
    return Command(command_id=command_id_text, statement=statement, streams_properties=dict(props),
                   original_properties=dict(original), plan=dict(plan), version=version)
