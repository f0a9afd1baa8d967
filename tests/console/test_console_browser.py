"""The console in headless Chromium against a real broker and a real ``oncestream console``:
log in, the overview, topics (create, produce, browse), each page's screenshot under
test-artifacts/console/."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from tests.console.conftest import BROWSER_WAIT_S


def test_login_shows_the_overview_of_the_cluster(browser_login: Callable[..., WebDriver], console_url: str,
                                                 console_broker: Any, screenshot: Callable[[str], Path]) -> None:
    browser = browser_login("alice")
    browser.get(f"{console_url}/")
    WebDriverWait(browser, BROWSER_WAIT_S).until(ec.presence_of_element_located((By.ID, "brokers")))
    assert browser.find_element(By.ID, "current-user").text == "alice"
    rows = browser.find_elements(By.CSS_SELECTOR, "#brokers tbody tr")
    port = console_broker.bootstrap.rsplit(":", 1)[1]
    assert any(f":{port}" in row.text for row in rows), [r.text for r in rows]
    assert browser.find_element(By.ID, "cluster-id").text.strip()
    screenshot("overview")
