"""The client's partition retry rule holds for every client kind, not only the Spark connector's
face of it: a partition whose leader is unknown at first (its topic is created a moment after the
client's first Metadata answer) is retriable; metadata is asked again after ``retry.backoff.ms``,
up to the retry bound, and the request then succeeds. Before the rule lived in ``Cluster.leader``
the admin client's DescribeProducers failed at once with LEADER_NOT_AVAILABLE. The topic is
created by librdkafka's admin client, against a real broker process: ours, which answers
DescribeProducers (KIP-664; Tansu does not, so ``ONCESTREAM_TEST_BROKER=tansu`` does not apply)."""

from __future__ import annotations

import threading
import uuid

import pytest

from oncestream.client import TopicPartition
from oncestream.client.admin.admin import Admin
from oncestream.client.common.errors import KafkaException
from tests.support.clients import create_topic

pytestmark = pytest.mark.interop


def test_admin_finds_a_partition_whose_topic_appears_after_the_first_metadata_answer(broker_factory) -> None:
    broker = broker_factory()
    topic = f"late-admin-{uuid.uuid4().hex[:8]}"
    # retry.backoff.ms 500: a 10 s window (20 attempts) for librdkafka's CreateTopics on a loaded machine
    with Admin({"bootstrap.servers": broker.bootstrap, "retry.backoff.ms": 500}) as admin:
        assert topic not in admin.list_topics()  # the client's metadata: not there yet
        creator = threading.Timer(0.3, create_topic, args=(broker.bootstrap, topic), kwargs={"partitions": 1})
        creator.start()
        try:
            producers = admin.describe_producers([TopicPartition(topic, 0)])
        finally:
            creator.join()
    assert producers == {(topic, 0): []}


def test_admin_names_the_partition_when_its_leader_never_appears(broker_factory) -> None:
    broker = broker_factory()
    topic = f"never-admin-{uuid.uuid4().hex[:8]}"
    with Admin({"bootstrap.servers": broker.bootstrap, "retry.backoff.ms": 10}) as admin:
        with pytest.raises(KafkaException, match=f"{topic}\\[0\\] has no leader"):
            admin.describe_producers([TopicPartition(topic, 0)])
