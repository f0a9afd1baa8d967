"""The ``oncestream`` command against a real broker process, cross-checked with librdkafka."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.support.brokers import NO_INITIAL_REBALANCE_DELAY, BrokerProcess
from tests.support.clients import confluent_consume, unique_topic
from tests.support.delay_proxy import DelayProxy
from tests.support.ports import free_tcp_port

pytestmark = pytest.mark.interop

MODULE_BROKER_CONFIG = NO_INITIAL_REBALANCE_DELAY  # read by conftest's broker fixture

ONCESTREAM = str(Path(sys.executable).parent / "oncestream")
CLI_TIMEOUT_S = 60
API_FETCH = 1


def run_cli(*args: str, stdin: bytes = b"", check: bool = True) -> subprocess.CompletedProcess[bytes]:
    result = subprocess.run([ONCESTREAM, *args], input=stdin, capture_output=True, timeout=CLI_TIMEOUT_S)
    if check:
        assert result.returncode == 0, result.stderr.decode()
    return result


def test_topics_create_list_describe_delete(broker) -> None:
    bs = ["-b", broker.bootstrap]
    topic = unique_topic("cli-topics")
    run_cli("topics", "create", topic, "--partitions", "3", "--config", "retention.ms=123456", *bs)
    assert topic in run_cli("topics", "list", *bs).stdout.decode().split()
    described = run_cli("topics", "describe", topic, *bs).stdout.decode()
    assert "partitions 3" in described
    assert "retention.ms=123456" in described
    again = run_cli("topics", "create", topic, *bs, check=False)
    assert again.returncode == 1
    assert b"TOPIC_ALREADY_EXISTS" in again.stderr
    run_cli("topics", "alter", topic, "--partitions", "5", *bs)
    assert "partitions 5" in run_cli("topics", "describe", topic, *bs).stdout.decode()
    shrink = run_cli("topics", "alter", topic, "--partitions", "2", *bs, check=False)
    assert shrink.returncode == 1
    assert b"INVALID_PARTITIONS" in shrink.stderr
    run_cli("topics", "delete", topic, *bs)
    assert topic not in run_cli("topics", "list", *bs).stdout.decode().split()


def test_produce_keyed_lines_then_consume_from_beginning_and_latest(broker) -> None:
    bs = ["-b", broker.bootstrap]
    topic = unique_topic("cli-produce")
    run_cli("topics", "create", topic, "--partitions", "3", *bs)
    lines = [f"k{i % 5}:v{i}" for i in range(40)]
    run_cli("produce", topic, "--key-separator", ":", *bs, stdin=("\n".join(lines) + "\n").encode())
    # librdkafka sees every record once, each key in one partition, per-key order kept.
    records = confluent_consume(broker.bootstrap, topic, 3)
    assert sorted(r.value for r in records) == sorted(line.split(":")[1].encode() for line in lines)
    for key in {r.key for r in records}:
        assert len({r.partition for r in records if r.key == key}) == 1
        values = [int(r.value[1:]) for r in sorted(records, key=lambda r: r.offset) if r.key == key]
        assert values == sorted(values)
    out = run_cli("consume", topic, "--from-beginning", "--idle-timeout-ms", "1500", "--key-separator", "=", *bs)
    assert sorted(out.stdout.decode().split()) == sorted(line.replace(":", "=") for line in lines)


def test_consume_latest_prints_only_records_produced_after_it_started(broker_factory) -> None:
    """``consume --latest`` starts at the end: of a topic holding records, it prints only the one
    produced after it positioned itself."""
    holder: dict[str, BrokerProcess] = {}
    with DelayProxy(lambda: (holder["broker"].host, holder["broker"].port)) as proxy:
        # The broker advertises the proxy, so the CLI's consumer stays on it after bootstrapping.
        broker = broker_factory(config={"advertised.listeners": f"PLAINTEXT://{proxy.bootstrap}"})
        holder["broker"] = broker
        topic = unique_topic("cli-latest")
        run_cli("topics", "create", topic, "--partitions", "2", "-b", broker.bootstrap)
        run_cli("produce", topic, "-b", broker.bootstrap, stdin=b"old-1\nold-2\nold-3\n")
        assert _consume_latest_around_one_new_record(proxy, broker, topic, b"k-new:after-start") == b"after-start\n"


def _consume_latest_around_one_new_record(proxy: DelayProxy, broker, topic: str, line: bytes) -> bytes:
    """Start ``consume --latest`` through ``proxy``, produce ``line`` once the consumer has
    positioned itself, and return everything the consumer printed before going idle.

    "Positioned" is observed, not waited for: the consumer resolves its start offsets
    (ListOffsets) before its first Fetch, so the proxy holds that first Fetch, the record is
    produced and acknowledged meanwhile, and only then is the Fetch let through. The new record is
    therefore produced after the consumer took the end offsets, whatever the machine's speed.
    """
    first_fetch = proxy.hold_next(lambda info: info.api_key == API_FETCH)
    consumer = subprocess.Popen(
        [ONCESTREAM, "consume", topic, "--latest", "--idle-timeout-ms", "1500", "-b", proxy.bootstrap],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        first_fetch.wait_held(CLI_TIMEOUT_S)
        run_cli("produce", topic, "--key-separator", ":", "-b", broker.bootstrap, stdin=line + b"\n")
        first_fetch.release()
        out, err = consumer.communicate(timeout=CLI_TIMEOUT_S)
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait()
    assert consumer.returncode == 0, err.decode()
    return out


def test_consume_with_a_group_resumes_where_it_committed(broker) -> None:
    bs = ["-b", broker.bootstrap]
    topic = unique_topic("cli-group")
    run_cli("topics", "create", topic, "--partitions", "2", *bs)
    run_cli("produce", topic, *bs, stdin=b"".join(b"%d\n" % i for i in range(10)))
    group = ["--group", unique_topic("cli-g")]
    first = run_cli("consume", topic, "--from-beginning", "--max-messages", "4", "--idle-timeout-ms", "1500", *group, *bs)
    rest = run_cli("consume", topic, "--from-beginning", "--idle-timeout-ms", "1500", *group, *bs)
    seen = first.stdout.split() + rest.stdout.split()
    assert len(first.stdout.split()) == 4
    assert sorted(seen) == sorted(b"%d" % i for i in range(10)), "each record exactly once across runs"
    nothing = run_cli("consume", topic, "--from-beginning", "--idle-timeout-ms", "800", *group, *bs)
    assert nothing.stdout == b""


def test_read_committed_consume_skips_aborted_transactions(broker) -> None:
    bs = ["-b", broker.bootstrap]
    topic = unique_topic("cli-txn")
    run_cli("topics", "create", topic, *bs)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": unique_topic("cli-tx")})
    producer.init_transactions(30)
    for values, commit in ((b"a1 a2", False), (b"c1 c2", True), (b"a3", False)):
        producer.begin_transaction()
        for v in values.split():
            producer.produce(topic, v)
        assert producer.flush(30) == 0  # abort purges unsent records: make sure they are in the log
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    out = run_cli("consume", topic, "--from-beginning", "--read-committed", "--idle-timeout-ms", "1500", *bs)
    assert out.stdout.split() == [b"c1", b"c2"]
    everything = run_cli("consume", topic, "--from-beginning", "--idle-timeout-ms", "1500", *bs)
    assert everything.stdout.split() == [b"a1", b"a2", b"c1", b"c2", b"a3"]


def test_unreachable_broker_gets_a_clear_message() -> None:
    port = free_tcp_port()
    for args in (("topics", "list"), ("consume", "t", "--max-messages", "1"), ("produce", "t")):
        result = run_cli(*args, "-b", f"127.0.0.1:{port}", check=False)
        assert result.returncode == 1
        assert f"broker unreachable at 127.0.0.1:{port}".encode() in result.stderr
        assert b"Traceback" not in result.stderr


def test_second_broker_on_a_live_data_dir_refuses_to_start(broker_factory) -> None:
    """One log line and exit code 1, no traceback; the running broker keeps serving."""
    running = broker_factory()
    second = subprocess.run(
        [ONCESTREAM, "broker", "--data-dir", str(running.data_dir), "--listen", f"127.0.0.1:{free_tcp_port()}"],
        capture_output=True, timeout=60)
    assert second.returncode == 1
    assert b"is in use by another broker" in second.stderr
    assert b"Traceback" not in second.stderr
    topic = unique_topic("cli-locked")
    run_cli("topics", "create", topic, "-b", running.bootstrap)
    assert topic in run_cli("topics", "list", "-b", running.bootstrap).stdout.decode().split()
