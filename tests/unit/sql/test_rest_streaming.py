"""ksqlDB's streaming endpoints on the real hypercorn server: /query (HTTP/1.1 chunked, ksqlDB's
framing), /query-stream (delimited, JSON, ksql v1 JSON; HTTP/1.1, h2c through httpx and through a
raw h2 prior-knowledge connection), /close-query, /inserts-stream, and the rule that a client
going away closes its query."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import threading
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import h2.config
import h2.connection
import h2.events
import httpx
import pytest

from oncestream.sql.engine.interface import ColumnHeader
from tests.unit.sql.test_rest_support import MemoryEngine, RunningServer, publish_when_running, running_server, wait_until

DELIMITED = "application/vnd.ksqlapi.delimited.v1"
KSQL_V1 = "application/vnd.ksql.v1+json"


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with running_server(max_body_bytes=4096, heartbeat_ms=50) as srv:
        yield srv


def latest_query(server: RunningServer) -> str:
    return list(server.engine.queries)[-1]


def test_query_writes_ksqldb_chunked_framing_until_limit(server: RunningServer) -> None:
    before = len(server.engine.queries)
    publisher = publish_when_running(server, [[1, "a"], [2, "b"]], before)
    with httpx.stream("POST", f"{server.url}/query", json={"ksql": "SELECT * FROM S EMIT CHANGES LIMIT 2;",
                                                           "streamsProperties": {}}, timeout=30) as r:
        assert r.status_code == 200
        assert r.http_version == "HTTP/1.1"
        assert r.headers["transfer-encoding"] == "chunked"
        body = b"".join(r.iter_bytes())
    publisher.join()
    query_id = latest_query(server)
    # Lone newlines are ksqlDB's idle probes; the rest is exactly QueryStreamWriter's output.
    assert body.replace(b",\n\n", b",\n").lstrip(b"\n") == (
        b'[{"header":{"queryId":"' + query_id.encode() + b'","schema":"`ID` INTEGER, `NAME` STRING"}},\n'
        b'{"row":{"columns":[1,"a"]}},\n{"row":{"columns":[2,"b"]}},\n{"finalMessage":"Limit Reached"}]\n')
    # Closed once the response is written (the client may read the end a moment before).
    assert wait_until(server.engine.queries[query_id].closed.is_set)


def test_query_writes_a_newline_while_idle(server: RunningServer) -> None:
    """While no row comes, /query writes lone newlines (ksqlDB probes closed connections so)."""
    before = len(server.engine.queries)
    with httpx.stream("POST", f"{server.url}/query", json={"ksql": "SELECT * FROM S EMIT CHANGES LIMIT 1;"},
                      timeout=30) as r:
        chunks = r.iter_raw()
        seen = b""
        while b",\n\n" not in seen:
            seen += next(chunks)
        assert len(server.engine.queries) == before + 1
        server.engine.publish("S", [9, "z"])
        rest = b"".join(chunks)
    assert rest.rstrip(b"\n").endswith(b'{"finalMessage":"Limit Reached"}]')


def test_query_honours_streams_properties_and_pull_queries_end_without_final_message(server: RunningServer) -> None:
    server.engine.publish("S", [100, "old"])
    r = httpx.post(f"{server.url}/query", json={"ksql": "SELECT * FROM S;"}, timeout=30)
    rows = json.loads(r.content)
    assert rows[0]["header"]["schema"] == "`ID` INTEGER, `NAME` STRING"
    assert {"row": {"columns": [100, "old"]}} in rows
    assert "finalMessage" not in rows[-1]
    before = len(server.engine.queries)
    with httpx.stream("POST", f"{server.url}/query",
                      json={"ksql": "SELECT * FROM S EMIT CHANGES LIMIT 1;",
                            "streamsProperties": {"ksql.streams.auto.offset.reset": "earliest"}}, timeout=30) as r:
        body = b"".join(r.iter_bytes())
    assert server.engine.query_properties[before] == {"ksql.streams.auto.offset.reset": "earliest"}
    assert json.loads(body)[1]["row"]["columns"] == server.engine.streams["S"].rows[0]


def test_query_statement_error_is_answered_before_streaming(server: RunningServer) -> None:
    r = httpx.post(f"{server.url}/query", json={"ksql": "SELECT * FROM NOPE EMIT CHANGES;"}, timeout=30)
    assert r.status_code == 400
    assert r.json()["@type"] == "statement_error"
    assert r.json()["error_code"] == 40001


def test_query_old_format_is_refused_over_http2_like_ksqldb(server: RunningServer) -> None:
    with httpx.Client(http1=False, http2=True) as c:
        r = c.post(f"{server.url}/query", json={"ksql": "SELECT * FROM S EMIT CHANGES;"})
    assert r.status_code == 405
    assert r.json()["message"] == "The /query endpoint is not available using HTTP2"


@pytest.mark.parametrize("protocol", ["http1", "h2c"])
def test_query_stream_delimited_is_the_default(server: RunningServer, protocol: str) -> None:
    h2 = protocol == "h2c"
    before = len(server.engine.queries)
    publisher = publish_when_running(server, [[1, "a"], [2, "b"]], before)
    with httpx.Client(http1=not h2, http2=h2, timeout=30) as c, \
            c.stream("POST", f"{server.url}/query-stream",
                     json={"sql": "SELECT * FROM S EMIT CHANGES LIMIT 2;", "properties": {}}) as r:
        assert r.http_version == ("HTTP/2" if h2 else "HTTP/1.1")
        assert r.headers["content-type"] == DELIMITED
        lines = list(r.iter_lines())
    publisher.join()
    assert json.loads(lines[0]) == {"queryId": latest_query(server), "columnNames": ["ID", "NAME"],
                                    "columnTypes": ["INTEGER", "STRING"]}
    assert [json.loads(line) for line in lines[1:]] == [[1, "a"], [2, "b"]]


@pytest.mark.parametrize(("accept", "expected"), [
    ("application/json", '[{"queryId":"%s","columnNames":["ID","NAME"],"columnTypes":["INTEGER","STRING"]},[3,"c"]]'),
    (KSQL_V1, '[{"header":{"queryId":"%s","schema":"`ID` INTEGER, `NAME` STRING"}},\n'
              '{"row":{"columns":[3,"c"]}},\n{"finalMessage":"Limit Reached"}]'),
])
@pytest.mark.parametrize("protocol", ["http1", "h2c"])
def test_query_stream_json_forms(server: RunningServer, accept: str, expected: str, protocol: str) -> None:
    before = len(server.engine.queries)
    publisher = publish_when_running(server, [[3, "c"]], before)
    h2 = protocol == "h2c"
    with httpx.Client(http1=not h2, http2=h2, timeout=30) as c:
        r = c.post(f"{server.url}/query-stream", json={"sql": "SELECT * FROM S EMIT CHANGES LIMIT 1;"},
                   headers={"Accept": accept})
    publisher.join()
    assert r.headers["content-type"] == accept
    assert r.text == expected % latest_query(server)


def h2_request(port: int, path: str, body: bytes, headers: list[tuple[str, str]] | None = None) -> tuple[int, bytes]:
    """One request over a raw HTTP/2 connection with prior knowledge (no upgrade, no TLS)."""
    conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(conn.data_to_send())
        stream_id = conn.get_next_available_stream_id()
        conn.send_headers(stream_id, [(":method", "POST"), (":path", path), (":scheme", "http"),
                                      (":authority", f"127.0.0.1:{port}"), *(headers or [])])
        conn.send_data(stream_id, body, end_stream=True)
        sock.sendall(conn.data_to_send())
        status = 0
        data = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            for event in conn.receive_data(chunk):
                if isinstance(event, h2.events.ResponseReceived):
                    status = int(dict(event.headers)[b":status"])
                elif isinstance(event, h2.events.DataReceived):
                    data += event.data
                    conn.acknowledge_received_data(event.flow_controlled_length, stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    return status, data
            sock.sendall(conn.data_to_send())


def test_query_stream_over_raw_h2_prior_knowledge(server: RunningServer) -> None:
    before = len(server.engine.queries)
    publisher = publish_when_running(server, [[4, "d"], [5, "e"]], before)
    status, data = h2_request(server.port, "/query-stream",
                              json.dumps({"sql": "SELECT * FROM S EMIT CHANGES LIMIT 2;"}).encode(),
                              [("accept", DELIMITED)])
    publisher.join()
    assert status == 200
    assert data.splitlines()[1:] == [b'[4,"d"]', b'[5,"e"]']


def test_close_query_ends_the_stream_and_unknown_id_is_400(server: RunningServer) -> None:
    before = len(server.engine.queries)
    with httpx.Client(http1=False, http2=True, timeout=30) as c:
        with c.stream("POST", f"{server.url}/query-stream", json={"sql": "SELECT * FROM S EMIT CHANGES;"}) as r:
            lines = r.iter_lines()
            header = json.loads(next(lines))
            assert len(server.engine.queries) == before + 1
            closed = c.post(f"{server.url}/close-query", json={"queryId": header["queryId"]})
            assert closed.status_code == 200
            assert list(lines) == []
        assert server.engine.queries[header["queryId"]].closed.is_set()
        again = c.post(f"{server.url}/close-query", json={"queryId": header["queryId"]})
    assert again.status_code == 400
    assert again.json() == {"@type": "generic_error", "error_code": 40000,
                            "message": f"No query with id {header['queryId']}"}
    assert httpx.post(f"{server.url}/close-query", json={}).json()["error_code"] == 40000


@pytest.mark.parametrize("protocol", ["http1", "h2c"])
def test_client_going_away_closes_its_query(server: RunningServer, protocol: str) -> None:
    h2 = protocol == "h2c"
    path, body = (("/query-stream", {"sql": "SELECT * FROM S EMIT CHANGES;"}) if h2
                  else ("/query", {"ksql": "SELECT * FROM S EMIT CHANGES;"}))
    with httpx.Client(http1=not h2, http2=h2, timeout=30) as c:
        with c.stream("POST", f"{server.url}{path}", json=body) as r:
            # Keep the iterator: a discarded httpx iterator closes the response (a disconnect).
            chunks = r.iter_raw()
            next(chunks)
            query = server.engine.queries[latest_query(server)]
            assert not query.closed.is_set()
        # Leaving the block without reading to the end resets the h2 stream / drops the connection.
    assert wait_until(query.closed.is_set)
    assert wait_until(lambda: server.app.active_streams == 0)
    # Through the engine, so that a node forgets the query too.
    assert query.query_id in server.engine.close_requests


def test_inserts_stream_acks_every_row_in_order(server: RunningServer) -> None:
    body = b'{"target":"S"}\n{"ID":10,"NAME":"x"}\n{"ID":11}\n{"ID":12,"NAME":"z"}'  # no final newline
    with httpx.Client(http1=False, http2=True, timeout=30) as c:
        r = c.post(f"{server.url}/inserts-stream", content=body)
    assert r.status_code == 200
    assert r.headers["content-type"] == DELIMITED
    assert [json.loads(line) for line in r.text.splitlines()] == [
        {"status": "ok", "seq": 0}, {"status": "ok", "seq": 1}, {"status": "ok", "seq": 2}]
    assert server.engine.streams["S"].rows[-3:] == [[10, "x"], [11, None], [12, "z"]]


def test_inserts_stream_json_array_over_http1(server: RunningServer) -> None:
    r = httpx.post(f"{server.url}/inserts-stream", content=b'{"target":"S"}\n{"ID":13}\n',
                   headers={"Accept": "application/json"}, timeout=30)
    assert r.json() == [{"status": "ok", "seq": 0}]


def test_inserts_stream_first_bad_row_gets_an_error_and_ends_the_response(server: RunningServer) -> None:
    rows_before = len(server.engine.streams["S"].rows)
    r = httpx.post(f"{server.url}/inserts-stream",
                   content=b'{"target":"S"}\n{"ID":20}\n{"BOGUS":1}\n{"ID":21}\n', timeout=30)
    acks = [json.loads(line) for line in r.text.splitlines()]
    assert acks == [{"status": "ok", "seq": 0},
                    {"@type": "generic_error", "error_code": 40001, "message": "Column name BOGUS does not exist.",
                     "status": "error", "seq": 1}]
    assert len(server.engine.streams["S"].rows) == rows_before + 1
    bad_json = httpx.post(f"{server.url}/inserts-stream", content=b'{"target":"S"}\n{oops\n', timeout=30)
    assert json.loads(bad_json.text.splitlines()[0]) == {
        "@type": "generic_error", "error_code": 40000, "message": "Invalid JSON in inserts stream", "status": "error",
        "seq": 0}


def test_inserts_stream_bad_arguments_and_overlong_lines(server: RunningServer) -> None:
    r = httpx.post(f"{server.url}/inserts-stream", content=b'{"nothing":1}\n', timeout=30)
    assert (r.status_code, r.json()["error_code"]) == (400, 40000)
    r = httpx.post(f"{server.url}/inserts-stream", content=b"", timeout=30)
    assert (r.status_code, r.json()["error_code"]) == (400, 40000)
    long_line = b'{"target":"S"}\n{"ID":1,"NAME":"' + b"n" * 5000 + b'"}\n'
    r = httpx.post(f"{server.url}/inserts-stream", content=long_line, timeout=30)
    assert json.loads(r.text.splitlines()[0])["error_code"] == 41300


def test_shutdown_ends_open_push_queries() -> None:
    """Stopping the server ends streaming responses (and closes their queries) instead of waiting
    on them: the server stops although a client still reads a push query without LIMIT."""
    lines: list[str] = []
    ended = threading.Event()
    with contextlib.ExitStack() as stack:
        srv = stack.enter_context(running_server())

        def read() -> None:
            with httpx.stream("POST", f"{srv.url}/query-stream", json={"sql": "SELECT * FROM S EMIT CHANGES;"},
                              timeout=60) as r:
                lines.extend(r.iter_lines())
            ended.set()

        reader = threading.Thread(target=read)
        reader.start()
        assert wait_until(lambda: srv.app.active_streams == 1)
        query = srv.engine.queries[latest_query(srv)]
    # running_server's exit set the shutdown event and joined the server thread.
    reader.join(30)
    assert ended.is_set()
    assert json.loads(lines[0])["queryId"] == query.query_id
    assert query.closed.is_set()


def test_inserts_stream_error_before_the_body_ends_is_still_delivered_over_h2c(server: RunningServer) -> None:
    """The error line reaches the client although it is still sending rows after the bad one (the
    server reads the rest of the body before ending the response; hypercorn would otherwise drop
    the HTTP/2 connection on the late DATA frames)."""
    rows = b"".join(b'{"ID":%d}\n' % i for i in range(5000))
    body = b'{"target":"S"}\n{"BOGUS":1}\n' + rows
    with httpx.Client(http1=False, http2=True, timeout=30) as c:
        r = c.post(f"{server.url}/inserts-stream", content=body)
        assert [json.loads(line)["status"] for line in r.text.splitlines()] == ["error"]
        # The connection is still usable.
        assert c.get(f"{server.url}/info").status_code == 200


class FloodQuery:
    """A push query producing rows as fast as it can, until closed."""

    def __init__(self) -> None:
        self.query_id = "flood"
        self.columns = [ColumnHeader("X", "INTEGER")]
        self.is_pull = False
        self.limit_reached = False
        self.closed = threading.Event()

    async def rows(self) -> AsyncIterator[list[Any]]:
        i = 0
        while not self.closed.is_set():
            i += 1
            yield [i]
            if i % 64 == 0:
                await asyncio.sleep(0)

    async def close(self) -> None:
        self.closed.set()


@pytest.mark.parametrize("protocol", ["http1", "h2c"])
def test_client_leaving_a_fast_stream_closes_it_without_errors(protocol: str, caplog: pytest.LogCaptureFixture) -> None:
    queries: list[FloodQuery] = []

    class Flooding(MemoryEngine):
        async def start_query(self, sql: str, properties: Mapping[str, Any], *,  # type: ignore[override]
                              query_stream: bool = False) -> FloodQuery:
            queries.append(FloodQuery())
            return queries[-1]

    h2 = protocol == "h2c"
    with caplog.at_level(logging.WARNING, logger="oncestream.sql.server.rest"), running_server(Flooding()) as srv:
        for _ in range(3):
            with httpx.Client(http1=not h2, http2=h2, timeout=30) as c, \
                    c.stream("POST", f"{srv.url}/query-stream", json={"sql": "SELECT * FROM S EMIT CHANGES;"}) as r:
                chunks = r.iter_raw()
                next(chunks)
                next(chunks)
        assert wait_until(lambda: srv.app.active_streams == 0)
    assert len(queries) == 3
    assert all(q.closed.is_set() for q in queries)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.parametrize("endpoint", ["/query-stream", "/query"])
def test_query_endpoints_substitute_the_requests_session_variables(server: RunningServer, endpoint: str) -> None:
    field = "sql" if endpoint == "/query-stream" else "ksql"
    before = len(server.engine.queries)
    publisher = publish_when_running(server, [[5, "e"]], before)
    with httpx.Client(timeout=30) as c, \
            c.stream("POST", f"{server.url}{endpoint}", json={field: "SELECT * FROM ${src} EMIT CHANGES LIMIT ${n};",
                                                              "sessionVariables": {"SRC": "S", "n": 1}}) as r:
        assert r.status_code == 200
        body = r.read().decode()
    publisher.join()
    assert '"e"' in body
    with httpx.Client(timeout=30) as c:
        undefined = c.post(f"{server.url}{endpoint}", json={field: "SELECT * FROM ${src} EMIT CHANGES;"})
        disabled = c.post(f"{server.url}{endpoint}", json={
            field: "SELECT * FROM ${src} EMIT CHANGES;", "sessionVariables": {"src": "S"},
            "properties" if endpoint == "/query-stream" else "streamsProperties":
                {"ksql.variable.substitution.enable": False}})
    assert undefined.status_code == 400
    assert undefined.json()["message"].startswith("Illegal argument at Line: 1, Col: 15.")
    assert disabled.status_code == 400   # sent as written: the engine does not know `${SRC}`
