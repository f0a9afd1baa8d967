"""ksqlDB's non-streaming REST endpoints on the real hypercorn server (HTTP/1.1 and h2c), with an
in-memory engine behind them: /ksql entities and errors, body limits, malformed JSON, content
negotiation, /info, /healthcheck, /clusterStatus, /status, unknown routes."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import pytest

from oncestream.sql.errors import SERVER_SHUTTING_DOWN, NotReadyError
from oncestream.sql.server.rest.app import create_app
from oncestream.sql.server.rest.serve import serve
from tests.unit.sql.test_rest_support import MemoryEngine, RunningServer, running_server

KSQL_V1 = "application/vnd.ksql.v1+json"


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with running_server(max_body_bytes=4096) as srv:
        yield srv


@pytest.fixture(params=["http1", "h2c"])
def client(request: pytest.FixtureRequest, server: RunningServer) -> Iterator[httpx.Client]:
    h2 = request.param == "h2c"
    # The header (ignored by the server) lets tests check which protocol was used.
    expected = "HTTP/2" if h2 else "HTTP/1.1"
    with httpx.Client(base_url=server.url, http1=not h2, http2=h2, timeout=30,
                      headers={"x-expected-version": expected}) as c:
        yield c


def test_ksql_returns_one_entity_per_statement_and_passes_the_request_fields(server: RunningServer,
                                                                              client: httpx.Client) -> None:
    r = client.post("/ksql", json={"ksql": "CREATE STREAM A (X INT); SHOW STREAMS;",
                                   "streamsProperties": {"ksql.streams.auto.offset.reset": "earliest"},
                                   "sessionVariables": {"v": "1"}, "commandSequenceNumber": 7},
                    headers={"Accept": KSQL_V1})
    assert r.status_code == 200
    assert r.http_version == client.headers["x-expected-version"]
    assert r.headers["content-type"] == KSQL_V1
    entities = r.json()
    assert [e["@type"] for e in entities] == ["currentStatus", "streams"]
    assert entities[0]["statementText"] == "CREATE STREAM A (X INT);"
    assert server.engine.executed[-1] == ("CREATE STREAM A (X INT); SHOW STREAMS;",
                                          {"ksql.streams.auto.offset.reset": "earliest"}, {"v": "1"}, 7)


def test_ksql_answers_in_the_media_type_the_client_accepts(client: httpx.Client) -> None:
    body = {"ksql": "SHOW STREAMS;"}
    assert client.post("/ksql", json=body, headers={"Accept": "application/json"}).headers["content-type"] == "application/json"
    assert client.post("/ksql", json=body, headers={"Accept": KSQL_V1}).headers["content-type"] == KSQL_V1
    preferred = client.post("/ksql", json=body, headers={"Accept": f"{KSQL_V1}; q=0.4, application/json; q=0.5"})
    assert preferred.headers["content-type"] == "application/json"
    refused = client.post("/ksql", json=body, headers={"Accept": "text/html"})
    assert refused.status_code == 406
    assert refused.json()["error_code"] == 40600


def test_ksql_accepts_the_ksql_request_content_types(client: httpx.Client) -> None:
    for content_type in (f"{KSQL_V1}; charset=utf-8", "application/json", None):
        headers = {"Content-Type": content_type} if content_type else {}
        r = client.post("/ksql", content=b'{"ksql": "SHOW STREAMS;"}', headers=headers)
        assert r.status_code == 200, (content_type, r.text)


def test_failing_statement_is_a_statement_error_with_the_entities_before_it(client: httpx.Client) -> None:
    r = client.post("/ksql", json={"ksql": "CREATE STREAM B (X INT); FAIL this;"})
    assert r.status_code == 400
    error = r.json()
    assert error["@type"] == "statement_error"
    assert error["error_code"] == 40001
    assert error["statementText"] == "FAIL this;"
    assert [e["@type"] for e in error["entities"]] == ["currentStatus"]


def test_select_sent_to_ksql_is_refused_with_40002(client: httpx.Client) -> None:
    r = client.post("/ksql", json={"ksql": "SELECT * FROM S EMIT CHANGES;"})
    assert r.status_code == 400
    assert r.json()["error_code"] == 40002
    assert "should be issued to the websocket endpoint '/query'" in r.json()["message"]


@pytest.mark.parametrize("body", [b"{not json", b"[1, 2]", b"", b"\xff\xfe"])
def test_malformed_json_is_400_with_code_40000(client: httpx.Client, body: bytes) -> None:
    r = client.post("/ksql", content=body)
    assert r.status_code == 400
    assert r.json()["@type"] == "generic_error"
    assert r.json()["error_code"] == 40000
    assert r.json()["message"].startswith("Invalid JSON in request")


def test_missing_or_mistyped_fields_are_400(client: httpx.Client) -> None:
    assert client.post("/ksql", json={"streamsProperties": {}}).json()["message"] == '"ksql" field must be populated'
    r = client.post("/ksql", json={"ksql": "SHOW STREAMS;", "streamsProperties": [1]})
    assert (r.status_code, r.json()["error_code"]) == (400, 40000)
    r = client.post("/ksql", json={"ksql": "SHOW STREAMS;", "commandSequenceNumber": "x"})
    assert (r.status_code, r.json()["error_code"]) == (400, 40000)


def test_body_over_the_limit_is_413_before_it_is_read(client: httpx.Client, server: RunningServer) -> None:
    executed = len(server.engine.executed)
    big = b'{"ksql": "' + b"x" * 5000 + b'"}'
    r = client.post("/ksql", content=big)
    assert r.status_code == 413
    assert r.json() == {"@type": "generic_error", "error_code": 41300,
                        "message": "Request body of 5012 bytes exceeds the limit of 4096 bytes"}
    assert len(server.engine.executed) == executed


def test_chunked_body_over_the_limit_is_refused_while_streaming(client: httpx.Client, server: RunningServer) -> None:
    """No Content-Length: the server counts the bytes as they come and stops at the limit."""
    executed = len(server.engine.executed)

    def chunks() -> Iterator[bytes]:
        yield b'{"ksql": "'
        for _ in range(10):
            yield b"y" * 1000
        yield b'"}'

    r = client.post("/ksql", content=chunks())
    assert r.status_code == 413
    assert r.json()["error_code"] == 41300
    assert len(server.engine.executed) == executed


def test_info_healthcheck_cluster_status(client: httpx.Client) -> None:
    info = client.get("/info")
    assert info.status_code == 200
    assert info.json()["KsqlServerInfo"]["ksqlServiceId"] == "test_service_"
    health = client.get("/healthcheck")
    assert (health.status_code, health.json()["isHealthy"]) == (200, True)
    assert "localhost:0" in client.get("/clusterStatus").json()["clusterStatus"]


def test_status_of_a_command_by_its_id_and_404_for_an_unknown_one(client: httpx.Client) -> None:
    entity = client.post("/ksql", json={"ksql": "CREATE STREAM C (X INT) WITH (KAFKA_TOPIC='c') C;"}).json()[0]
    command_id = entity["commandId"]
    assert command_id == "stream/`C`/create"
    r = client.get("/status/" + command_id.replace("`", "%60"))
    assert r.status_code == 200
    assert r.json()["status"] == "SUCCESS"
    missing = client.get("/status/stream/`NOPE`/create")
    assert missing.status_code == 404
    assert missing.json() == {"@type": "generic_error", "error_code": 40400, "message": "Command not found"}


def test_unknown_path_is_404_wrong_method_405_and_root_redirects_to_info(client: httpx.Client) -> None:
    assert client.get("/nope").status_code == 404
    assert client.get("/ksql").status_code == 405
    root = client.get("/", follow_redirects=False)
    assert (root.status_code, root.headers["location"]) == (307, "/info")


def test_engine_bug_is_a_500_without_the_internal_message() -> None:
    class Broken(MemoryEngine):
        def server_info(self) -> dict[str, object]:
            raise RuntimeError("secret internal detail")

    with running_server(Broken()) as srv, httpx.Client(base_url=srv.url) as c:
        r = c.get("/info")
        assert r.status_code == 500
        assert r.json()["error_code"] == 50000
        assert "secret" not in r.text


def test_max_body_bytes_must_be_positive() -> None:
    with pytest.raises(ValueError, match=r"max_body_bytes must be positive, got 0"):
        create_app(MemoryEngine(), max_body_bytes=0)


def test_http1_upgrade_and_prior_knowledge_share_the_port(server: RunningServer) -> None:
    """The raw HTTP/2 connection preface on the same port as HTTP/1.1 (h2c prior knowledge)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        frame = sock.recv(9)
        # The server's first frame is its SETTINGS frame (type 4).
        assert len(frame) == 9
        assert frame[3] == 4
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"GET /info HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert sock.recv(12) == b"HTTP/1.1 200"


