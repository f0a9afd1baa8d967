"""AlterConfigs split in three (``LogManager.begin_alter_topic_configs``): while a topic's new
metadata file is being written on another thread, nothing else may write or remove that file, so
a late write can neither leave older configs last nor bring a deleted topic back."""

from __future__ import annotations

from pathlib import Path

import pytest

from oncestream.errors import InvalidRequestError, StorageError
from oncestream.log.config import LogConfig
from oncestream.log.manager import LogManager


@pytest.fixture
def logs(tmp_path: Path):
    manager = LogManager.open(tmp_path / "logs", LogConfig(), 0)
    manager.create_topic("t", 1, {})
    yield manager
    manager.close()


def test_the_configs_apply_only_when_the_change_finishes(logs: LogManager) -> None:
    change = logs.begin_alter_topic_configs("t", {"retention.ms": "1000"})
    assert logs.get("t", 0).config.retention_ms != 1000
    change.run()
    assert logs.get("t", 0).config.retention_ms != 1000
    logs.finish_alter_topic_configs(change)
    assert logs.get("t", 0).config.retention_ms == 1000
    assert logs.topics()["t"].configs == {"retention.ms": "1000"}


def test_while_the_metadata_is_written_the_topic_cannot_be_deleted_grown_or_altered(logs: LogManager) -> None:
    change = logs.begin_alter_topic_configs("t", {"retention.ms": "1000"})
    with pytest.raises(InvalidRequestError):
        logs.delete_topic("t")
    with pytest.raises(InvalidRequestError):
        logs.begin_alter_topic_configs("t", {"retention.ms": "2000"})
    with pytest.raises(InvalidRequestError):
        logs.create_partitions("t", 2)
    change.run()
    logs.finish_alter_topic_configs(change)
    logs.delete_topic("t")  # free again
    assert "t" not in logs.topics()


def test_a_failed_write_keeps_the_old_configs_and_frees_the_topic(logs: LogManager) -> None:
    change = logs.begin_alter_topic_configs("t", {"retention.ms": "1000"})
    change.path = change.path.parent / "missing-dir" / change.path.name  # the write fails

    with pytest.raises(StorageError):
        change.run()
    logs.abort_alter_topic_configs(change)
    assert logs.topics()["t"].configs == {}
    logs.alter_topic_configs("t", {"retention.ms": "2000"})
    assert logs.get("t", 0).config.retention_ms == 2000


def test_a_topic_being_deleted_cannot_be_altered_and_goes_only_when_finished(logs: LogManager) -> None:
    deletion = logs.begin_delete_topic("t")
    with pytest.raises(InvalidRequestError):
        logs.begin_alter_topic_configs("t", {"retention.ms": "1000"})
    deletion.run()
    assert "t" in logs.topics()
    assert logs.get("t", 0).directory.is_dir()
    logs.finish_delete_topic(deletion)
    assert "t" not in logs.topics()


def test_a_failed_deletion_keeps_the_topic(logs: LogManager) -> None:
    deletion = logs.begin_delete_topic("t")
    deletion.path.unlink()  # the unlink will fail

    with pytest.raises(StorageError):
        deletion.run()
    logs.abort_delete_topic(deletion)
    assert "t" in logs.topics()
    logs.alter_topic_configs("t", {"retention.ms": "1000"})  # reservation released
