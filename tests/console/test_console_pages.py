"""The console's pages over HTTP (httpx, no browser) against a real broker and a real
``oncestream console``: markup in data is shown escaped, topic configs are altered and a topic
is deleted only when confirmed, groups of both protocols are listed with their type."""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from tests.console.conftest import HTTP_TIMEOUT_S, USERS, ConsoleClient, csrf_of, start_console, stop_console
from tests.support.brokers import NO_INITIAL_REBALANCE_DELAY

if TYPE_CHECKING:
    from tests.support.certs import Pki

MODULE_BROKER_CONFIG = NO_INITIAL_REBALANCE_DELAY
WAIT_S = 20.0
MARKUP = "<b>x</b><script>alert(1)</script>"
ESCAPED = "&lt;b&gt;x&lt;/b&gt;&lt;script&gt;alert(1)&lt;/script&gt;"


def _create(client: ConsoleClient, name: str, partitions: int = 1, configs: str = "") -> None:
    response = client.post("/topics", data={"name": name, "partitions": str(partitions), "configs": configs,
                                            "csrf_token": client.csrf})
    assert response.status_code == 303, response.text


def _joined(client: ConsoleClient, consumer: Any, group: str) -> dict[str, Any]:
    """Poll ``consumer`` until the console's /api/groups/ID shows it as a member with partitions
    (at most WAIT_S); the last description."""
    deadline = time.monotonic() + WAIT_S
    detail: dict[str, Any] = {}
    while time.monotonic() < deadline:
        consumer.poll(0.2)
        response = client.get(f"/api/groups/{urllib.parse.quote(group, safe='')}")
        detail = response.json() if response.status_code == 200 else {}
        if detail.get("members") and detail["members"][0]["assignment"]:
            break
    return detail


def test_markup_in_a_message_and_a_header_is_shown_escaped(http_login: Callable[..., ConsoleClient],
                                                           unique_name: Callable[[str], str]) -> None:
    alice = http_login("alice")
    name = unique_name("markup")
    _create(alice, name)
    response = alice.post(f"/topics/{name}/messages/produce", data={
        "key": MARKUP, "value": MARKUP, "headers": f"h={MARKUP}", "csrf_token": alice.csrf})
    assert response.status_code == 303, response.text
    for fmt in ("text", "json"):
        page = alice.get(f"/topics/{name}/messages", params={"partition": "0", "mode": "offset", "offset": "0",
                                                               "format": fmt})
        assert page.status_code == 200
        assert page.text.count(ESCAPED) == 3  # key, value, header
        assert "<script>alert" not in page.text
        assert "<b>x</b>" not in page.text
    api = alice.get(f"/api/topics/{name}/messages", params={"mode": "offset", "offset": "0"}).json()
    assert [(r["key"], r["value"], r["headers"]) for r in api["records"]] == [(MARKUP, MARKUP, [["h", MARKUP]])]


