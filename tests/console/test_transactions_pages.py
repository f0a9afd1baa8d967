"""The console's Transactions and ACL pages against a real broker and a real console process:
HTTP checks (no session, no confirmation) and headless Chromium (an open transaction appears and
goes on commit; a hanging transaction is flagged and aborted, after which read_committed readers
advance; a prepared two-phase-commit transaction is completed), with a screenshot of each page.

How a transaction hangs on our broker: the module's broker runs the coordinator's sweep for
timed-out transactions (``transaction.abort.timed.out.transaction.cleanup.interval.ms``) once an
hour, as a coordinator whose sweep has stalled would; a librdkafka producer opens a transaction
with a 1 s ``transaction.timeout.ms``, writes a record (flushed) and is abandoned without ending
it, as a crashed application leaves it. A second later the coordinator still lists it Ongoing:
open past its timeout, and the partition's last stable offset stays at its first record while a
later plain record raises the high watermark. (Our broker refuses client-written transaction
markers, so a hanging transaction of the find-hanging kind, unknown to every coordinator, cannot
be made on it; that rule is unit-tested in tests/unit/test_console_transactions_view.py.)
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Producer

from oncestream.client import Producer as OurProducer
from tests.console.conftest import BROWSER_WAIT_S
from tests.console.test_transactions_access import hang_transaction
from tests.support.clients import CLIENT_TIMEOUT_S, create_topic
from tests.support.txn import READ_COMMITTED, list_offset, read_to_end, values_of, wait_until

pytestmark = [pytest.mark.interop,
              pytest.mark.broker_kinds("oncestream", reason="needs broker properties (2PC, the sweep interval) "
                                                            "only our single broker takes")]

MODULE_BROKER_CONFIG = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "3600000",
    "transaction.two.phase.commit.enable": "true",
}


def _api(client: httpx.Client) -> dict[str, Any]:
    response = client.get("/api/transactions")
    assert response.status_code == 200, response.text[:500]
    body: dict[str, Any] = response.json()
    return body


def _hanging_of(client: httpx.Client, txn_id: str) -> list[dict[str, Any]]:
    return [h for h in _api(client)["hanging"] if h["transactional_id"] == txn_id]


def test_every_route_refuses_a_request_without_a_session(console_url: str) -> None:
    with httpx.Client(base_url=console_url, follow_redirects=False, timeout=30) as anonymous:
        for path in ("/transactions", "/transactions/view?id=x", "/transactions/producers?topic=t&partition=0",
                     "/transactions/abort?topic=t&partition=0&producer_id=1&producer_epoch=0&coordinator_epoch=0",
                     "/transactions/complete?transactional_id=x&producer_id=1", "/acls", "/sql"):
            response = anonymous.get(path)
            assert response.status_code in (302, 303, 307), path
            assert response.headers["location"].startswith("/login"), path
        assert anonymous.get("/api/transactions").status_code == 401
        for path, form in (("/transactions/abort", {"topic": "t", "partition": "0", "producer_id": "1",
                                                    "producer_epoch": "0", "coordinator_epoch": "0", "confirm": "producer 1"}),
                           ("/transactions/complete", {"transactional_id": "x", "producer_id": "1", "decision": "commit",
                                                       "confirm": "x"}),
                           ("/sql", {"sql": "SHOW STREAMS;"})):
            refused = anonymous.post(path, data=form)
            assert refused.status_code in (302, 303, 307, 401, 403), path
        assert anonymous.post("/api/sql/query", data={"sql": "SELECT 1;"}).status_code in (401, 403)


def test_an_abort_without_its_confirmation_changes_nothing(console_broker: Any, http_login: Callable[..., httpx.Client],
                                                          unique_name: Callable[[str], str]) -> None:
    bootstrap = console_broker.bootstrap
    topic, txn_id = unique_name("hang-http"), unique_name("hung-http")
    create_topic(bootstrap, topic, partitions=1)
    hang_transaction(bootstrap, topic, txn_id)
    client = http_login("alice")
    wait_until(lambda: bool(_hanging_of(client, txn_id)), 30, "the transaction flagged hanging")
    (held,) = _hanging_of(client, txn_id)
    assert [f["kind"] for f in held["flags"]] == ["open-past-timeout", "lso-held-back"]
    form = {"csrf_token": client.csrf, "topic": topic, "partition": "0",  # type: ignore[attr-defined]
            "producer_id": str(held["producer_id"]), "producer_epoch": str(held["producer_epoch"]),
            "coordinator_epoch": str(held["coordinator_epoch"]), "transactional_id": txn_id}
    for confirm in ({}, {"confirm": ""}, {"confirm": "yes"}, {"confirm": f"producer {held['producer_id']}"}):
        refused = client.post("/transactions/abort", data={**form, **confirm})
        assert refused.status_code == 400
        assert "Not aborted" in refused.text
    assert list_offset(bootstrap, topic, 0, read_committed=True) == 0
    assert _hanging_of(client, txn_id)
    # Completing a transaction that is not prepared, even confirmed, is refused in words.
    unprepared = client.post("/transactions/complete", data={"csrf_token": client.csrf,  # type: ignore[attr-defined]
                                                             "transactional_id": txn_id, "producer_id": str(held["producer_id"]),
                                                             "decision": "commit"})
    assert unprepared.status_code == 400
    assert "Not completed" in unprepared.text
    assert _hanging_of(client, txn_id)

    done = client.post("/transactions/abort", data={**form, "confirm": txn_id})
    assert done.status_code == 200, done.text[-2000:]
    assert f"aborted transaction {txn_id!r}".replace("'", "&#39;") in done.text
    assert _hanging_of(client, txn_id) == []
    assert list_offset(bootstrap, topic, 0, read_committed=True) == list_offset(bootstrap, topic, 0, read_committed=False)
    audit = client.get("/audit").text
    assert "transaction.abort" in audit
    assert "alice" in audit


def test_the_acl_page_shows_what_the_cluster_answers(http_login: Callable[..., httpx.Client]) -> None:
    page = http_login("alice").get("/acls")
    # Our broker without an authorizer answers DescribeAcls with SECURITY_DISABLED, in words.
    assert page.status_code in (200, 502)
    assert ('id="acls"' in page.text) if page.status_code == 200 else ("SECURITY_DISABLED" in page.text)


# --- in the browser ---------------------------------------------------------------------------------


def _wait(browser: Any, condition: Callable[[Any], Any], what: str) -> Any:
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(browser, BROWSER_WAIT_S * 2).until(condition)
    except TimeoutException:
        raise AssertionError(f"the page never showed {what}") from None


def _element(browser: Any, element_id: str) -> Any:
    """The element with ``element_id``, or a failure that says what the page showed instead."""
    from selenium.webdriver.common.by import By

    found = browser.find_elements(By.ID, element_id)
    if not found:
        errors = [e.text for e in browser.find_elements(By.ID, "error")]
        raise AssertionError(f"{browser.current_url} has no #{element_id}; its error: {errors}")
    return found[0]


def _row(browser: Any, table_id: str, txn_id: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    found: list[Any] = browser.find_elements(By.CSS_SELECTOR, f'#{table_id} tr[data-txn="{txn_id}"]')
    return found


def _in_row(browser: Any, table_id: str, txn_id: str, use: Callable[[Any], Any]) -> Any:
    """``use(row)`` on the transaction's one row, found again when the page's live refresh
    replaced it in between (a stale element); returns what ``use`` returned."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    def attempt(b: Any) -> Any:
        (row,) = _row(b, table_id, txn_id)
        return (use(row),)

    (result,) = WebDriverWait(browser, BROWSER_WAIT_S, ignored_exceptions=(StaleElementReferenceException,)).until(attempt)
    return result


