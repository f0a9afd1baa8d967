"""The REST API's security (issue 24 point 8) on the real hypercorn server over the in-memory engine:
the users file, HTTP Basic authentication on every endpoint (401 with ``WWW-Authenticate`` and
ksqlDB's entity, nothing reaching the engine), the always-open /healthcheck and
``authentication.skip.paths``, the HTTPS listener with client certificates (``REQUIRED``: refused
in the TLS handshake without one), HTTP/2 through ALPN, and the listener settings' errors.

The same through a real node, with ksql-python-ng and the shell: tests/interop/sql/test_rest_security.py.
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from oncestream.sql.server.rest.basic_auth import AuthConfigError, BasicAuthMiddleware, BasicAuthSettings, parse_basic
from oncestream.sql.server.rest.listener import ListenerConfigError, TlsSettings, listener_from
from oncestream.sql.server.rest.users_file import PasswordHash, UsersFileError, load_users, parse_users, set_user
from tests.support.certs import Pki, make_pki
from tests.unit.sql.test_rest_support import RunningServer, running_server

REALM = "test-realm"
UNAUTHORIZED = {"@type": "generic_error", "error_code": 40100, "message": "Unauthorized"}
# Every endpoint of KsqlRestApp (method, path, body).
ENDPOINTS: list[tuple[str, str, dict[str, object] | None]] = [
    ("POST", "/ksql", {"ksql": "CREATE STREAM EVIL (A INT) EVIL;", "streamsProperties": {}}),
    ("POST", "/query", {"ksql": "SELECT * FROM S;", "streamsProperties": {}}),
    ("POST", "/query-stream", {"sql": "SELECT * FROM S;", "properties": {}}),
    ("POST", "/inserts-stream", None),
    ("POST", "/close-query", {"queryId": "transient_S_1"}),
    ("GET", "/info", None),
    ("GET", "/status/stream/`EVIL`/create", None),
    ("GET", "/clusterStatus", None),
    ("GET", "/", None),
]
INSERTS = b'{"target": "S"}\n{"ID": 66, "NAME": "evil"}\n'


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def users(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("users") / "users.txt"
    set_user(path, "alice", "alice-secret")
    set_user(path, "bob", "bob-secret")
    return path


@pytest.fixture(scope="module")
def server(users: Path) -> Iterator[RunningServer]:
    settings = BasicAuthSettings.from_properties({
        "authentication.method": "BASIC", "authentication.users.file": str(users),
        "authentication.realm": REALM, "authentication.skip.paths": " /open/*, /public"})
    assert settings is not None
    with running_server(wrap=lambda app: BasicAuthMiddleware(app, load_users(settings.users_file),
                                                             realm=settings.realm,
                                                             skip_paths=settings.skip_paths)) as srv:
        yield srv


def _request(server: RunningServer, method: str, path: str, body: dict[str, object] | None,
             auth: tuple[str, str] | None = None, headers: dict[str, str] | None = None) -> httpx.Response:
    content = INSERTS if path == "/inserts-stream" else (json.dumps(body).encode() if body is not None else None)
    return httpx.request(method, f"{server.url}{path}", content=content, auth=auth, headers=headers,
                         timeout=30, follow_redirects=False)


def test_users_file_round_trip_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "users"
    assert set_user(path, "carol", "one") is True
    assert set_user(path, "dave", "two") is True
    assert set_user(path, "carol", "three") is False  # replaced, not added twice
    assert path.stat().st_mode & 0o777 == 0o600
    users = load_users(path)
    assert sorted(users) == ["carol", "dave"]
    assert users["carol"].verify("three")
    assert not users["carol"].verify("one")
    assert "three" not in path.read_text()
    assert PasswordHash.parse(users["dave"].phc()) == users["dave"]
    with pytest.raises(UsersFileError, match="line 2"):
        parse_users("# comment\nerin:plain-text-password\n")
    with pytest.raises(UsersFileError, match="out of range"):
        parse_users("erin:$scrypt$ln=40,r=8,p=1$c2FsdA$" + "A" * 43)
    with pytest.raises(UsersFileError, match="twice"):
        parse_users(f"x:{users['dave'].phc()}\nx:{users['dave'].phc()}")
    with pytest.raises(UsersFileError):
        set_user(path, "a:b", "pw")


def test_parse_basic() -> None:
    token = base64.b64encode(b"al:ice:pass:word").decode()
    assert parse_basic(f"Basic {token}") == ("al", "ice:pass:word")
    assert parse_basic(f"basic {token}") == ("al", "ice:pass:word")
    assert parse_basic(f"Bearer {token}") is None
    assert parse_basic("Basic !!!") is None
    assert parse_basic(None) is None


@pytest.mark.parametrize(("method", "path", "body"), ENDPOINTS)
def test_every_endpoint_refuses_missing_and_wrong_credentials(server: RunningServer, method: str, path: str,
                                                              body: dict[str, object] | None) -> None:
    executed, rows = len(server.engine.executed), len(server.engine.streams["S"].rows)
    attempts: list[dict[str, object]] = [
        {}, {"auth": ("alice", "wrong")}, {"auth": ("nobody", "alice-secret")}, {"auth": ("bob", "alice-secret")},
        {"headers": {"Authorization": "Bearer abc"}}, {"headers": {"Authorization": "Basic not-base64!"}},
    ]
    for attempt in attempts:
        response = _request(server, method, path, body, **attempt)  # type: ignore[arg-type]
        assert response.status_code == 401, (attempt, response.text)
        assert response.headers["www-authenticate"] == f'Basic realm="{REALM}"'
        assert response.json() == UNAUTHORIZED
    # Nothing reached the engine: no statement ran, no row was inserted, no query started.
    assert len(server.engine.executed) == executed
    assert len(server.engine.streams["S"].rows) == rows


def test_right_credentials_reach_every_endpoint(server: RunningServer) -> None:
    statuses = {}
    for method, path, body in ENDPOINTS:
        statuses[path] = _request(server, method, path, body, auth=("alice", "alice-secret")).status_code
    # /close-query of a query that is not running is the app's 400; / redirects to /info.
    assert statuses == {"/ksql": 200, "/query": 200, "/query-stream": 200, "/inserts-stream": 200,
                        "/close-query": 400, "/info": 200, "/status/stream/`EVIL`/create": 200,
                        "/clusterStatus": 200, "/": 307}
    assert server.engine.executed[-1][0] == "CREATE STREAM EVIL (A INT) EVIL;"
    # A second request with the same password is answered from the verified-password cache, a
    # changed one is checked again (and refused).
    assert _request(server, "GET", "/info", None, auth=("bob", "bob-secret")).status_code == 200
    assert _request(server, "GET", "/info", None, auth=("bob", "bob-secret")).status_code == 200
    assert _request(server, "GET", "/info", None, auth=("bob", "bob-secre")).status_code == 401


def test_healthcheck_and_skip_paths_stay_open(server: RunningServer) -> None:
    assert _request(server, "GET", "/healthcheck", None).status_code == 200
    # authentication.skip.paths: the request reaches the app (which has no such route: 404).
    assert _request(server, "GET", "/open/anything", None).status_code == 404
    assert _request(server, "GET", "/public", None).status_code == 404
    assert _request(server, "GET", "/publicity", None).status_code == 401
    # A path that only looks like an open one is authenticated.
    assert _request(server, "GET", "/open/../info", None).status_code == 401


def test_auth_settings_errors(tmp_path: Path) -> None:
    assert BasicAuthSettings.from_properties({}) is None
    assert BasicAuthSettings.from_properties({"authentication.method": "none"}) is None
    with pytest.raises(AuthConfigError, match="NONE or BASIC"):
        BasicAuthSettings.from_properties({"authentication.method": "JWT"})
    with pytest.raises(AuthConfigError, match=r"authentication\.users\.file"):
        BasicAuthSettings.from_properties({"authentication.method": "BASIC"})


def tls_answer(port: int, ca: Path, cert: Path | None = None, key: Path | None = None) -> bytes | str:
    """Connect over TLS (trusting ``ca``, presenting ``cert`` if given), send ``GET /healthcheck``
    and return the first bytes of the answer, or the TLS error's reason. A listener refusing the
    client ends the connection (alert or close) before reading any HTTP: TLS 1.3 verifies the
    client after the client's side of the handshake, so that shows on the first read."""
    context = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        context.load_cert_chain(str(cert), str(key))
    with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
        try:
            with context.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(b"GET /healthcheck HTTP/1.1\r\nHost: localhost\r\n\r\n")
                return tls.recv(64)
        except (ssl.SSLError, ConnectionResetError) as exc:
            return str(getattr(exc, "reason", exc))


