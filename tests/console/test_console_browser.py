"""The console in headless Chromium against a real broker and a real ``oncestream console``:
log in, the overview, topics (create, produce, browse), each page's screenshot under
test-artifacts/console/."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from tests.console.conftest import BROWSER_WAIT_S, page_replaced
from tests.support.brokers import NO_INITIAL_REBALANCE_DELAY

MODULE_BROKER_CONFIG = NO_INITIAL_REBALANCE_DELAY


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


def _wait(browser: WebDriver, css: str) -> Any:
    return WebDriverWait(browser, BROWSER_WAIT_S).until(ec.presence_of_element_located((By.CSS_SELECTOR, css)))


def _submit(browser: WebDriver, button_id: str) -> None:
    """Click a form's button and wait until the next page replaced this one (else a wait for an
    element could find it on the old page)."""
    old_page = browser.find_element(By.TAG_NAME, "html")
    browser.find_element(By.ID, button_id).click()
    WebDriverWait(browser, BROWSER_WAIT_S).until(page_replaced(old_page))


def _fill(browser: WebDriver, element_id: str, text: str) -> None:
    field = browser.find_element(By.ID, element_id)
    field.clear()
    field.send_keys(text)


def _select(browser: WebDriver, element_id: str, value: str) -> None:
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element(By.ID, element_id)).select_by_value(value)


def test_create_a_topic_produce_and_browse_as_text_json_and_hex(
        browser_login: Callable[..., WebDriver], console_url: str, unique_name: Callable[[str], str],
        screenshot: Callable[[str], Path]) -> None:
    browser = browser_login("alice")
    name = unique_name("browse")
    browser.get(f"{console_url}/topics")
    screenshot("topics")
    _fill(browser, "new-topic-name", name)
    _fill(browser, "new-topic-partitions", "2")
    _submit(browser, "create-topic-submit")
    _wait(browser, "#partitions tbody tr")
    assert browser.find_element(By.ID, "topic-name").text == name
    assert len(browser.find_elements(By.CSS_SELECTOR, "#partitions tbody tr")) == 2
    screenshot("topic")

    for key, value, headers in (("k1", '{"n": 1, "s": "x"}', "trace=abc"), ("k2", "plain text", "")):
        browser.get(f"{console_url}/topics/{name}")
        _fill(browser, "produce-partition", "1")
        _fill(browser, "produce-key", key)
        _fill(browser, "produce-value", value)
        _fill(browser, "produce-headers", headers)
        _submit(browser, "produce-submit")
        _wait(browser, "#produced")
    rows = browser.find_elements(By.CSS_SELECTOR, "#records tr.record")
    assert [r.get_attribute("data-offset") for r in rows] == ["1"]  # the page opens at the produced record

    browser.get(f"{console_url}/topics/{name}/messages?partition=1&mode=offset&offset=0&format=json")
    rows = browser.find_elements(By.CSS_SELECTOR, "#records tr.record")
    assert [r.find_element(By.CSS_SELECTOR, "td.key").text for r in rows] == ["k1", "k2"]
    assert rows[0].find_element(By.CSS_SELECTOR, "td.value").text == '{\n  "n": 1,\n  "s": "x"\n}'
    assert "not JSON" in rows[1].find_element(By.CSS_SELECTOR, "td.value").text
    assert rows[0].find_element(By.CSS_SELECTOR, "td.headers").text == "trace: abc"
    screenshot("messages-json")

    _select(browser, "browse-format", "hex")
    _submit(browser, "browse-submit")
    _wait(browser, "#records tr.record")
    rows = browser.find_elements(By.CSS_SELECTOR, "#records tr.record")
    assert rows[1].find_element(By.CSS_SELECTOR, "td.value").text == b"plain text".hex(" ")
    assert rows[1].find_element(By.CSS_SELECTOR, "td.key").text == "6b 32"

    _select(browser, "browse-format", "text")
    _select(browser, "browse-mode", "newest")
    _fill(browser, "browse-count", "1")
    _submit(browser, "browse-submit")
    _wait(browser, "#records tr.record")
    rows = browser.find_elements(By.CSS_SELECTOR, "#records tr.record")
    assert [r.find_element(By.CSS_SELECTOR, "td.value").text for r in rows] == ["plain text"]
    screenshot("messages-text")


def test_read_uncommitted_marks_the_records_of_an_aborted_transaction(
        browser_login: Callable[..., WebDriver], console_url: str, console_broker: Any,
        unique_name: Callable[[str], str], screenshot: Callable[[str], Path]) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    name = unique_name("aborted")
    admin = AdminClient({"bootstrap.servers": console_broker.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=BROWSER_WAIT_S)
    plain = Producer({"bootstrap.servers": console_broker.bootstrap})
    plain.produce(name, value=b"before")
    plain.flush(BROWSER_WAIT_S)
    txn = Producer({"bootstrap.servers": console_broker.bootstrap, "transactional.id": f"txn-{name}"})
    txn.init_transactions(BROWSER_WAIT_S)
    txn.begin_transaction()
    txn.produce(name, value=b"aborted-1")
    txn.produce(name, value=b"aborted-2")
    txn.flush(BROWSER_WAIT_S)
    txn.abort_transaction(BROWSER_WAIT_S)
    plain.produce(name, value=b"after")
    plain.flush(BROWSER_WAIT_S)

    browser = browser_login("alice")
    browser.get(f"{console_url}/topics/{name}/messages?partition=0&mode=offset&offset=0&isolation=read_uncommitted")
    rows = _wait(browser, "#records") and browser.find_elements(By.CSS_SELECTOR, "#records tr.record")
    seen = [(r.find_element(By.CSS_SELECTOR, "td.value").text, r.get_attribute("data-mark")) for r in rows]
    assert seen == [("before", "committed"), ("aborted-1", "aborted"), ("aborted-2", "aborted"),
                    ("after", "committed")]
    assert "aborted" in rows[1].find_element(By.CSS_SELECTOR, "td.marker").text
    screenshot("messages-read-uncommitted")

    browser.get(f"{console_url}/topics/{name}/messages?partition=0&mode=offset&offset=0&isolation=read_committed")
    rows = _wait(browser, "#records") and browser.find_elements(By.CSS_SELECTOR, "#records tr.record")
    assert [r.find_element(By.CSS_SELECTOR, "td.value").text for r in rows] == ["before", "after"]


def _consume(consumer: Any, count: int) -> None:
    """Read ``count`` records with a confluent-kafka consumer (bounded) and commit them."""
    import time

    seen = 0
    deadline = time.monotonic() + BROWSER_WAIT_S
    while seen < count and time.monotonic() < deadline:
        for message in consumer.consume(count - seen, timeout=0.5):
            if message.error() is None:
                seen += 1
    assert seen == count, f"read {seen} of {count} records"
    consumer.commit(asynchronous=False)


def _text_becomes(browser: WebDriver, element_id: str, text: str) -> None:
    # console.js replaces the live part of the page while we look: a stale element is looked up again.
    WebDriverWait(browser, BROWSER_WAIT_S, ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda b: b.find_element(By.ID, element_id).text.strip() == text,
        message=f"#{element_id} never became {text!r}")


def test_a_groups_lag_falls_as_its_consumer_reads_and_an_empty_group_is_reset(
        browser_login: Callable[..., WebDriver], console_url: str, console_broker: Any,
        unique_name: Callable[[str], str], screenshot: Callable[[str], Path]) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic, group = unique_name("lag"), unique_name("group")
    admin = AdminClient({"bootstrap.servers": console_broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=BROWSER_WAIT_S)
    producer = Producer({"bootstrap.servers": console_broker.bootstrap})
    for n in range(30):
        producer.produce(topic, value=f"m{n}".encode())
    producer.flush(BROWSER_WAIT_S)
    conf = {"bootstrap.servers": console_broker.bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest"}
    consumer = Consumer(conf)
    consumer.subscribe([topic])
    _consume(consumer, 10)

    browser = browser_login("alice")
    browser.get(f"{console_url}/groups")
    _wait(browser, f'#groups tr[data-group="{group}"]')
    browser.get(f"{console_url}/groups/{group}")
    _text_becomes(browser, "total-lag", "20")
    WebDriverWait(browser, BROWSER_WAIT_S, ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda b: len(b.find_elements(By.CSS_SELECTOR, "#members tbody tr code")) == 1)  # the consumer is a member
    # While a member is in the group, the broker refuses a reset and the page says why.
    _submit(browser, "reset-submit")
    _wait(browser, "#error")
    assert "not reset" in browser.find_element(By.ID, "error").text
    browser.get(f"{console_url}/groups/{group}")

    _consume(consumer, 20)
    _text_becomes(browser, "total-lag", "0")  # console.js refreshes the page's live part
    samples = WebDriverWait(browser, BROWSER_WAIT_S, ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda b: b.find_element(By.ID, "lag-sparkline").get_attribute("aria-label"))
    assert samples is not None
    assert int(samples.split(", ")[1].split()[0]) >= 2
    screenshot("group")

    consumer.close()  # the group is empty now
    browser.get(f"{console_url}/groups/{group}")
    _text_becomes(browser, "group-state", "Empty")
    _select(browser, "reset-target", "offset")
    _fill(browser, "reset-offset", "5")
    _submit(browser, "reset-submit")
    _wait(browser, "#notice")
    _text_becomes(browser, "total-lag", "25")
    WebDriverWait(browser, BROWSER_WAIT_S, ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda b: b.find_element(By.CSS_SELECTOR, "#lag td.committed").text == "5")
    _select(browser, "reset-target", "earliest")
    _submit(browser, "reset-submit")
    _wait(browser, "#notice")
    _text_becomes(browser, "total-lag", "30")

    browser.get(f"{console_url}/audit")
    _wait(browser, "#audit")
    rows = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#audit tbody tr") if group in r.text]
    assert len(rows) == 3, (browser.current_url, browser.page_source[:4000])
    assert all("alice" in r and "group.reset-offsets" in r for r in rows), rows
    assert ["failed" in r for r in rows] == [False, False, True]  # newest first
    screenshot("audit")
