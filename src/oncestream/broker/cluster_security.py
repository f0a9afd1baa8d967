"""Security state of a cluster broker from PostgreSQL, so every broker answers the same (docs/cluster.md).

The single broker keeps its ACLs and SCRAM credentials in files of its data directory; a cluster
broker's data directory is a per-process scratch directory, so before it serves, the cluster
runner (broker/cluster_run.py) replaces both stores of the scratch state with the cluster's:

- ACLs: ``PgAclStore`` (cluster/pg/acls.py) becomes ``state.acl_store`` (the ACL handlers call its
  ``save`` as they call the file store's) and the authorizer is rebuilt from its snapshot; a
  background loop keeps the authorizer equal to the table (``PgAclStore.watch``), holding
  ``state.acl_write_lock``, the lock the ACL handlers hold from reading the authorizer to
  persisting, so a reload never interleaves with a change.
- SCRAM credentials: ``PgScramCredentialStore`` (cluster/pg/scram.py) becomes ``state.scram_store``
  and every listener's SASL settings' store (the SCRAM exchange looks credentials up there); a
  background loop reloads its snapshot on every change any broker makes.
- Dynamic broker configs (IncrementalAlterConfigs / AlterConfigs / DescribeConfigs of BROKER
  resources): the layers live in the catalog (``Catalog.broker_configs``); the configs handler
  re-reads them before it describes or alters (under ``state.dynamic_config_lock``) and writes a
  change there instead of the data directory's file; a loop re-reads them every second so the
  topic defaults they carry follow on every broker.

- Client quota configs (AlterClientQuotas / DescribeClientQuotas, KIP-546): ``PgClientQuotaStore``
  (broker/quotas/cluster_store.py) becomes ``state.client_quota_store``; a loop installs every change
  any broker makes into ``state.client_quotas`` (holding ``state.client_quota_lock``, the lock the
  AlterClientQuotas handler holds). Each broker meters its own traffic against them, as in Kafka.
- ClientMetrics subscriptions (KIP-714, IncrementalAlterConfigs / DescribeConfigs of
  CLIENT_METRICS resources): ``PgClientMetricsStore`` (cluster/pg/client_metrics.py) becomes
  ``state.telemetry.config_store``; a loop installs every change into ``state.telemetry.manager``
  (holding ``state.telemetry.config_lock``). Pushed metrics stay with the broker they reached.
- Share-group configs (KIP-932, IncrementalAlterConfigs / DescribeConfigs of GROUP resources):
  ``PgGroupConfigStore`` (the same module) becomes ``state.shares.group_config_store``; a loop
  installs every change into ``state.shares.group_configs`` (holding ``state.shares.group_config_lock``),
  and ``state.shares.refresh_group_configs`` re-reads the table where a change must be seen at once
  (DescribeConfigs, a share-partition starting by ``share.auto.offset.reset``).

The ACL, SCRAM, quota, client-metrics and group-config loops reload on NOTIFY, on reconnection and
by a poll (cluster/pg/security_changes.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable

from oncestream.authz.authorizer import StandardAuthorizer, parse_super_users
from oncestream.broker.quotas.cluster_store import PgClientQuotaStore
from oncestream.broker.quotas.entities import ClientQuotaConfigs
from oncestream.broker.sasl.scram import ScramCredential
from oncestream.broker.state import BrokerState
from oncestream.cluster.pg.acls import PgAclStore
from oncestream.cluster.pg.client_metrics import NamedConfigs, PgClientMetricsStore, PgGroupConfigStore
from oncestream.cluster.pg.scram import PgScramCredentialStore
from oncestream.cluster.pg.store import MetadataStore
from oncestream.errors import OnceStreamError

log = logging.getLogger("oncestream.broker.cluster")

# How often a broker re-reads the dynamic broker configs others may have changed.
DYNAMIC_CONFIGS_POLL_MS = 1000

BackgroundLoop = Callable[[], Awaitable[None]]


async def use_cluster_security(state: BrokerState, store: MetadataStore) -> tuple[BackgroundLoop, ...]:
    """Install the cluster's ACL and SCRAM stores in ``state`` (their snapshots loaded; a
    MetadataStoreError when PostgreSQL cannot be read); the loops that keep them fresh, to run
    as the broker's background loops until it stops."""
    acls = await PgAclStore.open(store)
    scram = await PgScramCredentialStore.open(store, ScramCredential)
    state.acl_store = acls
    state.scram_store = scram
    for listener in state.config.all_listeners:
        state.sasl_for(listener.name).scram_store = scram
    await refresh_dynamic_configs(state)

    async def poll_dynamic_configs() -> None:
        await dynamic_configs_loop(state)

    # Client quota configs (KIP-546): stored cluster-wide, metered per broker.
    quotas = await PgClientQuotaStore.open(store)
    state.client_quota_store = quotas
    state.client_quotas.configs = quotas.load()

    def install_quotas(configs: ClientQuotaConfigs) -> None:
        state.client_quotas.configs = configs

    async def watch_quotas() -> None:
        await quotas.watch(install_quotas, state.client_quota_lock)

    # KIP-714 ClientMetrics subscriptions: stored cluster-wide, resolved per connected client.
    client_metrics = await PgClientMetricsStore.open(store)
    telemetry = state.telemetry
    telemetry.config_store = client_metrics
    telemetry.manager.install(client_metrics.load())

    async def watch_client_metrics() -> None:
        await client_metrics.watch(telemetry.manager.install, telemetry.config_lock)

    # KIP-932 share-group configs: stored cluster-wide, applied by each share-partition's owner.
    group_configs = await PgGroupConfigStore.open(store)
    shares = state.shares
    shares.group_config_store = group_configs

    def install_group_configs(configs: NamedConfigs) -> None:
        shares.group_configs = {name: dict(values) for name, values in configs.items()}
        shares.apply_group_configs()

    install_group_configs(group_configs.load())

    async def refresh_group_configs() -> None:
        await group_configs.refresh(install_group_configs)

    shares.refresh_group_configs = refresh_group_configs

    async def watch_group_configs() -> None:
        await group_configs.watch(install_group_configs, shares.group_config_lock)

    loops: list[BackgroundLoop] = [scram.watch, poll_dynamic_configs, watch_quotas, watch_client_metrics,
                                   watch_group_configs]
    if state.authorizer is not None:
        authorizer = StandardAuthorizer(
            acls.load(), super_users=parse_super_users(state.config.super_users),
            allow_everyone_if_no_acl_found=state.config.allow_everyone_if_no_acl_found)
        state.authorizer = authorizer

        async def watch_acls() -> None:
            await acls.watch(authorizer, state.acl_write_lock)

        loops.append(watch_acls)
    return tuple(loops)


