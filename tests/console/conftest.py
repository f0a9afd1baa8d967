"""Fixtures of the console suites (tests/console): a real broker, a users file, a real
``oncestream console`` process on an OS-chosen port, HTTP sessions logged in as a user, and a
headless Chromium driven by Selenium with ``screenshot(name)`` saving PNGs under
``test-artifacts/console/``.

Fixture names other suites rely on: ``console_broker``, ``console_users``, ``console_users_file``,
``console_extra_args`` (override it in a module to pass e.g. ``--sql-server URL``),
``console_server``, ``console_url``, ``http_login``, ``browser``, ``browser_login``,
``screenshot``, ``unique_name``; helpers ``start_console``, ``stop_console``, ``csrf_of``,
``ConsoleClient``, and the constants ``USERS``, ``BROWSER_WAIT_S``, ``HTTP_TIMEOUT_S``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from oncestream.sql.server.rest.users_file import set_user
from tests.support.ready_processes import stop

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS_DIR = ROOT / "test-artifacts" / "console"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
READY_TIMEOUT_S = 30.0
HTTP_TIMEOUT_S = 30.0
# How long a browser step waits for an element or a page state (every wait is bounded).
BROWSER_WAIT_S = 20.0


def page_replaced(old_page: Any) -> Callable[[Any], bool]:
    """A wait condition: ``old_page`` (an element of the page before a click) is gone. Selenium's
    ``staleness_of`` takes only ``StaleElementReferenceException`` for that; chromedriver 156 also
    answers a node detached mid-navigation with "Node with given id does not belong to the
    document" (an ``unknown error``), which means the same: the old page is gone."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    def gone(_browser: Any) -> bool:
        try:
            old_page.is_enabled()
        except StaleElementReferenceException:
            return True
        except WebDriverException as e:
            if "does not belong to the document" in (e.msg or ""):
                return True
            raise
        return False
    return gone
# Two console users: tests act as one and check that nothing can act as the other.
USERS = {"alice": "alice-secret-1", "bob": "bob-secret-2"}


@dataclass
class ConsoleServer:
    """A running ``oncestream console`` process."""

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    users_file: Path

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture(scope="module")
def console_broker(broker: Any) -> Any:
    """The module's broker (tests/conftest.py's ``broker``: ours, a cluster of ours, or Tansu)."""
    return broker


@pytest.fixture(scope="module")
def console_users() -> dict[str, str]:
    """User name -> password of the console's users file."""
    return dict(USERS)


@pytest.fixture(scope="module")
def console_users_file(tmp_path_factory: pytest.TempPathFactory, console_users: dict[str, str]) -> Path:
    """A users file (the SQL server's format, written by the code behind ``oncestream sql-users add``)."""
    path = tmp_path_factory.mktemp("console-users") / "users"
    for user, password in console_users.items():
        set_user(path, user, password)
    return path


