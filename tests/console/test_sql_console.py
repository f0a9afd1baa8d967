"""The console's SQL page against a real broker, a real SQL server (its Spark driver started by
the first push query) and a real console process (``--sql-server URL``), in headless Chromium:
statements through the editor, the catalog, a persistent query with its state and EXPLAIN, a
push query whose rows arrive live, one of them inserted while the page watches, and a pull query. It costs a
Spark driver (about 50 s of `make test`'s main run, the Makefile's comment above `test`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.console.conftest import BROWSER_WAIT_S, page_replaced
from tests.support.sql_servers import LAZY_SPARK, SqlServerProcess

pytestmark = [pytest.mark.interop, pytest.mark.spark,
              pytest.mark.broker_kinds("oncestream", reason="needs broker properties (2PC) only our single broker takes")]

# Persistent queries commit through KIP-939 two-phase commit (docs/sql-on-spark.md).
MODULE_BROKER_CONFIG = {"transaction.two.phase.commit.enable": "true", "group.initial.rebalance.delay.ms": "0"}
# A push query's first rows wait for the Spark driver to start (tens of seconds on a loaded machine).
SPARK_WAIT_S = 240.0


@pytest.fixture(scope="module")
def sql_node(console_broker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SqlServerProcess]:
    node = SqlServerProcess(bootstrap=console_broker.bootstrap, service_id=f"console_{uuid.uuid4().hex[:6]}_",
                            state_dir=tmp_path_factory.mktemp("sql-node"), config=LAZY_SPARK, name="console-sql")
    node.start()
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture(scope="module")
def console_extra_args(sql_node: SqlServerProcess) -> list[str]:
    assert sql_node.url is not None
    return ["--sql-server", sql_node.url]


def _wait(browser: Any, condition: Callable[[Any], Any], what: str, timeout_s: float = BROWSER_WAIT_S) -> Any:
    from selenium.common.exceptions import NoSuchElementException, TimeoutException, WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        # A form POST replaces the page under the condition: its elements go stale meanwhile.
        return WebDriverWait(browser, timeout_s, ignored_exceptions=(NoSuchElementException, WebDriverException)
                             ).until(condition)
    except TimeoutException:
        status = [e.text for e in browser.find_elements(By.ID, "sql-status")]
        errors = [e.text for e in browser.find_elements(By.ID, "error")]
        raise AssertionError(f"the page never showed {what}; status {status}, errors {errors}") from None


def _run(browser: Any, sql: str) -> None:
    """Type ``sql`` into the editor and run it; a statement (a form POST) is waited for until the
    answering page has replaced this one, a SELECT streams into this page."""
    from selenium.webdriver.common.by import By

    editor = browser.find_element(By.ID, "sql-editor")
    editor.clear()
    editor.send_keys(sql)
    page = browser.find_element(By.TAG_NAME, "html")
    browser.find_element(By.ID, "sql-run").click()
    if not sql.lstrip().upper().startswith("SELECT"):
        _wait(browser, page_replaced(page), f"the answer to {sql!r}")
        _wait(browser, lambda b: b.find_elements(By.ID, "sql-editor"), f"the page answering {sql!r}")


def _rows(browser: Any) -> list[list[str]]:
    from selenium.webdriver.common.by import By

    return [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
            for tr in browser.find_elements(By.CSS_SELECTOR, "#sql-rows tr.sql-row")]


def test_statements_catalog_explain_and_a_live_push_query(console_url: str, sql_node: SqlServerProcess,
                                                         browser_login: Callable[..., Any],
                                                         http_login: Callable[..., httpx.Client],
                                                         screenshot: Callable[[str], Path]) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    suffix = uuid.uuid4().hex[:6].upper()
    stream, copy, table = f"CLICKS_{suffix}", f"CLICKS_COPY_{suffix}", f"PAGES_{suffix}"
    browser = browser_login("alice")
    browser.get(f"{console_url}/sql")
    _run(browser, f"CREATE STREAM {stream} (ID INT KEY, PAGE STRING) "
                  f"WITH (KAFKA_TOPIC='{stream.lower()}', VALUE_FORMAT='JSON', PARTITIONS=1);")
    _wait(browser, lambda b: stream in b.find_element(By.ID, "sql-streams").text, "the new stream in the catalog")
    _run(browser, f"INSERT INTO {stream} (ID, PAGE) VALUES (1, '/home'); INSERT INTO {stream} (ID, PAGE) VALUES (2, '/cart');")
    _wait(browser, lambda b: b.find_elements(By.ID, "sql-entities"), "the inserts' answer")
    assert not browser.find_elements(By.ID, "error")

    # A persistent query: listed with its state, explained on request.
    _run(browser, f"CREATE STREAM {copy} AS SELECT ID, UCASE(PAGE) AS PAGE FROM {stream} EMIT CHANGES;")
    _wait(browser, lambda b: copy in b.find_element(By.ID, "sql-queries").text, "the persistent query")
    (query,) = [tr for tr in browser.find_elements(By.CSS_SELECTOR, "#sql-queries tbody tr") if copy in tr.text]
    assert query.find_elements(By.TAG_NAME, "td")[1].text.split()[0] in ("RUNNING", "PENDING")
    page = browser.find_element(By.TAG_NAME, "html")
    query.find_element(By.CSS_SELECTOR, "button").click()
    _wait(browser, page_replaced(page), "EXPLAIN's page")
    explained = _wait(browser, lambda b: b.find_elements(By.ID, "sql-entities"), "EXPLAIN's answer")
    assert "queryDescription" in explained[0].text
    screenshot("sql-catalog-explain")

    # A push query from the earliest offset: the two rows, then a third inserted while it runs.
    Select(browser.find_element(By.ID, "offset-reset")).select_by_value("earliest")
    _run(browser, f"SELECT ID, PAGE FROM {stream} EMIT CHANGES;")
    _wait(browser, lambda b: len(_rows(b)) >= 2, "the push query's first rows", SPARK_WAIT_S)
    assert _rows(browser)[:2] == [["1", "/home"], ["2", "/cart"]]
    sql_node.ok(f"INSERT INTO {stream} (ID, PAGE) VALUES (3, '/pay');")
    _wait(browser, lambda b: len(_rows(b)) >= 3, "the row inserted while the query runs", SPARK_WAIT_S)
    assert _rows(browser)[2] == ["3", "/pay"]
    assert browser.find_element(By.ID, "sql-query-id").text
    screenshot("sql-push-query")
    browser.find_element(By.ID, "sql-stop").click()
    _wait(browser, lambda b: b.find_element(By.ID, "sql-status").text == "stopped", "the stopped query")

    # A pull query on a table the node materializes: it answers and ends by itself.
    _run(browser, f"CREATE TABLE {table} (ID INT PRIMARY KEY, PAGE STRING) "
                  f"WITH (KAFKA_TOPIC='{table.lower()}', VALUE_FORMAT='JSON', PARTITIONS=1);")
    _wait(browser, lambda b: table in b.find_element(By.ID, "sql-tables").text, "the new table in the catalog")
    _run(browser, f"INSERT INTO {table} (ID, PAGE) VALUES (7, '/checkout');")
    _wait(browser, lambda b: b.find_elements(By.ID, "sql-entities"), "the insert's answer")

    def pulled(b: Any) -> bool:
        _run(b, f"SELECT ID, PAGE FROM {table} WHERE ID = 7;")
        _wait(b, lambda b: b.find_element(By.ID, "sql-stop").get_attribute("disabled") is not None, "the pull query's end")
        return _rows(b) == [["7", "/checkout"]]

    _wait(browser, pulled, "the pull query's row once the table is materialized", SPARK_WAIT_S)
    assert "Error" not in browser.find_element(By.ID, "sql-status").text
    screenshot("sql-pull-query")

    # Every statement and query was audited with the user.
    audit = http_login("alice").get("/audit").text
    for action in ("sql.statement", "sql.query"):
        assert action in audit
    assert f"CREATE STREAM {stream}" in audit
