"""What the read side of diskless topics needs from PostgreSQL access: transactions and LISTEN.

``oncestream.cluster.pg.store.MetadataStore`` provides both; the read side depends only on these
two protocols so that it can be driven by any source of connections (tests, tools).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import psycopg


class TransactionSource(Protocol):
    """Opens PostgreSQL transactions."""

    def transaction(self) -> AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]:
        """A connection inside a fresh transaction (no statement run in it yet), committed when the
        block ends normally and rolled back when it raises."""
        ...


class NotificationSource(Protocol):
    """Delivers PostgreSQL notifications of one channel."""

    def listen(self, channel: str) -> AsyncIterator[str]:
        """Payloads of ``channel`` as they arrive, for as long as the iterator is consumed. After a
        lost connection it reconnects by itself (notifications sent meanwhile are lost: callers
        that care poll as well)."""
        ...
