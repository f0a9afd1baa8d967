"""Helpers of the lease tests: a transaction source over plain connections and broker rows.

The brokers table belongs to cluster/pg (BrokerRegistry); until that lands, ``ensure_brokers``
creates the columns the leases read (node_id, incarnation, lease_expires_at) if the table is
missing, and ``register``/``heartbeat`` write them by PostgreSQL's clock as the registry does.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import psycopg

from oncestream.cluster.pg.schema import apply_schema


class PgTransactions:
    """``transaction()`` on a fresh connection each time (MetadataStore's interface, no pool)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.transactions = 0

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with await psycopg.AsyncConnection.connect(self.url) as conn:
            async with conn.transaction():
                self.transactions += 1
                yield conn


@dataclass(frozen=True)
class Registration:
    node_id: int
    incarnation: uuid.UUID


async def prepare(url: str) -> PgTransactions:
    """Apply the schema (and the brokers columns the leases need) to a fresh database."""
    async with await psycopg.AsyncConnection.connect(url) as conn:
        await apply_schema(conn)
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS brokers (node_id int PRIMARY KEY, incarnation uuid NOT NULL,"
            " lease_expires_at timestamptz NOT NULL)")
        await conn.commit()
    return PgTransactions(url)


async def register(store: PgTransactions, node_id: int, session_timeout_ms: int) -> Registration:
    """A broker row for a new incarnation of ``node_id``, its lease ``session_timeout_ms`` long."""
    reg = Registration(node_id, uuid.uuid4())
    async with store.transaction() as conn:
        await conn.execute(
            "INSERT INTO brokers (node_id, incarnation, lease_expires_at)"
            " VALUES (%s, %s, clock_timestamp() + %s * interval '1 millisecond')"
            " ON CONFLICT (node_id) DO UPDATE SET incarnation = EXCLUDED.incarnation,"
            " lease_expires_at = EXCLUDED.lease_expires_at",
            (node_id, reg.incarnation, session_timeout_ms))
    return reg


async def heartbeat(store: PgTransactions, reg: Registration, session_timeout_ms: int) -> bool:
    """Extend ``reg``'s lease if it has not expired (by PostgreSQL's clock); whether it did."""
    async with store.transaction() as conn:
        cursor = await conn.execute(
            "UPDATE brokers SET lease_expires_at = clock_timestamp() + %s * interval '1 millisecond'"
            " WHERE node_id = %s AND incarnation = %s AND lease_expires_at > clock_timestamp()",
            (session_timeout_ms, reg.node_id, reg.incarnation))
        return cursor.rowcount == 1


async def lease_alive(store: PgTransactions, reg: Registration) -> bool:
    async with store.transaction() as conn:
        cursor = await conn.execute(
            "SELECT 1 FROM brokers WHERE node_id = %s AND incarnation = %s AND lease_expires_at > clock_timestamp()",
            (reg.node_id, reg.incarnation))
        return await cursor.fetchone() is not None
