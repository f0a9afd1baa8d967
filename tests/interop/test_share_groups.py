"""KIP-932 share groups with librdkafka's ShareConsumer (confluent-kafka 2.16) against a real
broker process: records shared by members one at a time, acquisition-lock expiry after a member
is SIGKILLed, RELEASE / REJECT, the delivery count limit (the broker's, and a group's own
``share.delivery.count.limit``), a group's own ``share.session.timeout.ms`` ending a SIGKILLed
member's session long before the broker's session and lock would, the group configs' bounds, a
broker SIGKILL mid-stream, and read_committed share groups over aborted transactions.

Each test ends its "nothing else arrives" checks with a sentinel record produced last: with no
record locked by another member, the share-partition hands records out in offset order, so once
the sentinel is seen every record the group could still get before it has been delivered (no
sleep decides the absence of a record).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import AcknowledgeType, KafkaException, Message, Producer, ShareConsumer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, ResourceType

from tests.support.brokers import BrokerProcess
from tests.support.clients import CLIENT_TIMEOUT_S, admin_client, create_topic, unique_topic
from tests.support.groups import unique_group
from tests.support.narrow import present

pytestmark = pytest.mark.interop

WAIT_S = 60.0
SENTINEL = b"sentinel"


@pytest.fixture
def start_broker(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    started: list[BrokerProcess] = []

    def start(**config: str) -> BrokerProcess:
        broker = BrokerProcess(tmp_path / f"data{len(started)}", config=dict(config),
                               log_dir=tmp_path / f"logs{len(started)}")
        started.append(broker)
        broker.start()
        return broker

    try:
        yield start
    finally:
        for broker in started:
            broker.stop()


def set_group_configs(bootstrap: str, group_id: str, **configs: str) -> None:
    """Share-group configs through IncrementalAlterConfigs on the GROUP resource."""
    resource = ConfigResource(ResourceType.GROUP, group_id, incremental_configs=[
        ConfigEntry(name.replace("_", "."), value, incremental_operation=AlterConfigOpType.SET)
        for name, value in configs.items()])
    admin = admin_client(bootstrap)  # kept alive until the futures are done
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=CLIENT_TIMEOUT_S)


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0


def share_consumer(bootstrap: str, group_id: str, topic: str, *, explicit: bool = False) -> ShareConsumer:
    conf = {"bootstrap.servers": bootstrap, "group.id": group_id}
    if explicit:
        conf["share.acknowledgement.mode"] = "explicit"
    consumer = ShareConsumer(conf)
    consumer.subscribe([topic])
    return consumer


def offset_of(message: Message) -> int:
    return present(message.offset(), "record offset")


def count_of(message: Message) -> int:
    return present(message.delivery_count(), "delivery count")


def value_of(message: Message) -> bytes:
    return present(message.value(), "record value")


def poll_ok(consumer: ShareConsumer, timeout_s: float = 0.5) -> list[Message]:
    messages = consumer.poll(timeout_s)
    errors = [m.error() for m in messages if m.error() is not None]
    assert not errors, errors
    return list(messages)


# A broker whose share sessions and record locks last ten minutes, and whose bounds let a group
# choose seconds (group.share.min.* / max.*); a group of such seconds (share.*.ms group configs).
SLOW_BROKER_TIMING = {
    "group.share.session.timeout.ms": "600000", "group.share.max.session.timeout.ms": "600000",
    "group.share.min.session.timeout.ms": "3000", "group.share.min.heartbeat.interval.ms": "500",
    "group.share.record.lock.duration.ms": "600000", "group.share.max.record.lock.duration.ms": "600000",
}
FAST_GROUP_TIMING = {"share_session_timeout_ms": "4000", "share_heartbeat_interval_ms": "1000"}


def group_config_values(bootstrap: str, group_id: str, names: Iterable[str]) -> dict[str, str]:
    """DescribeConfigs of the GROUP resource (librdkafka's Admin): the values of ``names``
    (spelt with underscores, as ``set_group_configs`` takes them) that the group set itself."""
    admin = admin_client(bootstrap)
    (future,) = admin.describe_configs([ConfigResource(ResourceType.GROUP, group_id)]).values()
    entries = future.result(timeout=CLIENT_TIMEOUT_S)
    wanted = {name.replace("_", "."): name for name in names}
    return {wanted[e.name]: e.value for e in entries.values()
            if e.name in wanted and ConfigSource(e.source) == ConfigSource.GROUP_CONFIG}


def new_group(bootstrap: str, prefix: str, **configs: str) -> str:
    group_id = unique_group(prefix)
    set_group_configs(bootstrap, group_id, share_auto_offset_reset="earliest", **configs)
    return group_id


def test_three_consumers_share_one_partition(start_broker) -> None:
    """Every record of one partition reaches exactly one of three members once (none is held by
    two at once: the lock outlives the test), and the acknowledgements are durable: after a
    restart a new member gets only a record produced afterwards."""
    broker = start_broker()
    topic = unique_topic("share3")
    create_topic(broker.bootstrap, topic)
    group_id = new_group(broker.bootstrap, "share3")
    count = 300
    consumers = [share_consumer(broker.bootstrap, group_id, topic) for _ in range(3)]
    received: list[tuple[int, int, int]] = []  # (offset, member, delivery count)
    try:
        for round_ in range(3):  # in rounds, so later rounds find members already fetching
            produce(broker.bootstrap, topic, [f"r{round_}-{i}".encode() for i in range(count // 3)])
            deadline = time.monotonic() + WAIT_S
            while len(received) < (round_ + 1) * (count // 3) and time.monotonic() < deadline:
                for index, consumer in enumerate(consumers):
                    received += [(offset_of(m), index, count_of(m)) for m in poll_ok(consumer, 0.2)]
    finally:
        for consumer in consumers:
            # Implicit mode accepts a poll's records at the next poll or commit; librdkafka
            # 2.16's close() sends none of them (they would be released and delivered again).
            consumer.commit_sync()
            consumer.close()
    per_offset = Counter(offset for offset, _, _ in received)
    assert sorted(per_offset) == list(range(count))
    assert set(per_offset.values()) == {1}, [o for o, n in per_offset.items() if n > 1]
    assert {d for _, _, d in received} == {1}
    broker.restart()
    produce(broker.bootstrap, topic, [SENTINEL])
    late = share_consumer(broker.bootstrap, group_id, topic)
    try:
        seen = _until_sentinel(late)
    finally:
        late.close()
    assert [offset_of(m) for m in seen] == [count]


def _until_sentinel(consumer: ShareConsumer, on_message: Callable[[Message], None] | None = None) -> list[Message]:
    """Everything ``consumer`` receives up to and including the sentinel; ``on_message`` may
    acknowledge each (explicit mode), otherwise poll's implicit acknowledgement applies."""
    seen: list[Message] = []
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        for message in poll_ok(consumer):
            seen.append(message)
            if on_message is not None:
                on_message(message)
        if on_message is not None and seen:
            consumer.commit_sync()
        if any(value_of(m) == SENTINEL for m in seen):
            return seen
    raise AssertionError(f"no sentinel within {WAIT_S}s; got offsets {[offset_of(m) for m in seen]}")


def _collect(consumer: ShareConsumer, count: int, ack_type: Callable[[Message], AcknowledgeType]) -> dict[int, int]:
    """Offsets -> delivery counts of the first ``count`` distinct records, each acknowledged with
    ``ack_type(message)`` and committed; a record delivered twice fails the test."""
    counts: dict[int, int] = {}
    deadline = time.monotonic() + WAIT_S
    while len(counts) < count and time.monotonic() < deadline:
        messages = poll_ok(consumer)
        for m in messages:
            assert offset_of(m) not in counts, f"offset {offset_of(m)} delivered twice"
            counts[offset_of(m)] = count_of(m)
            consumer.acknowledge(m, ack_type(m))
        if messages:
            results = consumer.commit_sync()
            assert all(error is None for error in results.values()), results
    return counts


def test_sigkilled_member_records_are_redelivered_after_the_lock(start_broker) -> None:
    broker = start_broker(**{"group.share.record.lock.duration.ms": "3000"})
    group_id = new_group(broker.bootstrap, "sharekill")
    killed_members_records_come_back(broker.bootstrap, group_id)


def killed_members_records_come_back(bootstrap: str, group_id: str, topic: str | None = None) -> None:
    """A member (a child process) holds records of ``topic`` (a new one of one partition by
    default) and is SIGKILLed; another member of the group is handed every record, those the
    killed one held a second time (delivery count 2)."""
    if topic is None:
        topic = unique_topic("sharekill")
        create_topic(bootstrap, topic)
    produce(bootstrap, topic, [f"v{i}".encode() for i in range(10)])
    child = subprocess.Popen([sys.executable, "-m", "tests.support.share_member", bootstrap, group_id, topic],
                             stdout=subprocess.PIPE, text=True)
    held: list[int] = []
    try:
        assert child.stdout is not None
        for line in child.stdout:
            if line.strip() in ("HOLDING", "NOTHING"):
                break
            held.append(json.loads(line)["offset"])
    finally:
        child.kill()
        child.wait(timeout=CLIENT_TIMEOUT_S)
    assert held, "the child member never received records"
    other = share_consumer(bootstrap, group_id, topic, explicit=True)
    try:
        counts = _collect(other, 10, lambda m: AcknowledgeType.ACCEPT)
    finally:
        other.close()
    assert sorted(counts) == list(range(10))
    for offset in held:  # handed out a second time, after the killed member's lock or session ran out
        assert counts[offset] == 2, (offset, counts)


def test_released_records_return_and_rejected_never(start_broker) -> None:
    broker = start_broker()
    topic = unique_topic("sharerel")
    create_topic(broker.bootstrap, topic)
    group_id = new_group(broker.bootstrap, "sharerel")
    produce(broker.bootstrap, topic, [f"v{i}".encode() for i in range(10)])
    consumer = share_consumer(broker.bootstrap, group_id, topic, explicit=True)
    try:
        first = _collect(consumer, 10, lambda m: AcknowledgeType.RELEASE if offset_of(m) % 2 == 0
                         else AcknowledgeType.REJECT)
        assert first == dict.fromkeys(range(10), 1)
        produce(broker.bootstrap, topic, [SENTINEL])
        again = _until_sentinel(consumer, lambda m: consumer.acknowledge(m, AcknowledgeType.ACCEPT))
    finally:
        consumer.close()
    assert sorted((offset_of(m), count_of(m)) for m in again if value_of(m) != SENTINEL) == \
        [(o, 2) for o in range(0, 10, 2)]


def test_poison_record_is_archived_after_the_delivery_limit(start_broker) -> None:
    broker = start_broker(**{"group.share.delivery.count.limit": "3"})
    group_id = new_group(broker.bootstrap, "sharepoison")
    assert _poison_deliveries(broker.bootstrap, group_id, 3) == [1, 2, 3]


def test_group_delivery_limit_overrides_the_brokers(start_broker) -> None:
    """KIP-1240's share.delivery.count.limit: the group's 2 rather than the broker's 5."""
    broker = start_broker()
    group_id = new_group(broker.bootstrap, "sharelimit", share_delivery_count_limit="2")
    assert _poison_deliveries(broker.bootstrap, group_id, 2) == [1, 2]


def test_group_session_timeout_gives_back_a_killed_members_records(start_broker) -> None:
    """share.session.timeout.ms of the group: the broker's session and lock are ten minutes, the
    group's session four seconds; a SIGKILLed member's records come back once its session ends."""
    broker = start_broker(**SLOW_BROKER_TIMING)
    group_id = new_group(broker.bootstrap, "sharesession", **FAST_GROUP_TIMING)
    assert group_config_values(broker.bootstrap, group_id, FAST_GROUP_TIMING) == FAST_GROUP_TIMING
    killed_members_records_come_back(broker.bootstrap, group_id)


def test_group_timing_outside_the_brokers_bounds_is_refused(start_broker) -> None:
    broker = start_broker(**SLOW_BROKER_TIMING)
    group_id = unique_group("sharebounds")
    for configs in ({"share_session_timeout_ms": "2999"}, {"share_heartbeat_interval_ms": "15001"},
                    {"share_delivery_count_limit": "11"},
                    {"share_session_timeout_ms": "4000", "share_heartbeat_interval_ms": "4000"}):
        with pytest.raises(KafkaException) as refused:
            set_group_configs(broker.bootstrap, group_id, **configs)
        assert refused.value.args[0].name() == "INVALID_CONFIG", configs


def _poison_deliveries(bootstrap: str, group_id: str, limit: int) -> list[int]:
    """The delivery counts a record released every time is handed out with, up to the sentinel
    produced once it was delivered ``limit`` times (a delivery beyond the group's limit would
    come before the sentinel)."""
    topic = unique_topic("sharepoison")
    create_topic(bootstrap, topic)
    produce(bootstrap, topic, [b"ok-0", b"poison", b"ok-2"])
    consumer = share_consumer(bootstrap, group_id, topic, explicit=True)
    poison_counts: list[int] = []
    accepted: list[int] = []

    def handle(m: Message) -> None:
        if value_of(m) == b"poison":
            poison_counts.append(count_of(m))
            consumer.acknowledge(m, AcknowledgeType.RELEASE)  # the application fails on it
            if len(poison_counts) == limit:
                produce(bootstrap, topic, [SENTINEL])
        else:
            accepted.append(offset_of(m))
            consumer.acknowledge(m, AcknowledgeType.ACCEPT)

    try:
        _until_sentinel(consumer, handle)
    finally:
        consumer.close()
    assert sorted(accepted) == [0, 2, 3]
    return poison_counts


def test_broker_sigkill_keeps_acknowledgements_and_redelivers_the_rest(start_broker) -> None:
    broker = start_broker()
    topic = unique_topic("sharecrash")
    create_topic(broker.bootstrap, topic)
    group_id = new_group(broker.bootstrap, "sharecrash")
    produce(broker.bootstrap, topic, [f"v{i}".encode() for i in range(20)])
    consumer = share_consumer(broker.bootstrap, group_id, topic, explicit=True)
    held: list[int] = []
    acked: list[int] = []
    deadline = time.monotonic() + WAIT_S
    while len(held) + len(acked) < 20 and time.monotonic() < deadline:
        messages = poll_ok(consumer)
        for m in messages:
            if offset_of(m) % 2 == 0:
                consumer.acknowledge(m, AcknowledgeType.ACCEPT)
                acked.append(offset_of(m))
            else:
                held.append(offset_of(m))  # acquired, never acknowledged
        if messages:
            results = consumer.commit_sync()
            assert all(error is None for error in results.values()), results
            break  # the odd records stay acquired; poll() would refuse to go on without them
    assert sorted(acked + held) == list(range(20))
    broker.restart(crash=True)
    produce(broker.bootstrap, topic, [SENTINEL])
    after = share_consumer(broker.bootstrap, group_id, topic, explicit=True)
    try:
        seen = _until_sentinel(after, lambda m: after.acknowledge(m, AcknowledgeType.ACCEPT))
    finally:
        after.close()
        consumer.close()
    assert sorted((offset_of(m), count_of(m)) for m in seen if value_of(m) != SENTINEL) == \
        [(o, 2) for o in sorted(held)]


def test_read_committed_share_group_never_sees_aborted_records(start_broker) -> None:
    broker = start_broker()
    topic = unique_topic("sharetxn")
    create_topic(broker.bootstrap, topic)
    committed_group = new_group(broker.bootstrap, "sharerc", share_isolation_level="read_committed")
    uncommitted_group = new_group(broker.bootstrap, "shareru")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": unique_group("txn")})
    producer.init_transactions(CLIENT_TIMEOUT_S)
    for batch, commit in (("c1", True), ("a", False), ("c2", True)):
        producer.begin_transaction()
        for i in range(5):
            producer.produce(topic, f"{batch}-{i}".encode())
        producer.flush(CLIENT_TIMEOUT_S)
        if commit:
            producer.commit_transaction(CLIENT_TIMEOUT_S)
        else:
            producer.abort_transaction(CLIENT_TIMEOUT_S)
    produce(broker.bootstrap, topic, [SENTINEL])
    values = {}
    for group_id in (committed_group, uncommitted_group):
        consumer = share_consumer(broker.bootstrap, group_id, topic)
        try:
            values[group_id] = sorted(value_of(m) for m in _until_sentinel(consumer))
        finally:
            consumer.close()
    expected = sorted([f"c1-{i}".encode() for i in range(5)] + [f"c2-{i}".encode() for i in range(5)] + [SENTINEL])
    assert values[committed_group] == expected
    # The same log read uncommitted does hold the aborted records: the filter is what hid them.
    assert sorted(v for v in values[uncommitted_group] if v.startswith(b"a-")) == [f"a-{i}".encode() for i in range(5)]


def test_two_members_on_two_topics_of_three_partitions(start_broker) -> None:
    """librdkafka lists a topic once per run of its partitions in a ShareFetch; every record of
    every partition still reaches the group exactly once."""
    broker = start_broker()
    topics = [unique_topic("sharemulti") for _ in range(2)]
    for topic in topics:
        create_topic(broker.bootstrap, topic, partitions=3)
    group_id = new_group(broker.bootstrap, "sharemulti")
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for topic in topics:
        for i in range(150):
            producer.produce(topic, f"{topic}-{i}".encode(), partition=i % 3)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    consumers = []
    for _ in range(2):
        consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group_id})
        consumer.subscribe(topics)
        consumers.append(consumer)
    seen: Counter[tuple[str, int, int]] = Counter()
    try:
        deadline = time.monotonic() + WAIT_S
        while len(seen) < 300 and time.monotonic() < deadline:
            for consumer in consumers:
                for m in poll_ok(consumer, 0.2):
                    seen[(present(m.topic(), "topic"), present(m.partition(), "partition"), offset_of(m))] += 1
        for consumer in consumers:
            consumer.commit_sync()
    finally:
        for consumer in consumers:
            consumer.close()
    assert len(seen) == 300
    assert set(seen.values()) == {1}
    assert {(t, p) for t, p, _ in seen} == {(t, p) for t in topics for p in range(3)}


