"""The cluster schema applies once, whoever starts first, against a real PostgreSQL."""

from __future__ import annotations

import asyncio

import psycopg

from oncestream.cluster.pg.schema import SchemaStep, all_steps, apply_schema


async def _apply(url: str, steps: tuple[SchemaStep, ...] | None = None) -> list[str]:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        return await apply_schema(conn, steps)


def test_schema_applies_once_under_concurrent_starts(pg_database):
    async def main() -> list[list[str]]:
        return list(await asyncio.gather(*(_apply(pg_database) for _ in range(4))))

    results = asyncio.run(main())
    names = [step.name for step in all_steps()]
    assert sorted(results, key=len)[-1] == names  # one applied everything
    assert sum(len(r) for r in results) == len(names)  # the others found nothing to do
    with psycopg.connect(pg_database) as conn:
        cluster_id = conn.execute("SELECT value FROM cluster_meta WHERE key = 'cluster.id'").fetchone()
    assert cluster_id is not None
    assert len(cluster_id[0]) == 22


def test_a_failing_step_applies_nothing(pg_database):
    bad = (*all_steps(), SchemaStep("9999_bad", "CREATE TABLE ok_table (x int); SELECT no_such_column FROM ok_table"))
    try:
        asyncio.run(_apply(pg_database, bad))
    except psycopg.errors.UndefinedColumn:
        pass
    else:
        raise AssertionError("the bad step was applied")
    with psycopg.connect(pg_database) as conn:
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    assert "ok_table" not in tables
    assert "topics" not in tables  # the whole schema is one transaction
