"""Databases for the dual-write helper: SQLite (embedded default) and PostgreSQL (psycopg 3).

A store hands out one local transaction at a time (``Transaction``) and keeps the dual-write
state row, ``(transactional_id, batch_id, prepared_txn_state)``, in the same database as the
application's tables, so both change in one commit.

SQL given to ``Transaction.execute`` uses ``?`` placeholders on every store (qmark style); the
PostgreSQL store translates them to psycopg's ``%s``.
"""

from __future__ import annotations

import abc
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STATE_TABLE = "oncestream_dual_write"


@dataclass(frozen=True)
class DualWriteState:
    """The last batch a dual writer committed to the database and its PreparedTxnState."""

    batch_id: int
    prepared_txn_state: str


class Transaction:
    """One open database transaction: run the application's SQL in it."""

    def __init__(self, connection: Any, translate_qmark: bool) -> None:
        self.connection = connection
        self._translate = translate_qmark
        self._cursor = connection.cursor()

    def _sql(self, sql: str) -> str:
        return sql.replace("%", "%%").replace("?", "%s") if self._translate else sql

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """Run one statement (``?`` placeholders); returns the DB-API cursor for fetching."""
        self._cursor.execute(self._sql(sql), tuple(params))
        return self._cursor

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run one statement for many parameter rows."""
        self._cursor.executemany(self._sql(sql), [tuple(r) for r in rows])


class _Store(abc.ABC):
    """What the dual writer needs from a database."""

    translate_qmark = False

    @abc.abstractmethod
    def connect(self) -> Any:
        """A new DB-API connection with autocommit off."""

    def _begin(self, connection: Any) -> None:  # noqa: B027 (an optional hook: most drivers need nothing)
        """Start a transaction explicitly (drivers differ in when they start one implicitly)."""

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """A transaction committed when the block ends, rolled back if it raises."""
        connection = self.connect()
        try:
            self._begin(connection)
            tx = Transaction(connection, self.translate_qmark)
            yield tx
            connection.commit()
        except BaseException:
            connection.rollback()
            raise
        finally:
            connection.close()

    def ensure_state_table(self) -> None:
        """Create the dual-write state table if needed."""
        with self.transaction() as tx:
            tx.execute(f"CREATE TABLE IF NOT EXISTS {STATE_TABLE} (transactional_id TEXT PRIMARY KEY, "
                       "batch_id BIGINT NOT NULL, prepared_txn_state TEXT NOT NULL)")

    def read_state(self, transactional_id: str) -> DualWriteState | None:
        """The state row of a dual writer, or None before its first commit."""
        with self.transaction() as tx:
            row = tx.execute(f"SELECT batch_id, prepared_txn_state FROM {STATE_TABLE} "
                             "WHERE transactional_id = ?", (transactional_id,)).fetchone()
        return None if row is None else DualWriteState(int(row[0]), str(row[1]))

    @staticmethod
    def write_state(tx: Transaction, transactional_id: str, state: DualWriteState) -> None:
        """Upsert the state row inside the caller's transaction."""
        tx.execute(
            f"INSERT INTO {STATE_TABLE} (transactional_id, batch_id, prepared_txn_state) VALUES (?, ?, ?) "
            "ON CONFLICT (transactional_id) DO UPDATE SET batch_id = excluded.batch_id, "
            "prepared_txn_state = excluded.prepared_txn_state",
            (transactional_id, state.batch_id, state.prepared_txn_state))


class SqliteStore(_Store):
    """An SQLite database file (the embedded default). Commits are fsynced (synchronous=FULL)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)

    def connect(self) -> sqlite3.Connection:
        """A connection in manual-transaction mode."""
        connection = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        connection.execute("PRAGMA synchronous=FULL")
        return connection

    def _begin(self, connection: sqlite3.Connection) -> None:
        connection.execute("BEGIN IMMEDIATE")

    def __repr__(self) -> str:
        return f"SqliteStore({self.path!r})"


class PostgresStore(_Store):
    """A PostgreSQL database reached with psycopg 3 (``pip install 'psycopg[binary]'``)."""

    translate_qmark = True

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def connect(self) -> Any:
        """A psycopg connection (transactions start implicitly with the first statement)."""
        import psycopg

        return psycopg.connect(self.dsn, autocommit=False)

    def __repr__(self) -> str:
        return f"PostgresStore({self.dsn!r})"