def start_console(bootstrap: str, users_file: Path, workdir: Path, *extra: str) -> ConsoleServer:
    """``oncestream console`` on 127.0.0.1:0 in its own session, ready once its ``--ready-file``
    names its url and the url answers (at most READY_TIMEOUT_S)."""
    ready = workdir / f"ready-{uuid.uuid4().hex[:8]}.json"
    log_path = workdir / f"console-{ready.stem}.log"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")])
    argv = [sys.executable, "-m", "oncestream.cli", "console", "--bootstrap-server", bootstrap,
            "--users-file", str(users_file), "--listen", "127.0.0.1:0", "--ready-file", str(ready), *extra]
    with open(log_path, "wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=env, start_new_session=True)
    server: ConsoleServer | None = None
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline and process.poll() is None:
        if ready.exists():
            url = json.loads(ready.read_text())["url"]
            try:
                httpx.get(f"{url}/login", timeout=2.0, verify=False)  # a probe: any answer will do (https too)
            except httpx.HTTPError:
                time.sleep(0.1)
                continue
            server = ConsoleServer(url, process, log_path, users_file)
            break
        time.sleep(0.1)
    if server is None:
        stop_console(process)
        raise AssertionError(f"the console did not start (exit {process.returncode}):\n{log_path.read_text()[-6000:]}")
    return server


def stop_console(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL of its session (tests/support/ready_processes.stop)."""
    stop(process)


@pytest.fixture(scope="module")
def console_extra_args() -> list[str]:
    """More ``oncestream console`` arguments for the module's ``console_server``: a module
    overrides this fixture, e.g. to return ``["--sql-server", sql_node.url]``."""
    return []


@pytest.fixture(scope="module")
def console_server(console_broker: Any, console_users_file: Path, console_extra_args: list[str],
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleServer]:
    """A real ``oncestream console`` process against ``console_broker`` for the module (127.0.0.1,
    an OS-chosen port), with ``console_extra_args``."""
    server = start_console(console_broker.bootstrap, console_users_file, tmp_path_factory.mktemp("console"),
                           *console_extra_args)
    try:
        yield server
    finally:
        stop_console(server.process)


@pytest.fixture(scope="module")
def console_url(console_server: ConsoleServer) -> str:
    """The console's base url, e.g. ``http://127.0.0.1:41234``."""
    return console_server.url


class ConsoleClient(httpx.Client):
    """An httpx client logged in to the console: ``csrf`` is its session's CSRF token."""

    csrf: str = ""


def csrf_of(html: str) -> str:
    """The CSRF token of the first POST form of a console page."""
    marker = 'name="csrf_token" value="'
    start = html.index(marker) + len(marker)
    return html[start:html.index('"', start)]


@pytest.fixture
def http_login(console_url: str) -> Iterator[Callable[..., ConsoleClient]]:
    """``http_login(user=..., password=...)``: a ``ConsoleClient`` logged in (cookie jar set),
    with ``client.csrf`` the session's CSRF token; closed after the test."""
    clients: list[ConsoleClient] = []

    def login(user: str = "alice", password: str | None = None) -> ConsoleClient:
        client = ConsoleClient(base_url=console_url, timeout=HTTP_TIMEOUT_S, follow_redirects=False)
        clients.append(client)
        form = client.get("/login")
        response = client.post("/login", data={"username": user, "password": password or USERS[user],
                                               "csrf_token": csrf_of(form.text), "next": "/"})
        if response.status_code != 303:
            raise AssertionError(f"login of {user} refused: {response.status_code} {response.text[:500]}")
        client.csrf = csrf_of(client.get("/audit").text)
        return client

    try:
        yield login
    finally:
        for client in clients:
            client.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    """Headless Debian Chromium through Debian's chromedriver (explicit paths: Selenium Manager
    never downloads anything), one per module."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000",
                "--disable-gpu", "--no-first-run", "--disable-extensions"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(BROWSER_WAIT_S)
    driver.implicitly_wait(0)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def browser_login(browser: WebDriver, console_url: str) -> Callable[..., WebDriver]:
    """``browser_login(user="alice")``: the browser logged in as ``user`` (logged out first)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    def login(user: str = "alice", password: str | None = None) -> WebDriver:
        browser.delete_all_cookies()
        browser.get(f"{console_url}/login")
        browser.find_element(By.ID, "username").send_keys(user)
        browser.find_element(By.ID, "password").send_keys(password or USERS[user])
        browser.find_element(By.ID, "login").click()
        WebDriverWait(browser, BROWSER_WAIT_S).until(ec.presence_of_element_located((By.ID, "current-user")))
        return browser

    return login


@pytest.fixture
def screenshot(browser: WebDriver) -> Callable[[str], Path]:
    """``screenshot(name)``: the browser's window as ``test-artifacts/console/NAME.png``."""
    ARTIFACTS_DIR.mkdir(parents=True, exist_ok=True)

    def take(name: str) -> Path:
        path = ARTIFACTS_DIR / f"{name}.png"
        browser.save_screenshot(str(path))
        return path

    return take


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """``unique_name("topic")``: a name no other test of the module uses."""
    def make(prefix: str) -> str:
        return f"{prefix}-{request.node.name[:40].replace('[', '-').replace(']', '')}-{uuid.uuid4().hex[:6]}"
    return make