def test_a_group_id_with_markup_is_shown_escaped(http_login: Callable[..., ConsoleClient], console_broker: Any,
                                                 unique_name: Callable[[str], str]) -> None:
    from confluent_kafka import Consumer, TopicPartition

    alice = http_login("alice")
    topic = unique_name("grouped")
    _create(alice, topic)
    group = f"<i>g</i>/{unique_name('group')}"
    consumer = Consumer({"bootstrap.servers": console_broker.bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        consumer.close()
    listing = alice.get("/groups").text
    assert "&lt;i&gt;g&lt;/i&gt;/" in listing
    assert "<i>g</i>" not in listing
    assert f'href="/groups/{urllib.parse.quote(group, safe="")}"' in listing
    page = alice.get(f"/groups/{urllib.parse.quote(group, safe='')}")
    assert page.status_code == 200, page.text
    assert "<i>g</i>" not in page.text
    assert f'data-topic="{topic}"' in page.text


def test_alter_topic_configs_and_delete_only_when_confirmed(http_login: Callable[..., ConsoleClient],
                                                            unique_name: Callable[[str], str]) -> None:
    alice = http_login("alice")
    name = unique_name("configs")
    _create(alice, name, partitions=3, configs="retention.ms=3600000")
    detail = alice.get(f"/api/topics/{name}").json()
    assert [p["partition"] for p in detail["partitions"]] == [0, 1, 2]
    assert detail["configs"]["retention.ms"] == "3600000"

    response = alice.post(f"/topics/{name}/configs", data={"set": "cleanup.policy=compact\nretention.ms=7200000",
                                                          "csrf_token": alice.csrf})
    assert response.status_code == 303, response.text
    configs = alice.get(f"/api/topics/{name}").json()["configs"]
    assert (configs["cleanup.policy"], configs["retention.ms"]) == ("compact", "7200000")
    response = alice.post(f"/topics/{name}/configs", data={"reset": "retention.ms", "csrf_token": alice.csrf})
    assert response.status_code == 303, response.text
    assert alice.get(f"/api/topics/{name}").json()["configs"]["retention.ms"] != "7200000"
    refused = alice.post(f"/topics/{name}/configs", data={"set": "no.such.config=1", "csrf_token": alice.csrf})
    assert refused.status_code == 400
    assert "Configs not changed" in refused.text

    refused = alice.post(f"/topics/{name}/delete", data={"confirm": "wrong", "csrf_token": alice.csrf})
    assert refused.status_code == 400
    assert alice.get(f"/api/topics/{name}").status_code == 200
    response = alice.post(f"/topics/{name}/delete", data={"confirm": name, "csrf_token": alice.csrf})
    assert response.status_code == 303
    deadline = time.monotonic() + WAIT_S
    while alice.get(f"/api/topics/{name}").status_code != 404 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert alice.get(f"/api/topics/{name}").status_code == 404
    actions = [(e["action"], e["outcome"]) for e in alice.get("/api/audit").json() if e["target"] == name]
    assert actions == [("topic.delete", "ok"), ("topic.alter-configs", "failed"), ("topic.alter-configs", "ok"),
                       ("topic.alter-configs", "ok"), ("topic.create", "ok")]


def test_groups_of_the_consumer_protocol_are_listed_with_their_type(
        http_login: Callable[..., ConsoleClient], console_broker: Any, unique_name: Callable[[str], str]) -> None:
    from oncestream.client import Consumer

    alice = http_login("alice")
    topic, group = unique_name("kip848"), unique_name("kip848-group")
    _create(alice, topic, partitions=2)
    consumer = Consumer({"bootstrap.servers": console_broker.bootstrap, "group.id": group,
                         "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        detail = _joined(alice, consumer, group)
        assert detail.get("type") == "consumer", detail
        assert sorted(tuple(a) for a in detail["members"][0]["assignment"]) == [(topic, 0), (topic, 1)]
        listed = {g["group_id"]: g["type"] for g in alice.get("/api/groups").json()["groups"]}
        assert listed[group] == "consumer"
    finally:
        consumer.close()


def test_the_console_serves_https_with_a_secure_session_cookie(console_broker: Any, console_users_file: Path,
                                                               pki: Pki, tmp_path: Path) -> None:
    server = start_console(console_broker.bootstrap, console_users_file, tmp_path,
                           "--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key))
    try:
        assert server.url.startswith("https://127.0.0.1:")
        with httpx.Client(base_url=server.url, timeout=HTTP_TIMEOUT_S, verify=str(pki.ca)) as client:
            token = csrf_of(client.get("/login").text)
            response = client.post("/login", data={"username": "alice", "password": USERS["alice"],
                                                   "csrf_token": token})
            assert response.status_code == 303, response.text
            cookie = next(v for k, v in response.headers.multi_items()
                          if k == "set-cookie" and v.startswith("oncestream_console_session="))
            assert all(flag in cookie.lower() for flag in ("secure", "httponly", "samesite=strict")), cookie
            assert client.get("/api/overview").json()["brokers"]
        with pytest.raises(httpx.TransportError):  # no plaintext on the TLS port
            httpx.get(server.url.replace("https://", "http://") + "/login", timeout=HTTP_TIMEOUT_S)
    finally:
        stop_console(server.process)


def test_a_share_group_is_described_with_its_start_offsets(
        http_login: Callable[..., ConsoleClient], console_broker: Any, unique_name: Callable[[str], str]) -> None:
    from confluent_kafka import Producer, ShareConsumer

    alice = http_login("alice")
    topic, group = unique_name("share"), unique_name("share-group")
    _create(alice, topic)
    consumer = ShareConsumer({"bootstrap.servers": console_broker.bootstrap, "group.id": group})
    try:
        consumer.subscribe([topic])
        detail = _joined(alice, consumer, group)  # joins first: share.auto.offset.reset is latest
        assert detail.get("type") == "share", detail
        listed = {g["group_id"]: g["type"] for g in alice.get("/api/groups").json()["groups"]}
        assert listed.get(group) == "share", listed  # ListGroups lists share groups (KIP-932)
        producer = Producer({"bootstrap.servers": console_broker.bootstrap})
        for n in range(5):
            producer.produce(topic, value=f"s{n}".encode())
        producer.flush(WAIT_S)
        got = 0
        deadline = time.monotonic() + WAIT_S
        while got < 5 and time.monotonic() < deadline:
            got += sum(1 for m in consumer.poll(0.5) if m.error() is None)
        assert got == 5
        consumer.commit_sync()
        detail = alice.get(f"/api/groups/{group}").json()
        assert [m["assignment"] for m in detail["members"]] == [[[topic, 0]]]
        assert [(p["topic"], p["partition"]) for p in detail["partitions"]] == [(topic, 0)]
        opened = alice.get("/groups", params={"id": group})  # the list's "open a group by id"
        assert opened.headers["location"] == f"/groups/{group}"
        page = alice.get(f"/groups/{group}")
        assert page.status_code == 200
        assert "Start offset" in page.text
        assert 'id="reset-offsets"' in page.text
        refused = alice.post(f"/groups/{group}/reset-offsets", data={"target": "earliest", "csrf_token": alice.csrf})
        assert "Offsets not reset" in refused.text  # a member is in the group: NON_EMPTY_GROUP
    finally:
        consumer.close()
    # Empty now: its start offset goes back to the beginning (AlterShareGroupOffsets).
    deadline = time.monotonic() + WAIT_S
    while True:
        reset = alice.post(f"/groups/{group}/reset-offsets", data={"target": "earliest", "csrf_token": alice.csrf})
        if "Offsets not reset" not in reset.text:
            break
        assert time.monotonic() < deadline, reset.text  # the member's leave may take a heartbeat
        time.sleep(0.5)
    detail = alice.get(f"/api/groups/{group}").json()
    assert [(p["topic"], p["partition"], p["committed"]) for p in detail["partitions"]] == [(topic, 0, 0)]


def test_browse_from_a_time_and_the_newest_n(http_login: Callable[..., ConsoleClient], console_broker: Any,
                                             unique_name: Callable[[str], str]) -> None:
    import datetime

    from confluent_kafka import Producer

    alice = http_login("alice")
    name = unique_name("times")
    _create(alice, name)
    t0 = (int(time.time()) - 600) * 1000  # whole seconds: the ISO form below names the same instant
    producer = Producer({"bootstrap.servers": console_broker.bootstrap})
    for n in range(4):
        producer.produce(name, value=f"t{n}".encode(), timestamp=t0 + n * 1000)
    producer.flush(WAIT_S)

    def values(**params: str) -> list[str]:
        response = alice.get(f"/api/topics/{name}/messages", params={"partition": "0", **params})
        assert response.status_code == 200, response.text
        return [r["value"] for r in response.json()["records"]]

    assert values(mode="time", time=str(t0 + 1500)) == ["t2", "t3"]
    iso = datetime.datetime.fromtimestamp((t0 + 1000) / 1000, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    assert values(mode="time", time=iso) == ["t1", "t2", "t3"]
    assert values(mode="time", time=str(t0 + 60_000)) == []  # after the last record: nothing yet
    assert values(mode="newest", count="2") == ["t2", "t3"]
    assert values(mode="offset", offset="1", count="2") == ["t1", "t2"]
    bad = alice.get(f"/topics/{name}/messages", params={"mode": "time", "time": "yesterday"})
    assert bad.status_code == 400
    assert "from time: expected epoch ms" in bad.text


def test_the_topics_list_shows_a_message_rate_from_its_second_look(
        http_login: Callable[..., ConsoleClient], unique_name: Callable[[str], str]) -> None:
    alice = http_login("alice")
    name = unique_name("rate")
    _create(alice, name)

    def row() -> dict[str, Any]:
        return next(t for t in alice.get("/api/topics").json() if t["name"] == name)

    assert row()["rate_per_s"] is None
    for n in range(3):
        response = alice.post(f"/topics/{name}/messages/produce", data={"value": f"v{n}", "csrf_token": alice.csrf})
        assert response.status_code == 303
    second = row()
    assert second["end_offsets"] == 3
    assert second["rate_per_s"] > 0
    assert 'class="num rate"' in alice.get("/topics").text