async def refresh_dynamic_configs(state: BrokerState) -> None:
    """Cluster mode: read the dynamic broker configs (the cluster-wide default layer and this
    node's) from the catalog and install them when they changed (the topic defaults follow).
    MetadataStoreError when PostgreSQL cannot be read."""
    if state.cluster is None:
        return
    catalog = state.cluster.catalog
    current = state.dynamic_configs
    cluster_layer = await catalog.broker_configs(None)
    broker_layer = await catalog.broker_configs(current.node_id)
    if cluster_layer != current.cluster or broker_layer != current.broker:
        state.apply_dynamic_configs(dataclasses.replace(current, cluster=cluster_layer, broker=broker_layer))


async def store_dynamic_configs(state: BrokerState, resource_name: str, layer: dict[str, str]) -> None:
    """Cluster mode: make ``layer`` (validated) the whole dynamic layer of BROKER resource
    ``resource_name`` ("": the cluster-wide default, else this node's id) in the catalog. Two
    brokers changing one layer at once: the later write wins whole."""
    if state.cluster is None:
        raise ValueError("store_dynamic_configs is for cluster mode")
    node_id = None if resource_name == "" else state.dynamic_configs.node_id
    await state.cluster.catalog.alter_broker_configs(node_id, layer, replace_all=True)


async def dynamic_configs_loop(state: BrokerState, interval_ms: int = DYNAMIC_CONFIGS_POLL_MS) -> None:
    """Re-read the dynamic broker configs every ``interval_ms`` until cancelled, so a change made
    through another broker reaches this one's topic defaults (DescribeConfigs and the alters
    read them afresh anyway)."""
    while True:
        await asyncio.sleep(interval_ms / 1000)
        try:
            async with state.dynamic_config_lock:
                await refresh_dynamic_configs(state)
        except OnceStreamError as exc:
            log.warning("reading the dynamic broker configs failed (the next poll retries): %s", exc)