def test_node_not_ready_is_503_with_ksqldb_code() -> None:
    class Replaying(MemoryEngine):
        def health(self) -> dict[str, object]:
            raise NotReadyError("Server initializing")

        async def execute(self, ksql: str, streams_properties: Mapping[str, Any],
                          session_variables: Mapping[str, Any] | None = None,
                          command_sequence_number: int | None = None) -> list[dict[str, Any]]:
            raise NotReadyError("Server initializing")

    with running_server(Replaying()) as srv, httpx.Client(base_url=srv.url) as c:
        for r in (c.get("/healthcheck"), c.post("/ksql", json={"ksql": "SHOW STREAMS;"})):
            assert r.status_code == 503
            assert r.json() == {"@type": "generic_error", "error_code": 50303, "message": "Server initializing"}


def test_unhealthy_node_is_still_200_and_shutting_down_is_503_50302() -> None:
    """ksqlDB's HealthCheckResource always answers 200 with the agent's verdict in the body; only
    its ServerStateHandler answers 503 (50303 initializing, 50302 shutting down)."""
    verdict: dict[str, object] = {"isHealthy": False, "serverState": "READY",
                                  "details": {"metastore": {"isHealthy": True}, "kafka": {"isHealthy": True},
                                              "commandRunner": {"isHealthy": False, "error": "offset 7"}}}

    class Unhealthy(MemoryEngine):
        stopping = False

        def health(self) -> dict[str, object]:
            if self.stopping:
                raise NotReadyError("The server is shutting down", error_code=SERVER_SHUTTING_DOWN)
            return verdict

    engine = Unhealthy()
    with running_server(engine) as srv, httpx.Client(base_url=srv.url) as c:
        r = c.get("/healthcheck", headers={"Accept": KSQL_V1})
        assert (r.status_code, r.headers["content-type"], r.json()) == (200, KSQL_V1, verdict)
        engine.stopping = True
        r = c.get("/healthcheck")
        assert r.status_code == 503
        assert r.json() == {"@type": "generic_error", "error_code": 50302, "message": "The server is shutting down"}


