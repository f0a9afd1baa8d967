"""The SQL server's errors, each carrying ksqlDB's error code and HTTP status.

ksqlDB answers errors as a JSON entity (``KsqlErrorMessage`` / ``KsqlStatementErrorMessage``):
``{"@type": "statement_error", "error_code": 40001, "message": ..., "statementText": ...,
"entities": []}`` or ``{"@type": "generic_error", "error_code": 50000, "message": ...}``.
The REST layer turns these exceptions into exactly that; nothing else invents codes.
"""

from __future__ import annotations

from typing import Any

# ksqlDB's error codes (io.confluent.ksql.rest.Errors): HTTP status * 100 + a detail digit.
BAD_REQUEST = 40000
BAD_STATEMENT = 40001
QUERY_ENDPOINT = 40002          # a query sent to /ksql (or a statement to /query)
UNAUTHORIZED = 40100
FORBIDDEN = 40300
NOT_FOUND = 40400
NOT_ACCEPTABLE = 40600
REQUEST_TOO_LARGE = 41300
SERVER_ERROR = 50000
COMMAND_QUEUE_CATCHUP_TIMEOUT = 50301
SERVER_SHUTTING_DOWN = 50302
SERVER_NOT_READY = 50303


class KsqlError(Exception):
    """An error answered to a client as ksqlDB answers it."""

    error_code: int = SERVER_ERROR

    def __init__(self, message: str, *, error_code: int | None = None, statement_text: str | None = None,
                 entities: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        if error_code is not None:
            self.error_code = error_code
        self.statement_text = statement_text
        self.entities = entities or []

    @property
    def http_status(self) -> int:
        return self.error_code // 100

    def to_entity(self) -> dict[str, Any]:
        """The JSON body ksqlDB writes for this error."""
        if self.statement_text is not None:
            return {"@type": "statement_error", "error_code": self.error_code, "message": self.message,
                    "statementText": self.statement_text, "entities": self.entities}
        return {"@type": "generic_error", "error_code": self.error_code, "message": self.message}


class StatementError(KsqlError):
    """A statement that cannot run: parse error, unknown source, duplicate name, type error,
    unsupported feature. Nothing is written to the command topic. HTTP 400, code 40001."""

    error_code = BAD_STATEMENT


class ExpressionTypeError(StatementError):
    """An expression whose operand types do not fit its operator (``Cannot compare ...``,
    ``Unsupported arithmetic types ...``): what ksqlDB's ExpressionTypeManager refuses, so a WHERE
    or HAVING clause names itself in front of it (``Error in WHERE expression: ...``)."""


class ParseError(StatementError):
    """A syntax error; ``line``/``column`` are 1-based and also written into the message as ksqlDB
    does (``line 1:8: Syntax Error``...; ``node_location``: ``Line: 1, Col: 8: ...``, as ksqlDB
    words the place of a check made on a built AST node)."""

    def __init__(self, message: str, *, line: int, column: int, statement_text: str, node_location: bool = False) -> None:
        where = f"Line: {line}, Col: {column}: " if node_location else f"line {line}:{column}: "
        super().__init__(where + message, statement_text=statement_text)
        self.line = line
        self.column = column


class BadRequestError(KsqlError):
    """A malformed request (bad JSON, missing field, body too large...). HTTP 400, code 40000."""

    error_code = BAD_REQUEST


class NotFoundError(KsqlError):
    """An unknown query id, command id... HTTP 404."""

    error_code = NOT_FOUND


class DegradedError(KsqlError):
    """The node found an unreadable or incompatible command-topic record: it keeps serving reads
    and running queries but refuses new statements, saying why."""

    error_code = SERVER_ERROR


class NotReadyError(KsqlError):
    """The node is still replaying its command topic (or shutting down)."""

    error_code = SERVER_NOT_READY
