"""Client quota configs and ClientMetrics subscriptions in PostgreSQL (broker/quotas/cluster_store.py,
cluster/pg/client_metrics.py): two stores on one database
stand for two brokers; a change made through one reaches the other's installed configs by NOTIFY
(the poll interval is set far beyond the test's waits, so only the notification can explain it),
and concurrent changes from brokers with stale snapshots both survive."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from oncestream.broker.quotas.cluster_store import PgClientQuotaStore
from oncestream.broker.quotas.entities import ABSENT, ClientQuotaConfigs, QuotaEntity, QuotaOp
from oncestream.cluster.pg.client_metrics import PgClientMetricsStore
from oncestream.cluster.pg.keyed_rows import KeyedRowsStore
from oncestream.cluster.pg.store import MetadataStore

NO_POLL_MS = 600_000  # the watcher's poll fallback never fires within a test
# Hang guard of each wait for a NOTIFY to be heard (milliseconds normally; a CI run at a load of
# 12 on 2 cores used up a 30 s guard shared by two waits, 2026-11-29).
NOTIFY_WAIT_S = 60

ALICE = QuotaEntity("alice", ABSENT)
DEFAULT_CLIENT = QuotaEntity(ABSENT, None)
ALICE_APP = QuotaEntity("alice", "app")


async def _stop(task: asyncio.Future[None], *stores: KeyedRowsStore[Any]) -> None:
    """Stop a store's ``watch`` and close every store."""
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    for store in stores:
        await store.store.close()


def _set(configs: ClientQuotaConfigs, entity: QuotaEntity, key: str, value: float | None) -> ClientQuotaConfigs:
    return configs.altered(entity, [QuotaOp(key, 0.0 if value is None else value, value is None)])


def test_quota_changes_of_two_brokers_with_stale_snapshots_both_survive(pg_database):
    """save() receives whole configs; writing them whole would let broker B undo broker A's change."""

    async def main() -> dict[QuotaEntity, dict[str, float]]:
        a = await PgClientQuotaStore.open(await MetadataStore.open(pg_database))
        b = await PgClientQuotaStore.open(await MetadataStore.open(pg_database))
        try:
            await asyncio.to_thread(a.save, _set(a.load(), ALICE, "producer_byte_rate", 1024))
            await asyncio.to_thread(b.save, _set(b.load(), DEFAULT_CLIENT, "consumer_byte_rate", 2048))  # stale
            configs = _set(a.load(), ALICE, "producer_byte_rate", None)
            await asyncio.to_thread(a.save, _set(configs, ALICE_APP, "request_percentage", 12.5))
            assert await b.reload()
            assert not await b.reload()  # nothing changed since
            return b.load().entries()
        finally:
            await a.store.close()
            await b.store.close()

    assert asyncio.run(main()) == {DEFAULT_CLIENT: {"consumer_byte_rate": 2048.0},
                                   ALICE_APP: {"request_percentage": 12.5}}


def test_a_quota_change_reaches_another_brokers_installed_configs_by_notify(pg_database):
    async def main() -> tuple[ClientQuotaConfigs, int]:
        a = await PgClientQuotaStore.open(await MetadataStore.open(pg_database))
        b = await PgClientQuotaStore.open(await MetadataStore.open(pg_database))
        installed: list[ClientQuotaConfigs] = []
        task = asyncio.ensure_future(b.watch(installed.append, asyncio.Lock(), poll_interval_ms=NO_POLL_MS))
        try:
            # The watcher's LISTEN starts asynchronously: change a value until a change is heard,
            # then the one under test must arrive by NOTIFY alone.
            deadline = time.monotonic() + NOTIFY_WAIT_S
            rate = 1000
            while not installed:
                assert time.monotonic() < deadline, "no change ever reached the other broker"
                rate += 1
                await asyncio.to_thread(a.save, _set(a.load(), DEFAULT_CLIENT, "consumer_byte_rate", rate))
                await asyncio.sleep(0.2)
            await asyncio.to_thread(a.save, _set(a.load(), ALICE, "producer_byte_rate", 4096))
            deadline = time.monotonic() + NOTIFY_WAIT_S   # its own hang guard: the first wait may have used most of its own
            while not any(c.value(ALICE, "producer_byte_rate") == 4096 for c in installed):
                assert time.monotonic() < deadline, f"the change did not reach broker b within {NOTIFY_WAIT_S} s"
                await asyncio.sleep(0.02)
            return installed[-1], rate
        finally:
            await _stop(task, a, b)

    configs, rate = asyncio.run(main())
    assert configs.entries() == {ALICE: {"producer_byte_rate": 4096.0}, DEFAULT_CLIENT: {"consumer_byte_rate": float(rate)}}


def test_client_metrics_subscriptions_of_two_brokers_survive_and_reach_the_other_by_notify(pg_database):
    """Two brokers change different ClientMetrics resources from stale snapshots: both survive; a
    change (and a deletion: an emptied resource) made through one is installed by the other."""

    async def main() -> tuple[dict[str, dict[str, str]], list[dict[str, dict[str, str]]]]:
        a = await PgClientMetricsStore.open(await MetadataStore.open(pg_database))
        b = await PgClientMetricsStore.open(await MetadataStore.open(pg_database))
        installed: list[dict[str, dict[str, str]]] = []
        task = asyncio.ensure_future(b.watch(lambda c: installed.append({k: dict(v) for k, v in c.items()}),
                                             asyncio.Lock(), poll_interval_ms=NO_POLL_MS))
        try:
            await asyncio.to_thread(a.save, {"lat": {"metrics": "org.apache.kafka.producer.", "interval.ms": "1000"}})
            # The watcher's LISTEN starts asynchronously: change "probe" until a change is heard.
            deadline = time.monotonic() + NOTIFY_WAIT_S
            count = 0
            while not installed:
                assert time.monotonic() < deadline, "no change ever reached the other broker"
                count += 1
                await asyncio.to_thread(a.save, {**a.load(), "probe": {"interval.ms": str(1000 + count)}})
                await asyncio.sleep(0.2)
            stale = dict(b.load())
            await asyncio.to_thread(b.save, {**stale, "all": {"metrics": "*"}})
            await asyncio.to_thread(a.save, {**a.load(), "probe": {}})  # a's snapshot lacks "all"
            deadline = time.monotonic() + NOTIFY_WAIT_S
            while not installed or "probe" in installed[-1] or "all" not in installed[-1]:
                assert time.monotonic() < deadline, f"b never installed the deletion: {installed[-1:]}"
                await asyncio.sleep(0.02)
            await a.reload()
            return {k: dict(v) for k, v in a.load().items()}, installed
        finally:
            await _stop(task, a, b)

    stored, installed = asyncio.run(main())
    expected = {"lat": {"metrics": "org.apache.kafka.producer.", "interval.ms": "1000"}, "all": {"metrics": "*"}}
    assert stored == expected
    assert installed[-1] == expected