def test_serve_reports_the_bound_port_and_a_failing_ready_callback_releases_the_socket() -> None:
    """``ready`` gets the port bound for port 0; if it raises, serve() raises and the port is free."""
    ports: list[int] = []

    def refuse(port: int) -> None:
        ports.append(port)
        raise RuntimeError("cannot join the cluster")

    with pytest.raises(RuntimeError, match="cannot join"):
        asyncio.run(serve(create_app(MemoryEngine(), max_body_bytes=1024), "127.0.0.1", 0, asyncio.Event(), refuse))
    assert ports
    assert ports[0] > 0
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", ports[0]))  # nothing listens there any more


def test_early_answers_to_large_bodies_reach_http2_clients(server: RunningServer) -> None:
    """406, 404 and 413 answered before the body is read still reach an HTTP/2 client sending a
    large body, and the connection stays usable."""
    big = b'{"ksql": "' + b"z" * 200_000 + b'"}'
    with httpx.Client(base_url=server.url, http1=False, http2=True, timeout=30) as c:
        assert c.post("/ksql", content=big, headers={"Accept": "text/html"}).status_code == 406
        assert c.post("/nowhere", content=big).status_code == 404
        assert c.post("/ksql", content=big).status_code == 413
        assert c.get("/info").status_code == 200
