"""The console's application without a cluster: every page module is in ``PAGES``, markup is
escaped, the message browser's formats, the lag history and its sparkline, the session store."""

from __future__ import annotations

import pkgutil
from pathlib import Path

from starlette.routing import Route
from starlette.testclient import TestClient

from oncestream.console import pages
from oncestream.console.app import PAGES, create_app
from oncestream.console.auth import SessionStore, safe_next
from oncestream.console.browse import parse_headers, show, show_key
from oncestream.console.groups import LagHistory, sparkline_points
from oncestream.console.settings import ConsoleSettings
from oncestream.console.web import make_templates


def test_every_module_of_console_pages_is_served() -> None:
    modules = {info.name for info in pkgutil.iter_modules(pages.__path__)}
    assert modules == {m.__name__.rsplit(".", 1)[1] for m in PAGES}


def test_the_navigation_names_the_served_pages_only() -> None:
    app = create_app(ConsoleSettings("127.0.0.1:9", Path("/nonexistent")))
    served = {r.path for r in app.routes if isinstance(r, Route)}
    nav = app.state.console.nav
    assert [label for label, _ in nav] == ["Overview", "Topics", "Groups", "Transactions", "SQL", "ACLs", "Audit"]
    assert all(path in served for _, path in nav)


def test_templates_escape_markup() -> None:
    env = make_templates().env
    assert env.from_string("{{ v }}").render(v="<b>x</b>") == "&lt;b&gt;x&lt;/b&gt;"
    assert env.from_string("{{ v|segment }}").render(v="<i>a</i>/b") == "%3Ci%3Ea%3C%2Fi%3E%2Fb"


def test_the_login_page_needs_no_session_and_sets_no_session() -> None:
    app = create_app(ConsoleSettings("127.0.0.1:9", Path("/nonexistent")))
    with TestClient(app) as client:
        page = client.get("/login")
        assert page.status_code == 200
        assert "oncestream_console_session" not in page.cookies
        assert page.headers["x-frame-options"] == "DENY"
        assert "script-src 'self'" in page.headers["content-security-policy"]


def test_show_as_text_json_and_hex() -> None:
    assert show(b'{"a":1}', "json").text == '{\n  "a": 1\n}'
    assert show(b"plain", "json").note == "not JSON: shown as text"
    assert show_key(b"plain", "json").note == ""
    assert show(b"\xff\x00", "text") == show(b"\xff\x00", "hex").__class__("ff 00", "not UTF-8: shown as hex")
    assert show(b"ab", "hex").text == "61 62"
    assert show(None, "text").note == "null"
    assert parse_headers("a=1\n\nb=\nc") == [("a", b"1"), ("b", b""), ("c", b"")]


def test_lag_history_keeps_one_sample_a_second_and_draws_it() -> None:
    now = [100.0]
    history = LagHistory(lambda: now[0], capacity=3)
    history.add("g", 10)
    now[0] += 0.5
    history.add("g", 8)     # within a second: replaces the last sample
    for lag in (6, 4, 2):
        now[0] += 2
        history.add("g", lag)
    assert history.samples("g") == [(102.5, 6), (104.5, 4), (106.5, 2)]
    assert sparkline_points(history.samples("g"), width=100, height=10) == "0.0,1.0 50.0,3.7 100.0,6.3"
    assert history.samples("other") == []


def test_sessions_expire_and_next_stays_on_the_site() -> None:
    now = [0.0]
    store = SessionStore(lambda: now[0], max_age_s=60)
    session = store.open("alice")
    assert store.get(session.token) == session
    assert store.get("forged") is None
    now[0] = 61
    assert store.get(session.token) is None
    assert [safe_next(t) for t in ("/topics?x=1", "//evil.example", "https://evil.example", "/\\evil", None)] == \
        ["/topics?x=1", "/", "/", "/", "/"]


def test_rates_come_from_two_looks_at_the_end_offsets() -> None:
    from oncestream.console.rates import MAX_INTERVAL_S, OffsetRates

    now = [1000.0]
    rates = OffsetRates(lambda: now[0])
    assert rates.observe("t", 100) is None          # one look: no rate yet
    now[0] += 4
    assert rates.observe("t", 300) == 50.0
    assert rates.observe("t", 900) == 50.0          # the same instant: the rate of the look before
    now[0] += 2
    assert rates.observe("t", 300) == 0.0
    now[0] += MAX_INTERVAL_S + 1
    assert rates.observe("t", 400) is None          # the previous look is too old
    now[0] += 1
    assert rates.observe("t", 50) is None           # the topic was deleted and created again


def test_without_a_cluster_pages_and_apis_say_why_in_words(tmp_path: Path) -> None:
    import re

    from oncestream.sql.server.rest.users_file import set_user
    from tests.support.ports import free_tcp_port

    set_user(tmp_path / "users", "alice", "pw")
    # A port the OS just gave out and nobody listens on: the connection is refused.
    app = create_app(ConsoleSettings(f"127.0.0.1:{free_tcp_port()}", tmp_path / "users"))
    with TestClient(app, raise_server_exceptions=False) as client:
        found = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/login").text)
        assert found is not None
        client.post("/login", data={"username": "alice", "password": "pw", "csrf_token": found.group(1)})
        page = client.get("/topics")
        assert page.status_code == 502
        assert "Cannot list topics: _TRANSPORT" in page.text
        api = client.get("/api/topics")
        assert api.status_code == 502
        assert api.json()["error"].startswith("_TRANSPORT: ")