def test_an_open_transaction_appears_and_goes_on_commit(console_broker: Any, console_url: str,
                                                       browser_login: Callable[..., Any],
                                                       screenshot: Callable[[str], Path],
                                                       unique_name: Callable[[str], str]) -> None:
    bootstrap = console_broker.bootstrap
    topic, txn_id = unique_name("open"), unique_name("open-txn")
    create_topic(bootstrap, topic, partitions=2)
    browser = browser_login("alice")
    browser.get(f"{console_url}/transactions")
    assert not _row(browser, "open-transactions", txn_id)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    producer.init_transactions(CLIENT_TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, b"a", partition=0)
    producer.produce(topic, b"b", partition=1)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    _wait(browser, lambda b: _row(b, "open-transactions", txn_id), "the open transaction (live refresh)")
    state, text = _in_row(browser, "open-transactions", txn_id, lambda row: (row.get_attribute("data-state"), row.text))
    assert state == "Ongoing"
    assert f"{topic}[0]" in text
    assert f"{topic}[1]" in text
    screenshot("transactions-open")
    producer.commit_transaction(CLIENT_TIMEOUT_S)
    _wait(browser, lambda b: not _row(b, "open-transactions", txn_id), "the committed transaction leave the open list")
    (done,) = _row(browser, "transactions", txn_id)
    assert done.get_attribute("data-state") == "CompleteCommit"
    browser.get(f"{console_url}/transactions/view?id={txn_id}")
    assert _element(browser, "txn-state").text.startswith("CompleteCommit")
    screenshot("transaction-page")
    browser.get(f"{console_url}/transactions/producers?topic={topic}&partition=0")
    assert "none" in _element(browser, "producers").text   # no open transaction any more
    screenshot("transaction-producers")


