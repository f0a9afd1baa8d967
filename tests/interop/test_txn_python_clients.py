"""Transactions with the pure-Python clients: kafka-python 3 and aiokafka (KIP-98).

Each client's transactional producer commits and aborts transactions over several partitions;
then each client's own read_committed consumer, and librdkafka's, must see exactly the committed
records in produce order, while read_uncommitted sees everything.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from tests.support.clients import CLIENT_TIMEOUT_S, create_topic, unique_topic
from tests.support.txn import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    TXN_BROKER_CONFIG,
    high_watermarks,
    read_to_end,
    transaction_values,
    values_of,
)

pytestmark = [pytest.mark.interop]

PARTITIONS = 3
# (tag, commit?, records per partition)
PLAN = [("t1", True, 6), ("t2", False, 6), ("t3", True, 3), ("t4", False, 2)]


@pytest.fixture(scope="module")
def txn_broker(module_broker_factory):
    """A broker of the kind under test, configured for transaction tests, shared by this module
    (unique topics)."""
    return module_broker_factory(TXN_BROKER_CONFIG, name="txn-py-broker")


def _plan_values() -> list[tuple[bool, dict[int, list[bytes]]]]:
    return [(commit, transaction_values(tag, range(PARTITIONS), n)) for tag, commit, n in PLAN]


def _expected(plan, *, committed_only: bool) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for commit, values in plan:
        if commit or not committed_only:
            for p, vs in values.items():
                out[p].extend(vs)
    return out


# -- kafka-python --------------------------------------------------------------------------------
def kafka_python_transactions(bootstrap: str, topic: str, plan) -> None:
    """Run the plan with kafka-python's transactional KafkaProducer."""
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=f"kp-{uuid.uuid4().hex[:8]}", linger_ms=5
    )
    try:
        producer.init_transactions()
        for commit, values in plan:
            producer.begin_transaction()
            futures = [
                producer.send(topic, value=v, key=f"p{p}".encode(), partition=p)
                for p, vs in values.items() for v in vs
            ]
            producer.flush(timeout=CLIENT_TIMEOUT_S)
            for future in futures:
                future.get(timeout=CLIENT_TIMEOUT_S)
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close(timeout=10)


def kafka_python_read(bootstrap: str, topic: str, isolation: str, ends: dict[int, int]) -> dict[int, list[bytes]]:
    """Read with kafka-python's KafkaConsumer at ``isolation`` until every position reaches
    ``ends`` (positions move past control records and filtered aborted data too)."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
        auto_offset_reset="earliest", isolation_level=isolation,
    )
    got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    try:
        tps = [KpTopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while any(consumer.position(tp) < ends[tp.partition] for tp in tps):
            assert time.monotonic() < deadline, f"kafka-python stuck at {[consumer.position(tp) for tp in tps]} < {ends}"
            for tp, messages in consumer.poll(timeout_ms=200).items():
                got[tp.partition].extend(m.value for m in messages)
    finally:
        consumer.close()
    return got


# -- aiokafka ------------------------------------------------------------------------------------
def aiokafka_transactions(bootstrap: str, topic: str, plan) -> None:
    """Run the plan with aiokafka's transactional AIOKafkaProducer."""
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, transactional_id=f"aio-{uuid.uuid4().hex[:8]}", linger_ms=5
        )
        await producer.start()
        try:
            for commit, values in plan:
                await producer.begin_transaction()
                futures = [
                    await producer.send(topic, v, key=f"p{p}".encode(), partition=p)
                    for p, vs in values.items() for v in vs
                ]
                await asyncio.wait_for(asyncio.gather(*futures), CLIENT_TIMEOUT_S)
                if commit:
                    await producer.commit_transaction()
                else:
                    await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(run())


def aiokafka_read(bootstrap: str, topic: str, isolation: str, ends: dict[int, int]) -> dict[int, list[bytes]]:
    """Read with aiokafka at ``isolation`` until every position reaches ``ends``."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as AioTopicPartition

    async def run() -> dict[int, list[bytes]]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
            auto_offset_reset="earliest", isolation_level=isolation,
        )
        await consumer.start()
        got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        try:
            tps = [AioTopicPartition(topic, p) for p in range(PARTITIONS)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            deadline = time.monotonic() + CLIENT_TIMEOUT_S

            async def behind() -> bool:
                return any([await consumer.position(tp) < ends[tp.partition] for tp in tps])

            while await behind():
                assert time.monotonic() < deadline, f"aiokafka stuck below {ends}"
                for tp, messages in (await consumer.getmany(timeout_ms=200)).items():
                    got[tp.partition].extend(m.value for m in messages)
        finally:
            await consumer.stop()
        return got

    return asyncio.run(run())


PRODUCERS = {"kafka-python": kafka_python_transactions, "aiokafka": aiokafka_transactions}
READERS = {"kafka-python": kafka_python_read, "aiokafka": aiokafka_read}


@pytest.mark.parametrize("client", sorted(PRODUCERS))
def test_python_client_transactions_commit_and_abort_visibility(txn_broker, client):
    """KIP-98 with kafka-python / aiokafka producers: read_committed (the same client's consumer
    and librdkafka's) returns exactly the committed transactions; read_uncommitted returns all."""
    bootstrap = txn_broker.bootstrap
    topic = unique_topic(f"txn-{client}")
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    plan = _plan_values()
    PRODUCERS[client](bootstrap, topic, plan)

    committed = _expected(plan, committed_only=True)
    everything = _expected(plan, committed_only=False)
    ends = high_watermarks(bootstrap, topic, PARTITIONS)
    assert READERS[client](bootstrap, topic, READ_COMMITTED, ends) == committed
    assert READERS[client](bootstrap, topic, READ_UNCOMMITTED, ends) == everything
    assert values_of(read_to_end(bootstrap, topic, PARTITIONS, isolation=READ_COMMITTED)) == committed
    assert values_of(read_to_end(bootstrap, topic, PARTITIONS, isolation=READ_UNCOMMITTED)) == everything
