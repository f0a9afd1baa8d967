"""The cluster's PostgreSQL schema, applied in steps, each exactly once, by whichever broker starts first.

Each area of cluster mode owns its tables in a module of its own that defines ``STEPS``, a tuple
of ``SchemaStep``; ``ALL_STEPS`` below lists the areas in the order their steps apply. A step is
never edited once shipped: a change is a new step (its name is recorded in ``schema_steps``).
Brokers of different versions may start together, so ``apply_schema`` takes a transaction-scoped
advisory lock: the first applies what is missing, the others wait and then find nothing to do.
"""

from __future__ import annotations

import psycopg

from oncestream.cluster.pg.schema_step import SchemaStep

__all__ = ["SchemaStep", "all_steps", "apply_schema"]

# pg_advisory_xact_lock key of the schema (any constant unique to this use).
_SCHEMA_LOCK_KEY = 0x6F6E6365_7363


def all_steps() -> tuple[SchemaStep, ...]:
    """Every area's steps, in application order (imported here so each area's module stays the
    one home of its tables)."""
    from oncestream.cluster.leases import leases_schema, share_state_schema
    from oncestream.cluster.pg import (
        catalog_schema,
        client_configs_schema,
        consolidation_schema,
        diskless_schema,
        registry_schema,
        security_schema,
    )

    return (*catalog_schema.STEPS, *registry_schema.STEPS, *security_schema.STEPS,
            *client_configs_schema.STEPS, *diskless_schema.STEPS,
            *consolidation_schema.STEPS, *(SchemaStep(name, sql) for name, sql in leases_schema.STEPS),
            *(SchemaStep(name, sql) for name, sql in share_state_schema.STEPS))


async def apply_schema(conn: psycopg.AsyncConnection[object], steps: tuple[SchemaStep, ...] | None = None) -> list[str]:
    """Apply the steps not yet applied, in one transaction; the names applied now."""
    steps = all_steps() if steps is None else steps
    applied_now: list[str] = []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK_KEY,))
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_steps ("
            " name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())")
        cursor = await conn.execute("SELECT name FROM schema_steps")
        done = {str(row[0]) for row in await cursor.fetchall()}  # type: ignore[index]
        for step in steps:
            if step.name in done:
                continue
            await conn.execute(step.sql.encode())
            await conn.execute("INSERT INTO schema_steps (name) VALUES (%s)", (step.name,))
            applied_now.append(step.name)
    return applied_now