def test_a_hanging_transaction_is_flagged_and_aborted_from_the_page(console_broker: Any, console_url: str,
                                                                   browser_login: Callable[..., Any],
                                                                   screenshot: Callable[[str], Path],
                                                                   unique_name: Callable[[str], str]) -> None:
    from selenium.webdriver.common.by import By

    bootstrap = console_broker.bootstrap
    # Short names: this page is the README's picture.
    suffix = uuid.uuid4().hex[:6]
    topic, txn_id = f"orders-{suffix}", f"payments-writer-{suffix}"
    create_topic(bootstrap, topic, partitions=1)
    hang_transaction(bootstrap, topic, txn_id)
    # A read_committed reader is held at the hanging transaction's first record.
    assert list_offset(bootstrap, topic, 0, read_committed=True) == 0
    browser = browser_login("alice")
    browser.get(f"{console_url}/transactions")
    _wait(browser, lambda b: _row(b, "hanging", txn_id), "the hanging transaction")
    kinds, text = _in_row(browser, "hanging", txn_id, lambda row: (
        [f.get_attribute("data-kind") for f in row.find_elements(By.CSS_SELECTOR, ".flag")], row.text))
    assert kinds == ["open-past-timeout", "lso-held-back"]
    assert "past its transaction timeout" in text
    assert "read_committed consumers cannot read past it" in text
    screenshot("transactions-hanging")   # docs/images/console-transactions.png is a copy of one

    _in_row(browser, "hanging", txn_id, lambda row: row.find_element(By.CSS_SELECTOR, "a.abort-link").click())
    _wait(browser, lambda b: b.find_elements(By.ID, "abort-form"), "the abort confirmation")
    screenshot("transaction-abort-confirm")
    browser.find_element(By.ID, "confirm").send_keys(txn_id)
    browser.find_element(By.ID, "abort-submit").click()
    notice = _wait(browser, lambda b: b.find_elements(By.ID, "notice"), "the abort's notice")
    assert f"aborted transaction '{txn_id}'" in notice[0].text
    assert not _row(browser, "hanging", txn_id)
    screenshot("transactions-aborted")
    assert values_of(read_to_end(bootstrap, topic, 1, isolation=READ_COMMITTED)) == {0: [b"after"]}


