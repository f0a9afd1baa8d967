"""A small synchronous client of ksqlDB's REST API (ours or ksqlDB's), used by the shell.

Statements go to ``POST /ksql``; queries to ``POST /query-stream`` asking for
``application/vnd.ksql.v1+json``, the framing that carries ksqlDB's final message ("Limit
Reached"), so the shell can say why a query ended. A query is stopped by closing its response
(the server closes the query when the client goes away) and by ``POST /close-query``.

A secured server (docs/sql-security.md) is reached as ksqlDB's CLI reaches one: an ``https://``
URL verified against ``ca_file`` (default: the system's CAs), a client certificate when the
listener asks for one, and HTTP Basic ``user`` / ``password`` sent with every request.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

KSQL_V1_JSON = "application/vnd.ksql.v1+json"
JSON = "application/json"

DEFAULT_TIMEOUT_S = 60.0
CLOSE_QUERY_TIMEOUT_S = 10.0  # a best-effort close (RestClient.close_query)


class ServerError(Exception):
    """An error entity answered by the server (or an unreadable answer)."""

    def __init__(self, message: str, *, status: int, error_code: int | None = None,
                 entity: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.error_code = error_code
        self.entity = entity or {}


@dataclass
class QueryColumn:
    name: str
    type: str


@dataclass
class QueryResult:
    """A running query: ``columns`` from the header, ``rows()`` until the end; ``final_message``
    is ksqlDB's ("Limit Reached", "Query Completed") once the rows are exhausted, ``error`` an
    in-stream error entity."""

    query_id: str
    columns: list[QueryColumn]
    _lines: Iterator[dict[str, Any]]
    _response: httpx.Response
    _client: RestClient
    final_message: str | None = None
    error: dict[str, Any] | None = None
    _closed: bool = field(default=False)

    def rows(self) -> Iterator[list[Any]]:
        for item in self._lines:
            if "row" in item:
                yield list(item["row"].get("columns") or [])
            elif "finalMessage" in item:
                self.final_message = str(item["finalMessage"])
            elif "errorMessage" in item:
                self.error = item["errorMessage"]

    def close(self) -> None:
        """Stop the query: drop the response (the server closes a query whose client went away)
        and ask the server to close it, in case the connection is shared (HTTP/2)."""
        if self._closed:
            return
        self._closed = True
        self._response.close()
        # Best effort: the query may be gone already (it ended, or the dropped connection closed it).
        with contextlib.suppress(httpx.HTTPError, ServerError):
            self._client.close_query(self.query_id)


def _array_items(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """The values of a JSON array written one per line (``[v,`` / ``v,`` / ``v]``), as ksqlDB's
    JsonStreamedRowResponseWriter and /query write them; blank keep-alive lines are skipped."""
    for raw in lines:
        line = raw.strip()
        if line.startswith("["):
            line = line[1:]
        if line.endswith(",") or line.endswith("]"):
            line = line[:-1]
        if line:
            yield json.loads(line)


@dataclass(frozen=True)
class Credentials:
    """How to authenticate to a secured server (all optional)."""

    user: str | None = None
    password: str | None = None
    ca_file: str | None = None  # PEM CA(s) the server's certificate must chain to
    client_cert: str | None = None  # PEM client certificate (and key, unless client_key)
    client_key: str | None = None


class RestClient:
    """Talks HTTP/1.1 to one server (``url`` like ``http://localhost:8088`` or ``https://...``)."""

    def __init__(self, url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                 credentials: Credentials | None = None) -> None:
        self.url = url.rstrip("/")
        creds = credentials or Credentials()
        auth = httpx.BasicAuth(creds.user, creds.password or "") if creds.user is not None else None
        cert = (creds.client_cert, creds.client_key) if creds.client_cert and creds.client_key else creds.client_cert
        # Push queries wait for rows without bound; only connecting is time-limited.
        self._http = httpx.Client(base_url=self.url, timeout=httpx.Timeout(timeout_s, read=None),
                                  headers={"Accept": KSQL_V1_JSON}, auth=auth,
                                  verify=creds.ca_file or True, cert=cert)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RestClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def info(self) -> dict[str, Any]:
        return dict(self._json(self._http.get("/info"))["KsqlServerInfo"])

    def ksql(self, statements: str, properties: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Run statements; the entities, or ServerError."""
        response = self._http.post("/ksql", json={"ksql": statements, "streamsProperties": dict(properties or {})},
                                   headers={"Content-Type": KSQL_V1_JSON})
        return list(self._json(response))

    def query(self, sql: str, properties: Mapping[str, Any] | None = None) -> QueryResult:
        """Start a query; read ``rows()`` and ``close()`` it (or let it end)."""
        request = self._http.build_request("POST", "/query-stream",
                                           json={"sql": sql, "properties": dict(properties or {})})
        response = self._http.send(request, stream=True)
        if response.status_code != 200:
            response.read()
            response.close()
            self._json(response)
        items = _array_items(response.iter_lines())
        try:
            header = next(items)["header"]
        except (StopIteration, KeyError, json.JSONDecodeError) as exc:
            response.close()
            raise ServerError(f"Unreadable query header: {exc}", status=response.status_code) from None
        columns = [QueryColumn(*_split_column(c)) for c in _split_schema(header.get("schema") or "")]
        return QueryResult(str(header.get("queryId")), columns, items, response, self)

    def print_topic(self, statement: str, properties: Mapping[str, Any] | None = None) -> Generator[str, None, None]:
        """Run a PRINT on ``/query`` (as ksqlDB's CLI does) and yield its text lines as they come,
        without the empty keep-alive lines; closing the iterator closes the request."""
        request = self._http.build_request("POST", "/query", headers={"Accept": JSON},
                                           json={"ksql": statement, "streamsProperties": dict(properties or {})})
        response = self._http.send(request, stream=True)
        try:
            if response.status_code != 200:
                response.read()
                self._json(response)
            for line in response.iter_lines():
                if line:
                    yield line
        finally:
            response.close()

    def close_query(self, query_id: str) -> bool:
        """Ask the server to close a push query (``POST /close-query``). Bounded by
        ``CLOSE_QUERY_TIMEOUT_S`` in every phase: it is best effort after the client dropped the
        query's stream (the server closes a query whose client went away), so Ctrl-C in the
        shell never waits on it for longer."""
        response = self._http.post("/close-query", json={"queryId": query_id},
                                   timeout=httpx.Timeout(CLOSE_QUERY_TIMEOUT_S))
        return response.status_code == 200

    @staticmethod
    def _json(response: httpx.Response) -> Any:
        try:
            body = response.json()
        except ValueError:
            raise ServerError(f"HTTP {response.status_code}: {response.text[:200]}", status=response.status_code) from None
        if response.status_code != 200:
            if isinstance(body, dict) and "message" in body:
                raise ServerError(str(body["message"]), status=response.status_code,
                                  error_code=body.get("error_code"), entity=body)
            raise ServerError(f"HTTP {response.status_code}: {response.text[:200]}", status=response.status_code)
        return body


def _split_schema(schema: str) -> list[str]:
    """```A` INTEGER, `B` STRUCT<`X` INT, `Y` STRING>`` -> one item per column (commas inside
    ``<>``, ``()`` or backticks do not split)."""
    parts: list[str] = []
    depth = 0
    quoted = False
    start = 0
    for i, ch in enumerate(schema):
        if ch == "`":
            quoted = not quoted
        elif not quoted and ch in "<(":
            depth += 1
        elif not quoted and ch in ">)":
            depth -= 1
        elif not quoted and depth == 0 and ch == ",":
            parts.append(schema[start:i].strip())
            start = i + 1
    if schema[start:].strip():
        parts.append(schema[start:].strip())
    return parts


def _split_column(column: str) -> tuple[str, str]:
    if column.startswith("`"):
        end = column.index("`", 1)
        return column[1:end], column[end + 1:].strip()
    name, _, type_ = column.partition(" ")
    return name, type_.strip()