def _tls_props(pki: Pki, client_auth: str) -> dict[str, str]:
    return {"listeners": "https://127.0.0.1:0", "listener.ssl.keystore.location": str(pki.server_keystore),
            "listener.ssl.truststore.location": str(pki.ca), "listener.ssl.client.authentication": client_auth}


def test_https_listener_with_required_client_certificates(pki: Pki) -> None:
    listener = listener_from(None, _tls_props(pki, "REQUIRED"))
    assert (listener.scheme, listener.url(8443)) == ("https", "https://127.0.0.1:8443")
    with running_server(tls=listener.tls) as srv:
        assert srv.url.startswith("https://")
        # No client certificate, or one from a CA the listener does not trust: the connection ends
        # in the TLS layer, no HTTP answer; alice's certificate gets one on the same path.
        assert tls_answer(srv.port, pki.ca, pki.alice.cert, pki.alice.key)[:12] == b"HTTP/1.1 200"
        assert tls_answer(srv.port, pki.ca) in (b"", "TLSV13_ALERT_CERTIFICATE_REQUIRED")
        assert tls_answer(srv.port, pki.ca, pki.other_ca.cert, pki.other_ca.key) in (b"", "TLSV1_ALERT_UNKNOWN_CA")
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{srv.url}/info", verify=str(pki.ca), timeout=30)
        with pytest.raises(httpx.ConnectError):  # the client does not trust an unknown server
            httpx.get(f"{srv.url}/info", cert=(str(pki.alice.cert), str(pki.alice.key)), timeout=30)
        cert = (str(pki.alice.cert), str(pki.alice.key))
        assert httpx.get(f"{srv.url}/info", verify=str(pki.ca), cert=cert, timeout=30).status_code == 200
        with httpx.Client(http2=True, verify=str(pki.ca), cert=cert, timeout=30) as h2:  # h2 through ALPN
            response = h2.post(f"{srv.url}/query-stream", json={"sql": "SELECT * FROM S;", "properties": {}})
            assert (response.status_code, response.http_version) == (200, "HTTP/2")
        with pytest.raises(httpx.RemoteProtocolError):  # plain HTTP to the TLS port
            httpx.get(f"http://127.0.0.1:{srv.port}/info", timeout=30)


