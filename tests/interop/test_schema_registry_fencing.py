"""The primary's single-writer guarantee on a real broker: a second writer with the registry's
transactional id fences the first, whose next write fails instead of landing beside the new
primary's (a paused primary that has not noticed it lost the election)."""

from __future__ import annotations

import uuid

import pytest

from oncestream.broker_process import ManagedBroker
from oncestream.client import Admin, NewTopic
from oncestream.schema_registry import records
from oncestream.schema_registry.errors import RegistryError
from oncestream.schema_registry.kafka_log import TopicReader, TopicWriter, ensure_topic
from oncestream.schema_registry.state import RegistryState
from tests.support.brokers import NO_INITIAL_REBALANCE_DELAY

pytestmark = pytest.mark.interop
MODULE_BROKER_CONFIG = NO_INITIAL_REBALANCE_DELAY


def schema_record(subject: str, schema_id: int) -> records.Record:
    value = records.schema_value(subject, 1, schema_id, "AVRO", [], '"string"', False)
    return records.Record(records.schema_key(subject, 1), value)


def test_a_schemas_topic_that_is_not_compacted_is_refused(broker: ManagedBroker) -> None:
    conf = {"bootstrap.servers": broker.bootstrap}
    topic = f"_schemas_{uuid.uuid4().hex[:8]}"
    admin = Admin(conf)
    try:
        assert admin.create_topics([NewTopic(topic, 1, 1, {"cleanup.policy": "delete"})], timeout=30)[topic] is None
    finally:
        admin.close()
    with pytest.raises(RegistryError, match=r"cleanup\.policy=delete"):
        ensure_topic(conf, topic, 1, 30)


def test_a_new_writer_fences_the_old_one(broker: ManagedBroker) -> None:
    conf = {"bootstrap.servers": broker.bootstrap}
    topic = f"_schemas_{uuid.uuid4().hex[:8]}"
    transactional_id = f"sr-{topic}-writer"
    ensure_topic(conf, topic, 1, 30)
    state = RegistryState()
    reader = TopicReader(conf, topic, state)
    reader.start()
    old = TopicWriter(conf, topic, transactional_id, reader, timeout_s=20)
    new = TopicWriter(conf, topic, transactional_id, reader, timeout_s=20)
    try:
        old.start()
        old.append([schema_record("a", 1)])
        new.start()  # init_transactions: the old writer's epoch is over
        new.append([schema_record("b", 2)])
        with pytest.raises(RegistryError) as fenced:
            old.append([schema_record("c", 2)])
        assert fenced.value.error_code == 50001
        assert old.fenced
        with pytest.raises(RegistryError):
            old.append([schema_record("d", 3)])
        # Only the live writer's records are in the state another reader rebuilds.
        rebuilt = RegistryState()
        other = TopicReader(conf, topic, rebuilt)
        other.start()
        try:
            assert other.wait_for(reader.position - 1, 30)
            assert rebuilt.subjects() == ["a", "b"]
        finally:
            other.close()
    finally:
        old.close()
        new.close()
        reader.close()
