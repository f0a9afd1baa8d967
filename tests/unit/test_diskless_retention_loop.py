"""RetentionEnforcer's periodic task outlives a failed round, whatever the round failed with."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from oncestream.cluster.diskless.retention import RetentionEnforcer
from oncestream.cluster.pg.errors import MetadataStoreUnavailableError

WAIT_S = 10.0  # a bound on a hang only


class _NoRows:
    async def fetchall(self) -> list[tuple[Any, ...]]:
        return []


class _EmptyCatalog:
    """A connection to a metadata store without partitions."""

    async def execute(self, query: str, params: object = None) -> _NoRows:
        return _NoRows()


class _FailingThenEmptySource:
    """A TransactionSource whose transactions fail with ``failures`` in turn, then find no
    partition (a round that does nothing): the loop must get there."""

    def __init__(self, failures: list[BaseException]) -> None:
        self._failures = list(failures)
        self.opened = 0
        self.after_failures = asyncio.Event()

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Any]:
        self.opened += 1
        if self._failures:
            raise self._failures.pop(0)
        self.after_failures.set()
        yield _EmptyCatalog()


@pytest.mark.parametrize("failure", [
    RuntimeError("a bug in a round"),  # the loop died of this before it used PeriodicRound
    MetadataStoreUnavailableError("PostgreSQL is down"),
], ids=["unexpected", "metadata-store"])
def test_the_retention_loop_survives_a_failed_round_and_logs_it(failure: BaseException,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> int:
        source = _FailingThenEmptySource([failure, failure])
        enforcer = RetentionEnforcer(source, check_interval_ms=1)
        enforcer.start()
        try:
            await asyncio.wait_for(source.after_failures.wait(), WAIT_S)
        finally:
            await enforcer.close()
        return source.opened

    with caplog.at_level(logging.WARNING):
        opened = asyncio.run(main())
    assert opened >= 3, f"only {opened} rounds ran: the loop ended after a failed round"
    failed = [r for r in caplog.records if "retention round failed" in r.getMessage()]
    assert len(failed) >= 2, [r.getMessage() for r in caplog.records]
