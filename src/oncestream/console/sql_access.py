"""The console's side of the SQL server's REST API (ksqlDB's): statements, queries streamed
row by row, and the catalog (streams, tables, queries with their state).

Asynchronous (httpx), unlike the shell's blocking :class:`~oncestream.sql.server.rest.client.RestClient`:
the SQL page proxies a push query's rows to the browser, and when the browser goes away the
page's task is cancelled, which closes the response here, which makes the SQL server close the
query (it closes a query whose client went away). The browser never talks to the SQL server.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from oncestream.sql.server.rest.client import KSQL_V1_JSON, Credentials, ServerError, _split_column, _split_schema

STATEMENT_TIMEOUT_S = 60.0
CONNECT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class SqlServer:
    """Where the SQL server is and how the console authenticates to it (never shown to users)."""

    url: str
    credentials: Credentials = field(default_factory=Credentials)

    def client(self, *, read_timeout_s: float | None = STATEMENT_TIMEOUT_S) -> httpx.AsyncClient:
        creds = self.credentials
        auth = httpx.BasicAuth(creds.user, creds.password or "") if creds.user is not None else None
        cert = (creds.client_cert, creds.client_key) if creds.client_cert and creds.client_key else creds.client_cert
        return httpx.AsyncClient(base_url=self.url.rstrip("/"), auth=auth, verify=creds.ca_file or True, cert=cert,
                                 headers={"Accept": KSQL_V1_JSON},
                                 timeout=httpx.Timeout(STATEMENT_TIMEOUT_S, connect=CONNECT_TIMEOUT_S,
                                                       read=read_timeout_s))


def is_query(sql: str) -> bool:
    """A SELECT goes to /query-stream (pull or push); everything else to /ksql."""
    head = sql.lstrip().split(None, 1)
    return bool(head) and head[0].upper() == "SELECT"


def _error_of(response: httpx.Response, body: bytes) -> ServerError:
    try:
        entity = json.loads(body)
    except ValueError:
        return ServerError(f"HTTP {response.status_code}: {body[:200]!r}", status=response.status_code)
    if isinstance(entity, dict) and "message" in entity:
        return ServerError(str(entity["message"]), status=response.status_code,
                           error_code=entity.get("error_code"), entity=entity)
    return ServerError(f"HTTP {response.status_code}: {body[:200]!r}", status=response.status_code)


async def run_statements(server: SqlServer, sql: str, properties: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """POST /ksql: the entities the statements produced, or :class:`ServerError`."""
    async with server.client() as http:
        response = await http.post("/ksql", json={"ksql": sql, "streamsProperties": dict(properties or {})},
                                   headers={"Content-Type": KSQL_V1_JSON})
        if response.status_code != 200:
            raise _error_of(response, response.content)
        return list(response.json())


@dataclass(frozen=True)
class Catalog:
    """SHOW STREAMS / TABLES / QUERIES, as entities."""

    streams: list[dict[str, Any]]
    tables: list[dict[str, Any]]
    queries: list[dict[str, Any]]


async def read_catalog(server: SqlServer) -> Catalog:
    entities = await run_statements(server, "SHOW STREAMS; SHOW TABLES; SHOW QUERIES;")
    found: dict[str, list[dict[str, Any]]] = {"streams": [], "tables": [], "queries": []}
    for entity in entities:
        for name in found:
            found[name] += list(entity.get(name) or [])
    return Catalog(found["streams"], found["tables"], found["queries"])


async def stream_query(server: SqlServer, sql: str,
                       properties: Mapping[str, Any] | None = None) -> AsyncIterator[dict[str, Any]]:
    """POST /query-stream in ksqlDB's ``vnd.ksql.v1+json`` framing, as events for the page:
    ``{"header": {"queryId", "columns": [[name, type], ...]}}``, then ``{"row": [...]}`` per
    row, and at the end ``{"final": message}`` or ``{"error": message}``. A push query runs
    until the caller stops iterating (closing the response ends the query on the server)."""
    async with server.client(read_timeout_s=None) as http, http.stream(
            "POST", "/query-stream", json={"sql": sql, "properties": dict(properties or {})}) as response:
        if response.status_code != 200:
            error = _error_of(response, await response.aread())
            yield {"error": error.message}
            return
        async for line in response.aiter_lines():
            text = line.strip()
            if text.startswith("["):
                text = text[1:]
            if text.endswith(",") or text.endswith("]"):
                text = text[:-1]
            if not text:
                continue   # the server's keep-alive newline
            item = json.loads(text)
            if "header" in item:
                header = item["header"]
                columns = [list(_split_column(c)) for c in _split_schema(header.get("schema") or "")]
                yield {"header": {"queryId": header.get("queryId"), "columns": columns}}
            elif "row" in item:
                yield {"row": list(item["row"].get("columns") or [])}
            elif "finalMessage" in item:
                yield {"final": str(item["finalMessage"])}
            elif "errorMessage" in item:
                message = item["errorMessage"]
                yield {"error": str(message.get("message") if isinstance(message, dict) else message)}
