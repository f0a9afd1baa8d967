"""Helpers of the tiered-storage process tests: a broker process pointed at a SeaweedFS bucket,
the bucket's view of a partition, bounded waits.

The broker gets the S3 endpoint and credentials through its environment (the AWS_* variables,
as an operator would set them) and ``rsm.config.storage.uri`` names the bucket and a prefix of the
test's own, so tests sharing one SeaweedFS never see each other's objects.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

from oncestream.errors import RemoteObjectNotFoundError
from oncestream.remote.object_store import ObjectStore, open_object_store
from tests.support.brokers import BrokerProcess
from tests.support.seaweedfs import SeaweedServer, clean_environ

WAIT_S = 120.0  # a bound on a hang only: no assertion depends on how long anything takes

# Rounds every 100 ms and short backoffs: the tests wait for conditions, never for time.
FAST_TIERING = {
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": "100",
    "remote.log.manager.task.retry.backoff.ms": "50",
    "remote.log.manager.task.retry.backoff.max.ms": "500",
    "log.retention.check.interval.ms": "200",
}


class TieredBroker(BrokerProcess):
    """Our broker with tiered storage on ``server``'s bucket under a prefix of its own."""

    def __init__(self, data_dir: Path, server: SeaweedServer, config: dict[str, str] | None = None,
                 prefix: str | None = None) -> None:
        self.server = server
        # AWS_* variables that replace the server's own at the next start (a wrong secret key)
        self.aws_overrides: dict[str, str] = {}
        self.prefix = prefix or f"t-{uuid.uuid4().hex[:10]}"
        props = {**FAST_TIERING, "rsm.config.storage.uri": server.uri(self.prefix), **(config or {})}
        super().__init__(data_dir, None, props)

    def environment(self) -> dict[str, str]:
        env = {name: value for name, value in super().environment().items() if not name.startswith("AWS_")}
        return {**env, **self.server.env(), **self.aws_overrides}

    def store(self) -> ObjectStore:
        """The bucket under this broker's prefix, as the broker sees it."""
        return open_object_store(self.server.uri(self.prefix), clean_environ(**self.server.env()))


def segment_objects(store: ObjectStore, suffix: str = "log") -> list[str]:
    """The keys of every object with ``suffix`` (``log``: one per remote segment)."""
    return [key for key in store.list("") if key.endswith(f".{suffix}")]


def remote_log_bytes(store: ObjectStore) -> int:
    """The bytes of every remote ``.log`` object (one listed but deleted meanwhile counts 0)."""
    total = 0
    for key in segment_objects(store):
        try:
            total += store.size(key)
        except RemoteObjectNotFoundError:
            continue
    return total


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = WAIT_S, poll_s: float = 0.1) -> None:
    """Poll ``condition`` until it holds; AssertionError naming ``what`` past the bound."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(poll_s)


def local_log_bytes(data_dir: Path, topic: str, partition: int = 0) -> int:
    """The bytes of the partition's local ``.log`` files."""
    directory = data_dir / "logs" / f"{topic}-{partition}"
    total = 0
    for path in directory.glob("*.log"):
        try:
            total += path.stat().st_size
        except FileNotFoundError:  # removed by the broker meanwhile
            continue
    return total