def test_broker_sigkill_under_three_members_never_redelivers_a_confirmed_acknowledgement(start_broker) -> None:
    """Three members accept and commit what they poll while the broker is SIGKILLed mid-stream:
    every record is processed, and no record whose acknowledgement commit_sync() confirmed is
    ever delivered again (records acknowledged without confirmation may come back)."""
    broker = start_broker()
    topic = unique_topic("sharechaos")
    create_topic(broker.bootstrap, topic)
    group_id = new_group(broker.bootstrap, "sharechaos")
    count = 600
    produce(broker.bootstrap, topic, [f"v{i}".encode() for i in range(count)])
    consumers = [share_consumer(broker.bootstrap, group_id, topic, explicit=True) for _ in range(3)]
    confirmed: set[int] = set()
    delivered_after_confirmation: list[int] = []
    processed: set[int] = set()
    killed = False
    try:
        deadline = time.monotonic() + 2 * WAIT_S
        while len(processed) < count and time.monotonic() < deadline:
            for consumer in consumers:
                polled = [m for m in consumer.poll(0.2) if m.error() is None]
                for m in polled:
                    if offset_of(m) in confirmed:
                        delivered_after_confirmation.append(offset_of(m))
                    processed.add(offset_of(m))
                    consumer.acknowledge(m, AcknowledgeType.ACCEPT)
                if polled:
                    try:
                        results = consumer.commit_sync(10)
                    except KafkaException:
                        continue  # the broker is down: these acknowledgements are unconfirmed
                    if results and all(error is None for error in results.values()):
                        confirmed.update(offset_of(m) for m in polled)
            if not killed and len(confirmed) >= count // 3:
                broker.restart(crash=True)
                killed = True
    finally:
        for consumer in consumers:
            consumer.close()
    assert killed, "the broker was never killed"
    assert processed == set(range(count))
    assert delivered_after_confirmation == []


def test_acknowledgements_pending_at_close_are_applied(start_broker) -> None:
    """close() sends the pending acknowledgements (a final ShareAcknowledge) while it leaves the
    group on another connection; the leave must not release the records first."""
    broker = start_broker()
    topic = unique_topic("shareclose")
    create_topic(broker.bootstrap, topic)
    group_id = new_group(broker.bootstrap, "shareclose")
    produce(broker.bootstrap, topic, [f"v{i}".encode() for i in range(10)])
    consumer = share_consumer(broker.bootstrap, group_id, topic, explicit=True)
    got: list[int] = []
    try:
        deadline = time.monotonic() + WAIT_S
        while not got and time.monotonic() < deadline:
            for m in poll_ok(consumer):
                got.append(offset_of(m))
                consumer.acknowledge(m, AcknowledgeType.ACCEPT)  # not committed: close() sends them
    finally:
        consumer.close()
    assert got
    produce(broker.bootstrap, topic, [SENTINEL])
    after = share_consumer(broker.bootstrap, group_id, topic)
    try:
        seen = _until_sentinel(after)
        after.commit_sync()
    finally:
        after.close()
    assert not set(got) & {offset_of(m) for m in seen}, "acknowledged at close, delivered again"
