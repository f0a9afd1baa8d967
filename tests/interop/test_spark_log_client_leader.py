"""The Spark connector's protocol client treats an unknown leader as retriable (as Kafka's clients
treat LEADER_NOT_AVAILABLE / UNKNOWN_TOPIC_OR_PARTITION): a partition whose topic appears a moment
after the first Metadata answer is found on a later one. Seen in CI: two queries creating the
commit journal topic at once, one answered TOPIC_ALREADY_EXISTS before the topic was readable,
failed its first commit with "has no leader". The rule now lives in the client
(``Cluster.leader``; tests/interop/test_client_leader_retry.py shows it for the admin client).
Against a real broker (ours, or Tansu with ``ONCESTREAM_TEST_BROKER=tansu``)."""

from __future__ import annotations

import threading
import uuid

import pytest

from oncestream.spark.errors import BrokerRequestError
from oncestream.spark.log_client import ClientSettings, LogClient
from tests.support.clients import create_topic

pytestmark = pytest.mark.interop


def test_a_topic_created_after_the_first_metadata_answer_is_found(broker) -> None:
    topic = f"late-{uuid.uuid4().hex[:8]}"
    with LogClient(broker.bootstrap, settings=ClientSettings(retry_backoff_ms=100)) as client:
        assert client.metadata([topic]).get(topic) is None  # not there yet
        creator = threading.Timer(0.3, create_topic, args=(broker.bootstrap, topic), kwargs={"partitions": 1})
        creator.start()
        try:
            offset = client.produce((topic, 0), _one_record_batch())
        finally:
            creator.join()
        assert offset == 0


def test_a_topic_that_never_appears_still_fails_with_a_clear_error(broker) -> None:
    topic = f"never-{uuid.uuid4().hex[:8]}"
    with LogClient(broker.bootstrap, settings=ClientSettings(retry_backoff_ms=10)) as client:
        with pytest.raises(BrokerRequestError, match=f"{topic}\\[0\\] has no leader"):
            client.produce((topic, 0), _one_record_batch())


def _one_record_batch() -> bytes:
    from oncestream.protocol.records import NewRecord, encode_batch

    return encode_batch([NewRecord(value=b"v")], now_ms=1_700_000_000_000, base_offset=0)
