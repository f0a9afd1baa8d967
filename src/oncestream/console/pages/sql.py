"""SQL: an editor against the SQL server (``--sql-server URL``, ksqlDB's REST API), the
streams, tables and persistent queries with their state, EXPLAIN of a query.

Statements (CREATE, INSERT, SHOW, EXPLAIN, ...) are a form POST to ``/sql``, answered with the
server's entities. A SELECT goes through ``POST /api/sql/query``: the console starts it on the
server's ``/query-stream`` and passes each row on to the browser as one JSON line as soon as it
arrives (static/sql.js reads the chunked response with ``fetch``); a push query streams until the
browser stops reading, which cancels the request here and closes the query on the server. The
browser never talks to the SQL server, and the server's credentials stay in this process.
Every statement and query is audited with the user.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from oncestream.console.audit import FAILED, OK
from oncestream.console.sql_access import SqlServer, is_query, read_catalog, run_statements, stream_query
from oncestream.console.web import audit, render, state
from oncestream.sql.server.rest.client import ServerError

# A statement longer than this is refused (the editor is for people, not bulk loads).
MAX_SQL_CHARS = 100_000
NO_SERVER = "No SQL server: start the console with --sql-server URL"


def _server(request: Request) -> SqlServer | None:
    url = state(request).settings.sql_server_url
    return SqlServer(url) if url else None


def _failure(exc: Exception) -> str:
    if isinstance(exc, ServerError):
        return exc.message
    if isinstance(exc, httpx.HTTPError):
        return f"the SQL server cannot be reached: {exc}"
    return str(exc) or type(exc).__name__


async def _page(request: Request, sql: str = "", entities: list[dict[str, Any]] | None = None,
                error: str | None = None, status: int = 200) -> Response:
    server = _server(request)
    catalog, catalog_error = None, None
    if server is None:
        catalog_error = NO_SERVER
    else:
        try:
            catalog = await read_catalog(server)
        except (ServerError, httpx.HTTPError) as exc:
            catalog_error = f"Cannot list streams, tables and queries: {_failure(exc)}"
    return render(request, "sql.html", {"sql": sql, "entities": entities, "catalog": catalog,
                                        "catalog_error": catalog_error, "error": error,
                                        "pretty": lambda v: json.dumps(v, indent=2, sort_keys=True, default=str)},
                  status=status)


async def sql_page(request: Request) -> Response:
    return await _page(request)


async def sql_submit(request: Request) -> Response:
    """Run the editor's statements (a SELECT submitted without the script: refused, the
    streaming path needs sql.js)."""
    form = await request.form()
    sql = str(form.get("sql") or "")
    explain = form.get("explain")
    if isinstance(explain, str) and explain:
        sql = f"EXPLAIN {explain};"
    server = _server(request)
    if server is None:
        return await _page(request, sql, error=NO_SERVER, status=503)
    if not sql.strip():
        return await _page(request, sql, error="Type a statement first", status=400)
    if len(sql) > MAX_SQL_CHARS:
        return await _page(request, sql, error=f"Statement longer than {MAX_SQL_CHARS} characters", status=413)
    if is_query(sql):
        return await _page(request, sql, error="A SELECT streams its rows: run it with the Run button (needs JavaScript)",
                           status=400)
    try:
        entities = await run_statements(server, sql)
    except (ServerError, httpx.HTTPError) as exc:
        audit(request, "sql.statement", _target(sql), FAILED, sql=sql, error=_failure(exc))
        return await _page(request, sql, error=_failure(exc), status=400)
    audit(request, "sql.statement", _target(sql), OK, sql=sql)
    return await _page(request, sql, entities=entities)


def _target(sql: str) -> str:
    """The audit entry's target: the statement's first line, shortened."""
    first = sql.strip().splitlines()[0] if sql.strip() else ""
    return first[:120]


async def query_api(request: Request) -> Response:
    """Start a SELECT on the SQL server and stream its events as JSON lines
    (``application/x-ndjson``): header, rows, then final or error."""
    form = await request.form()
    sql = str(form.get("sql") or "")
    server = _server(request)
    if server is None:
        return JSONResponse({"error": NO_SERVER}, status_code=503)
    if not is_query(sql) or len(sql) > MAX_SQL_CHARS:
        return JSONResponse({"error": "Only a SELECT (at most 100000 characters) streams rows"}, status_code=400)
    offset_reset = str(form.get("offset_reset") or "latest")
    if offset_reset not in ("earliest", "latest"):
        return JSONResponse({"error": "offset_reset is earliest or latest"}, status_code=400)
    audit(request, "sql.query", _target(sql), OK, sql=sql, offset_reset=offset_reset)

    async def lines() -> AsyncIterator[bytes]:
        try:
            async for event in stream_query(server, sql, {"auto.offset.reset": offset_reset}):
                yield json.dumps(event, default=str).encode() + b"\n"
        except (ServerError, httpx.HTTPError, ValueError) as exc:
            yield json.dumps({"error": _failure(exc)}).encode() + b"\n"

    return StreamingResponse(lines(), media_type="application/x-ndjson",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


routes: list[BaseRoute] = [
    Route("/sql", sql_page, methods=["GET"], name="sql"),
    Route("/sql", sql_submit, methods=["POST"], name="sql_run"),
    Route("/api/sql/query", query_api, methods=["POST"], name="sql_query"),
]