def test_https_listener_with_requested_client_certificates(pki: Pki) -> None:
    listener = listener_from(None, _tls_props(pki, "REQUESTED"))
    with running_server(tls=listener.tls) as srv:
        assert httpx.get(f"{srv.url}/info", verify=str(pki.ca), timeout=30).status_code == 200
        # A certificate that is sent must verify.
        assert tls_answer(srv.port, pki.ca)[:12] == b"HTTP/1.1 200"
        assert tls_answer(srv.port, pki.ca, pki.self_signed.cert, pki.self_signed.key) in (b"", "TLSV1_ALERT_UNKNOWN_CA")


def test_listener_settings_errors(pki: Pki, tmp_path: Path) -> None:
    assert listener_from(None, {}).url(8088) == "http://127.0.0.1:8088"
    assert listener_from("0.0.0.0:0", {}).scheme == "http"
    assert listener_from(None, {"listeners": "http://[::1]:0"}).url(1) == "http://[::1]:1"
    cases = [
        ("127.0.0.1:1", {"listeners": "https://127.0.0.1:0"}, "not both"),
        (None, {"listeners": "https://127.0.0.1:0"}, "listener.ssl.keystore.location"),
        (None, {"listeners": "ftp://127.0.0.1:0"}, "http://HOST:PORT"),
        (None, {"listeners": "https://a:1,http://b:2"}, "one listener"),
        (None, {"listener.ssl.keystore.location": str(pki.server_keystore)}, "need an HTTPS listener"),
        (None, {**_tls_props(pki, "REQUIRED"), "listener.ssl.truststore.location": ""}, "needs listener.ssl.truststore"),
        (None, _tls_props(pki, "MAYBE"), "NONE, REQUESTED or REQUIRED"),
        (None, {**_tls_props(pki, "NONE"), "listener.ssl.keystore.location": str(tmp_path / "none.pem")}, "no such file"),
        (None, {**_tls_props(pki, "NONE"), "listener.ssl.keystore.location": str(pki.ca)}, "certificate and key"),
    ]
    for listen, props, message in cases:
        with pytest.raises(ListenerConfigError, match=message):
            listener_from(listen, props)


def test_tls_settings_match_what_hypercorn_gets(pki: Pki) -> None:
    """The context checked at start verifies clients the way the listener will."""
    settings = TlsSettings(str(pki.server_cert), str(pki.server_key), None, str(pki.ca), "REQUIRED")
    assert settings.server_context().verify_mode == ssl.CERT_REQUIRED
