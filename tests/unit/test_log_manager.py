"""LogManager: topic lifecycle on disk (CreateTopics, DeleteTopics, configs) and crash leftovers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from oncestream.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    StorageError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from oncestream.log.config import LogConfig
from oncestream.log.manager import TOPICS_DIR, LogManager
from tests.unit._batches import idempotent_batch, make_batch


def open_manager(tmp_path: Path, now_ms: int = 0, **config) -> LogManager:
    return LogManager.open(tmp_path / "logs", LogConfig(**config), now_ms)


def test_create_append_reopen_keeps_data_and_topic_ids(tmp_path: Path) -> None:
    manager = open_manager(tmp_path)
    info = manager.create_topic("orders", 3, {"retention.ms": "1000"})
    assert (info.name, info.num_partitions, info.configs) == ("orders", 3, {"retention.ms": "1000"})
    assert info.config.retention_ms == 1000
    manager.get("orders", 2).append(idempotent_batch(5, 0, 0, count=4), 1)
    manager.create_topic("audit.log_v2-x", 1, {})
    manager.close()

    reopened = open_manager(tmp_path)
    topics = reopened.topics()
    assert set(topics) == {"orders", "audit.log_v2-x"}
    assert topics["orders"].topic_id == info.topic_id
    assert topics["orders"].topic_id != topics["audit.log_v2-x"].topic_id
    log = reopened.get("orders", 2)
    assert (log.log_end_offset, log.config.retention_ms) == (4, 1000)
    assert log.append(idempotent_batch(5, 0, 0, count=4), 2).duplicate
    assert (log.topic, log.partition) == ("orders", 2)


def test_create_topic_errors_carry_kafka_codes(tmp_path: Path) -> None:
    manager = open_manager(tmp_path)
    manager.create_topic("t", 1, {})
    cases = [
        (lambda: manager.create_topic("t", 1, {}), TopicAlreadyExistsError, ErrorCode.topic_already_exists),
        (lambda: manager.create_topic("a/b", 1, {}), InvalidTopicError, ErrorCode.invalid_topic_exception),
        (lambda: manager.create_topic("..", 1, {}), InvalidTopicError, ErrorCode.invalid_topic_exception),
        (lambda: manager.create_topic("", 1, {}), InvalidTopicError, ErrorCode.invalid_topic_exception),
        (lambda: manager.create_topic("x" * 250, 1, {}), InvalidTopicError, ErrorCode.invalid_topic_exception),
        (lambda: manager.create_topic("u", 0, {}), InvalidPartitionsError, ErrorCode.invalid_partitions),
        (lambda: manager.create_topic("u", 1, {"retention.ms": "x"}), InvalidConfigError, ErrorCode.invalid_config),
        (lambda: manager.get("nope", 0), UnknownTopicOrPartitionError, ErrorCode.unknown_topic_or_partition),
        (lambda: manager.get("t", 1), UnknownTopicOrPartitionError, ErrorCode.unknown_topic_or_partition),
        (lambda: manager.delete_topic("nope"), UnknownTopicOrPartitionError, ErrorCode.unknown_topic_or_partition),
    ]
    for call, error, code in cases:
        with pytest.raises(error) as info:
            call()
        assert info.value.code == code
    assert manager.create_topic("x" * 249, 1, {}).num_partitions == 1
    assert set(manager.topics()) == {"t", "x" * 249}
    assert not (tmp_path / "logs" / "u-0").exists()  # the failed create left nothing behind


def test_topics_differing_only_in_dot_and_underscore_collide(tmp_path: Path) -> None:
    manager = open_manager(tmp_path)
    manager.create_topic("a.b", 1, {})
    with pytest.raises(InvalidTopicError):
        manager.create_topic("a_b", 1, {})


def test_delete_topic_removes_files_and_allows_recreation(tmp_path: Path) -> None:
    manager = open_manager(tmp_path)
    first = manager.create_topic("t", 2, {})
    manager.get("t", 0).append(make_batch(3), 1)
    manager.delete_topic("t")
    assert manager.topics() == {}
    assert not (tmp_path / "logs" / "t-0").exists()
    assert not (tmp_path / "logs" / TOPICS_DIR / f"{first.topic_id}.json").exists()
    with pytest.raises(UnknownTopicOrPartitionError):
        manager.get("t", 0)
    second = manager.create_topic("t", 1, {})
    assert second.topic_id != first.topic_id
    assert manager.get("t", 0).log_end_offset == 0
    manager.close()
    assert set(open_manager(tmp_path).topics()) == {"t"}


def test_alter_topic_configs_is_persisted_and_applied(tmp_path: Path) -> None:
    manager = open_manager(tmp_path, retention_ms=50)
    manager.create_topic("t", 2, {"segment.bytes": "1000", "retention.bytes": "10"})
    merged = manager.alter_topic_configs("t", {"retention.ms": "7", "retention.bytes": None}, merge=True)
    assert merged.configs == {"segment.bytes": "1000", "retention.ms": "7"}
    assert manager.get("t", 1).config.retention_ms == 7
    assert manager.get("t", 1).config.retention_bytes == -1
    with pytest.raises(InvalidConfigError):
        manager.alter_topic_configs("t", {"segment.ms": "0"})
    assert manager.topics()["t"].configs == merged.configs
    replaced = manager.alter_topic_configs("t", {"cleanup.policy": "compact"})  # the whole new set
    assert replaced.configs == {"cleanup.policy": "compact"}
    assert manager.get("t", 0).config.segment_bytes == LogConfig().segment_bytes
    assert manager.get("t", 0).config.retention_ms == 50  # broker default again
    manager.close()
    reopened = open_manager(tmp_path, retention_ms=50)
    assert reopened.topics()["t"].configs == {"cleanup.policy": "compact"}
    assert reopened.get("t", 0).config.cleanup_policy == "compact"


def test_create_partitions_grows_a_topic(tmp_path: Path) -> None:
    manager = open_manager(tmp_path)
    manager.create_topic("t", 1, {})
    assert manager.create_partitions("t", 3).num_partitions == 3
    manager.get("t", 2).append(make_batch(1), 1)
    with pytest.raises(InvalidPartitionsError):
        manager.create_partitions("t", 3)
    manager.close()
    assert open_manager(tmp_path).get("t", 2).log_end_offset == 1


def test_tick_applies_retention_and_producer_expiry(tmp_path: Path) -> None:
    manager = open_manager(tmp_path, producer_id_expiration_ms=100)
    manager.create_topic("t", 1, {"retention.ms": "10", "segment.bytes": "100"})
    log = manager.get("t", 0)
    log.append(idempotent_batch(1, 0, 0, value_size=200, timestamp_ms=5), 5)
    log.append(make_batch(1, value_size=200, timestamp_ms=6), 6)
    assert manager.tick(1_000) == 1
    assert log.log_start_offset == 1
    assert log.producer_states() == []


def test_unfinished_create_and_delete_do_not_break_startup(tmp_path: Path) -> None:
    manager = open_manager(tmp_path)
    manager.create_topic("kept", 1, {})
    deleted = manager.create_topic("deleted", 2, {})
    manager.get("deleted", 1).append(make_batch(1), 1)
    manager.close()
    logs = tmp_path / "logs"
    # Crash during DeleteTopics: metadata gone, one directory still there.
    (logs / TOPICS_DIR / f"{deleted.topic_id}.json").unlink()
    # Crash during CreateTopics: directories made, metadata never committed (or only a temp file).
    (logs / "half-0").mkdir()
    (logs / "half-0" / f"{0:020d}.log").write_bytes(b"")
    (logs / TOPICS_DIR / "half.json.tmp").write_text("{")
    (logs / "kept-5").mkdir()  # beyond the topic's partition count
    (logs / "meta.properties").write_text("not ours")

    reopened = open_manager(tmp_path)
    assert set(reopened.topics()) == {"kept"}
    assert sorted(p.name for p in logs.iterdir()) == [TOPICS_DIR, "kept-0", "meta.properties"]
    assert reopened.create_topic("deleted", 2, {}).num_partitions == 2
    assert reopened.get("deleted", 1).log_end_offset == 0


def test_damaged_topic_metadata_refuses_to_start(tmp_path: Path) -> None:
    manager = open_manager(tmp_path)
    info = manager.create_topic("t", 1, {})
    manager.close()
    path = tmp_path / "logs" / TOPICS_DIR / f"{info.topic_id}.json"
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "topic_id": "not-a-uuid"}))
    with pytest.raises(StorageError):
        open_manager(tmp_path)
    assert (tmp_path / "logs" / "t-0").exists()  # nothing deleted on a guess


def test_closed_manager_refuses_work(tmp_path: Path) -> None:
    manager = open_manager(tmp_path)
    manager.close()
    with pytest.raises(StorageError):
        manager.create_topic("t", 1, {})


def test_a_creation_in_progress_reserves_its_name_and_shows_nothing_until_finished(tmp_path: Path) -> None:
    """CreateTopics / CreatePartitions in three steps (the broker runs the middle one on a disk
    thread): begin reserves, run makes files without touching the manager, finish installs."""
    from oncestream.errors import InvalidRequestError

    manager = open_manager(tmp_path)
    creation = manager.begin_create_topic("t", 2, {})
    with pytest.raises(TopicAlreadyExistsError):
        manager.begin_create_topic("t", 1, {})
    creation.run()
    assert "t" not in manager.topics()
    with pytest.raises(UnknownTopicOrPartitionError):
        manager.get("t", 0)
    assert manager.finish_creation(creation).num_partitions == 2
    manager.get("t", 1).append(make_batch(1), 1)

    growing = manager.begin_create_partitions("t", 3)
    with pytest.raises(InvalidRequestError):
        manager.delete_topic("t")  # its metadata file is about to be rewritten by the creation
    growing.run()
    manager.finish_creation(growing)
    assert manager.topics()["t"].num_partitions == 3

    failed = manager.begin_create_topic("u", 1, {})
    manager.abort_creation(failed)  # as after a failed run(): the name is free again
    manager.create_topic("u", 1, {})
    manager.close()
    assert {name: info.num_partitions for name, info in open_manager(tmp_path).topics().items()} == {"t": 3, "u": 1}
