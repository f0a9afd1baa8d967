"""The console's gate, over HTTP against a real ``oncestream console`` process (no browser):
every page and API refuses a request without a session, a wrong password is refused, a POST
without the session's CSRF token is refused, and the audit log records the session's user
whatever the form says."""

from __future__ import annotations

import re
import socket
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from starlette.routing import Mount, Route

from oncestream.console.app import create_app
from oncestream.console.settings import ConsoleSettings
from tests.console.conftest import HTTP_TIMEOUT_S, ConsoleClient, ConsoleServer, csrf_of


def _app_routes() -> list[tuple[str, str]]:
    """(method, path) of every route of the console app, path parameters filled with a value:
    enumerated from the app itself, so a page added later is checked too."""
    # Building the app contacts no cluster: the address is never used.
    app = create_app(ConsoleSettings(bootstrap_servers="127.0.0.1:9", users_file=Path("/nonexistent")))
    out = []
    for route in app.routes:
        if isinstance(route, Mount):
            continue  # /static: open by design (stylesheet and script only)
        assert isinstance(route, Route), route
        path = re.sub(r"\{[^}]+\}", "x", route.path)
        for method in sorted(route.methods or {"GET"}):
            if method != "HEAD":
                out.append((method, path))
    return out


ROUTES = _app_routes()
OPEN = {("GET", "/login"), ("POST", "/login")}


def test_the_app_has_the_pages_of_issue_26() -> None:
    paths = {p for _, p in ROUTES}
    assert {"/", "/topics", "/topics/x/messages", "/groups", "/groups/x", "/audit", "/login", "/logout"} <= paths


@pytest.mark.parametrize(("method", "path"), [r for r in ROUTES if r not in OPEN])
def test_every_route_refuses_a_request_without_a_session(console_url: str, method: str, path: str) -> None:
    with httpx.Client(base_url=console_url, timeout=HTTP_TIMEOUT_S, follow_redirects=False) as client:
        response = client.request(method, path, data={"csrf_token": "x", "name": "x"} if method != "GET" else None)
    if path.startswith("/api/"):
        assert response.status_code == 401, (method, path, response.status_code)
        assert response.json() == {"error": "not logged in"}
    else:
        assert response.status_code == 303, (method, path, response.status_code)
        assert response.headers["location"].startswith("/login?next=")


def test_a_refused_post_keeps_its_keep_alive_connection(console_url: str) -> None:
    """A POST refused for want of a session, its body arriving after its headers (as httpx may
    send them): the console reads the body before answering, so the connection serves the
    client's next request (answered over the unread body, the server dropped the connection and a
    client's next request on it failed: RemoteProtocolError in a CI run)."""
    host, port = urllib.parse.urlsplit(console_url).hostname, urllib.parse.urlsplit(console_url).port
    body = b"topic=t&partition=0&confirm=producer+1"
    with socket.create_connection((host, port), timeout=HTTP_TIMEOUT_S) as conn:
        conn.sendall(b"POST /transactions/abort HTTP/1.1\r\nHost: console\r\n"
                     b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\n" % len(body))
        time.sleep(0.3)  # the body comes later than the headers (not a timing claim: any delay shows it)
        conn.sendall(body)
        reader = conn.makefile("rb")
        assert reader.readline().startswith(b"HTTP/1.1 303"), "the refusal"
        length = 0
        while (line := reader.readline()) not in (b"\r\n", b""):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
            assert not line.lower().startswith(b"connection: close"), line
        reader.read(length)
        conn.sendall(b"GET /login HTTP/1.1\r\nHost: console\r\n\r\n")
        assert reader.readline().startswith(b"HTTP/1.1 200"), "the next request on the same connection"


def test_a_forged_session_cookie_is_refused(console_url: str) -> None:
    with httpx.Client(base_url=console_url, timeout=HTTP_TIMEOUT_S,
                      cookies={"oncestream_console_session": "forged-token"}) as client:
        assert client.get("/api/overview").status_code == 401
        assert client.get("/topics").status_code == 303


def test_a_wrong_password_and_an_unknown_user_are_refused(console_url: str) -> None:
    with httpx.Client(base_url=console_url, timeout=HTTP_TIMEOUT_S) as client:
        for user, password in (("alice", "not-her-password"), ("mallory", "whatever"), ("alice", "")):
            token = csrf_of(client.get("/login").text)
            response = client.post("/login", data={"username": user, "password": password, "csrf_token": token})
            assert response.status_code in (401, 422) or "Wrong user name or password" in response.text, response.text
            assert "oncestream_console_session" not in client.cookies
            assert client.get("/api/overview").status_code == 401


def test_login_without_the_login_forms_token_is_refused(console_url: str) -> None:
    with httpx.Client(base_url=console_url, timeout=HTTP_TIMEOUT_S) as client:
        response = client.post("/login", data={"username": "alice", "password": "alice-secret-1"})
        assert response.status_code == 403
        assert "oncestream_console_session" not in client.cookies


def test_a_post_without_the_csrf_token_is_refused(http_login: Callable[..., ConsoleClient],
                                                 unique_name: Callable[[str], str]) -> None:
    alice = http_login("alice")
    name = unique_name("csrf")
    for data in ({"name": name, "partitions": "1"}, {"name": name, "partitions": "1", "csrf_token": "wrong"}):
        response = alice.post("/topics", data=data)
        assert response.status_code == 403, response.text
    response = alice.post("/topics", data={"name": name, "partitions": "1"}, headers={"X-CSRF-Token": "wrong"})
    assert response.status_code == 403
    assert name not in alice.get("/topics").text  # nothing was created
    # Another user's token does not do either: each session has its own.
    bob = http_login("bob")
    assert alice.post("/topics", data={"name": name, "partitions": "1", "csrf_token": bob.csrf}).status_code == 403


def test_the_audit_log_names_the_sessions_user_whatever_the_form_says(http_login: Callable[..., ConsoleClient],
                                                                     unique_name: Callable[[str], str],
                                                                     console_server: ConsoleServer) -> None:
    alice = http_login("alice")
    name = unique_name("audited")
    response = alice.post("/topics", data={"name": name, "partitions": "2", "csrf_token": alice.csrf,
                                           "user": "bob", "username": "bob"}, follow_redirects=True)
    assert response.status_code == 200, response.text
    entries = [e for e in alice.get("/api/audit").json() if e["target"] == name]
    assert [(e["user"], e["action"], e["outcome"]) for e in entries] == [("alice", "topic.create", "ok")]
    # The same entry is a structured line of the console's log (logger oncestream.console.audit).
    lines = [line for line in console_server.log_text().splitlines() if name in line and "console.audit" in line]
    assert len(lines) == 1, lines
    assert "user=alice" in lines[0]
    assert "action=topic.create" in lines[0]


def test_logout_ends_the_session(http_login: Callable[..., ConsoleClient]) -> None:
    alice = http_login("alice")
    token = alice.cookies["oncestream_console_session"]
    assert alice.post("/logout", data={"csrf_token": alice.csrf}).status_code == 303
    with httpx.Client(base_url=str(alice.base_url), timeout=HTTP_TIMEOUT_S,
                      cookies={"oncestream_console_session": token}) as replay:
        assert replay.get("/api/overview").status_code == 401