def test_a_prepared_transaction_is_completed_with_confirmation(console_broker: Any, console_url: str,
                                                              browser_login: Callable[..., Any],
                                                              screenshot: Callable[[str], Path],
                                                              unique_name: Callable[[str], str]) -> None:
    from selenium.webdriver.common.by import By

    bootstrap = console_broker.bootstrap
    topic, txn_id = unique_name("prepared"), f"prepared-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=1)
    app = OurProducer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                       "transaction.two.phase.commit.enable": True})
    try:
        app.init_transactions(CLIENT_TIMEOUT_S)
        app.begin_transaction()
        app.produce(topic, b"decided-later", partition=0)
        app.prepare_transaction(CLIENT_TIMEOUT_S)
        browser = browser_login("alice")
        browser.get(f"{console_url}/transactions")
        _wait(browser, lambda b: _row(b, "open-transactions", txn_id), "the prepared transaction")
        text = _in_row(browser, "open-transactions", txn_id, lambda row: row.text)
        assert "prepared (2PC)" in text
        assert "none (2PC)" in text
        assert not _row(browser, "hanging", txn_id)
        screenshot("transactions-prepared")
        _in_row(browser, "open-transactions", txn_id,
                lambda row: row.find_element(By.CSS_SELECTOR, "a.complete-link").click())
        _wait(browser, lambda b: b.find_elements(By.ID, "complete-form"), "the completion confirmation")
        browser.find_element(By.ID, "decision-commit").click()
        browser.find_element(By.ID, "complete-submit").click()   # not yet confirmed: refused
        _wait(browser, lambda b: b.find_elements(By.ID, "error"), "the refusal")
        assert "type" in browser.find_element(By.ID, "error").text
        assert list_offset(bootstrap, topic, 0, read_committed=True) == 0
        browser.find_element(By.ID, "decision-commit").click()
        browser.find_element(By.ID, "confirm").send_keys(txn_id)
        screenshot("transaction-complete-confirm")
        browser.find_element(By.ID, "complete-submit").click()
        notice = _wait(browser, lambda b: b.find_elements(By.ID, "notice"), "the completion's notice")
        assert f"committed the prepared transaction '{txn_id}'" in notice[0].text
        assert values_of(read_to_end(bootstrap, topic, 1, isolation=READ_COMMITTED)) == {0: [b"decided-later"]}
    finally:
        app.close(1)


def test_the_sql_page_without_a_sql_server_says_so(http_login: Callable[..., httpx.Client]) -> None:
    """This module's console has no --sql-server: the page says how to give one, and nothing is
    sent anywhere (the SQL server itself is exercised in tests/console/test_sql_console.py)."""
    client = http_login("alice")
    page = client.get("/sql")
    assert page.status_code == 200
    assert "start the console with --sql-server URL" in page.text
    csrf = client.csrf  # type: ignore[attr-defined]
    statement = client.post("/sql", data={"csrf_token": csrf, "sql": "SHOW STREAMS;"})
    assert statement.status_code == 503
    query = client.post("/api/sql/query", data={"sql": "SELECT * FROM S EMIT CHANGES;"}, headers={"X-CSRF-Token": csrf})
    assert query.status_code == 503
    assert query.json() == {"error": "No SQL server: start the console with --sql-server URL"}


def test_only_a_hanging_transaction_is_aborted_even_when_confirmed(http_login: Callable[..., httpx.Client]) -> None:
    """A producer no coordinator knows and no partition shows: the confirmation page names it
    ``producer N`` and explains the marker; the confirmed POST is refused because nothing hangs."""
    client = http_login("alice")
    spec = {"topic": "no-such-topic", "partition": "0", "producer_id": "424242", "producer_epoch": "0",
            "coordinator_epoch": "-1"}
    confirm = client.get("/transactions/abort", params=spec)
    assert confirm.status_code == 200
    assert "Type <b>producer 424242</b> to confirm" in confirm.text
    assert "writes the ABORT marker" in confirm.text
    refused = client.post("/transactions/abort", data={**spec, "confirm": "producer 424242",
                                                       "csrf_token": client.csrf})  # type: ignore[attr-defined]
    assert refused.status_code == 409
    assert "holds no hanging transaction" in refused.text
    malformed = client.post("/transactions/abort", data={**spec, "partition": "zero", "confirm": "producer 424242",
                                                         "csrf_token": client.csrf})  # type: ignore[attr-defined]
    assert malformed.status_code == 400
    assert "partition must be a whole number" in malformed.text


def test_a_transactional_id_with_markup_is_shown_as_text(console_broker: Any, http_login: Callable[..., httpx.Client],
                                                         unique_name: Callable[[str], str]) -> None:
    bootstrap = console_broker.bootstrap
    topic, txn_id = unique_name("markup"), f"<script>alert(1)</script><b>{uuid.uuid4().hex[:6]}</b>"
    create_topic(bootstrap, topic, partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    producer.init_transactions(CLIENT_TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, b"x", partition=0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    client = http_login("alice")
    try:
        page = client.get("/transactions").text
        assert txn_id not in page
        assert txn_id.replace("<", "&lt;").replace(">", "&gt;") in page
        view = client.get("/transactions/view", params={"id": txn_id})
        assert view.status_code == 200
        assert txn_id not in view.text
    finally:
        producer.commit_transaction(CLIENT_TIMEOUT_S)
