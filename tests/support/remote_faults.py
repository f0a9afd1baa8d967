"""Object stores that fail on command, passed to a broker through ``BrokerSeams.object_store``.

``FaultyObjectStore`` wraps a real store (a ``file://`` directory in the in-process tests): puts
fail while ``put_failures_left`` is positive (each failure counts one down) or while ``down`` is
set; deletes and lists fail while ``down`` is set. Every call is counted, so a test can wait
for the broker to have tried again without measuring time.
"""

from __future__ import annotations

import builtins
import threading
from typing import BinaryIO

from oncestream.errors import RemoteStorageError
from oncestream.remote.object_store import ObjectStore


class FaultyObjectStore:
    """An ``ObjectStore`` failing the way a test says, otherwise the wrapped one."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.description = f"faulty({inner.description})"
        self.put_failures_left = 0
        self.down = False
        self.failed_puts = 0
        self.failures = 0  # every injected failure (puts, deletes, lists, reads)
        self.puts = 0
        self._lock = threading.Lock()

    def _check_put(self, key: str) -> None:
        with self._lock:
            self.puts += 1
            if self.down or self.put_failures_left > 0:
                self.put_failures_left = max(0, self.put_failures_left - 1)
                self.failed_puts += 1
                self.failures += 1
                raise RemoteStorageError(f"injected failure putting {key} to {self.description}")

    def _check_up(self, what: str) -> None:
        if self.down:
            with self._lock:
                self.failures += 1
            raise RemoteStorageError(f"injected failure: {what} on {self.description}")

    def put(self, key: str, data: bytes | memoryview) -> None:
        self._check_put(key)
        self.inner.put(key, data)

    def put_file(self, key: str, file: BinaryIO, size: int) -> None:
        self._check_put(key)
        self.inner.put_file(key, file, size)

    def get(self, key: str) -> bytes:
        self._check_up(f"get {key}")
        return self.inner.get(key)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        self._check_up(f"get_range {key}")
        return self.inner.get_range(key, start, end)

    def size(self, key: str) -> int:
        self._check_up(f"size {key}")
        return self.inner.size(key)

    def delete(self, key: str) -> None:
        self._check_up(f"delete {key}")
        self.inner.delete(key)

    def list(self, prefix: str) -> builtins.list[str]:
        self._check_up(f"list {prefix}")
        return self.inner.list(prefix)
