"""Run a broker of a cluster in the foreground: ``oncestream broker --metadata-store ... --object-store ...``.

Start-up, in order (docs/cluster.md): check the configuration, probe the object store (PUT, GET,
DELETE of a probe key) and PostgreSQL (a connection and ``SELECT 1``): a store that cannot be
used ends the start with ``ClusterStartError`` before any port is bound. Then: open the metadata
store (the schema applied by whichever broker gets there first), build the broker state on a
per-process scratch directory (what is not yet in PostgreSQL: groups, transactions, quotas,
telemetry; removed at exit), bind the listeners, register (the bound address), write the ready
file, serve. SIGTERM deregisters first, then stops as a single broker does.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
from pathlib import Path

from oncestream.broker.cluster_coordinators import ClusterCoordinators
from oncestream.broker.cluster_markers import ClusterMarkerWriter, MarkerForwarder
from oncestream.broker.cluster_node import ClusterNode, consolidation_config
from oncestream.broker.cluster_security import use_cluster_security
from oncestream.broker.cluster_settings import (
    ClusterSettings,
    ClusterStartError,
    open_and_probe_object_store,
    probe_metadata_store,
)
from oncestream.broker.config import BrokerConfig
from oncestream.broker.inter_broker import inter_broker_security
from oncestream.broker.peer_requests import PeerRequests
from oncestream.broker.seams import BrokerSeams
from oncestream.broker.server import BrokerServer
from oncestream.broker.state import BrokerState
from oncestream.broker.tls import server_ssl_context
from oncestream.cluster.leases.producer_id_blocks import PgProducerIdService
from oncestream.cluster.pg.errors import MetadataStoreError
from oncestream.cluster.pg.store import MetadataStore, MetadataStoreConfig
from oncestream.log.config import LogConfig
from oncestream.process_shutdown import ShutdownBound, install_stop_signals

log = logging.getLogger("oncestream.broker")


def run_cluster_broker(settings: ClusterSettings, host: str, port: int, props: dict[str, str], *,
                       ready_file: Path | None = None, seams: BrokerSeams | None = None) -> int:
    """Run a cluster broker until SIGTERM/SIGINT; the process exit code. ClusterStartError when
    a store cannot be used at start, InvalidConfigError for a bad configuration."""
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # uvloop is a dependency, but the broker works without it
        pass
    config = BrokerConfig.from_properties(host, port, props)  # a bad property fails before any store is touched
    consolidation_config(config.raw)  # so does a bad diskless.consolidation.* key
    for listener in config.all_listeners:  # a bad SSL store fails before the stores are touched
        if listener.uses_tls:
            server_ssl_context(config.raw, listener.name)
    # So does an inter-broker listener this broker could not reach its peers on.
    inter_broker = inter_broker_security(config.raw, config.all_listeners)
    seams_used = seams or BrokerSeams()
    object_store = seams_used.object_store or open_and_probe_object_store(
        settings.object_store_uri, os.environ, settings.node_id)
    bound = ShutdownBound(config.shutdown_timeout_ms, "oncestream broker")

    async def main() -> None:
        await probe_metadata_store(settings.metadata_store_url, settings.connect_timeout_ms)
        try:
            store = await MetadataStore.open(
                settings.metadata_store_url,
                MetadataStoreConfig(connect_timeout_ms=settings.connect_timeout_ms,
                                    start_timeout_ms=settings.connect_timeout_ms,
                                    # Past its session timeout a paused broker counts as gone:
                                    # it holds no rows locked longer (consolidation swaps,
                                    # log-start moves, every other transaction).
                                    idle_in_transaction_timeout_ms=settings.session_timeout_ms))
        except MetadataStoreError as exc:
            raise ClusterStartError(str(exc)) from None
        node = ClusterNode(settings, store, object_store, config.raw,
                           log_defaults=LogConfig.from_broker_configs(config.raw),
                           check_interval_ms=config.retention_check_interval_ms)
        scratch = Path(tempfile.mkdtemp(prefix=f"oncestream-node{settings.node_id}-"))
        try:
            producer_ids = PgProducerIdService(store)
            state = BrokerState(scratch, config, fdatasync=seams_used.fdatasync, seams=seams_used,
                                producer_ids=producer_ids)
            state.cluster = node
            # ACLs and SCRAM users from PostgreSQL (broker/cluster_security.py), kept fresh by these loops.
            try:
                security_loops = await use_cluster_security(state, store)
            except MetadataStoreError as exc:
                raise ClusterStartError(f"node {settings.node_id}: cannot read the security state: {exc}") from None
            # Consumer groups and transactions on leases in PostgreSQL
            # (broker/cluster_coordinators.py): they replace the scratch state's services; markers
            # through broker/cluster_markers.py.
            node.peers = PeerRequests(inter_broker, f"oncestream-broker-{settings.node_id}")
            log.info("node %d reaches its peers on %s", settings.node_id, inter_broker.describe())
            markers = ClusterMarkerWriter(node, store, MarkerForwarder(node.peers), now_ms=state.now_ms,
                                          idle_timeout_ms=settings.session_timeout_ms)
            coordinators = await ClusterCoordinators.open(
                store, config.raw, state.now_ms, state.mono_ms, producer_ids=producer_ids,
                markers=markers, topics=node.topic_metadata_view, on_marker=state.notifier.notify,
                interval_ms=settings.heartbeat_interval_ms, session_timeout_ms=settings.session_timeout_ms)
            state.groups, state.transactions = coordinators.groups, coordinators.transactions
            node.coordinators = coordinators
            markers.offsets_owner = coordinators.offsets_owner
            await node.refresh_snapshot()
            server = BrokerServer(
                state, ready_file=ready_file,
                background=(*seams_used.background_loops, node.heartbeat_loop, node.topic_refresh_loop, node.catalog_change_loop,
                            node.gc_loop, *security_loops),
                stuck_report_s=bound.bound_ms / 4000, defer_ready=True, on_stopping=node.leave)
            install_stop_signals(asyncio.get_running_loop(), bound, server.stop)
            node.start_serving()
            await server.start()
            advertised_host, advertised_port = state.config.advertised
            listeners = [{"name": item.name, "host": item.advertised[0], "port": item.advertised[1],
                          "security_protocol": item.security_protocol} for item in state.config.all_listeners]
            try:
                await node.join(advertised_host, advertised_port, config.raw.get("broker.rack"), listeners)
            except MetadataStoreError as exc:
                raise ClusterStartError(f"node {settings.node_id}: cannot register: {exc}") from None
            state.cluster_id = node.cluster_id
            server.announce_ready()
            await server.serve_until_stopped()
        finally:
            if node.peers is not None:
                node.peers.close()
            await node.close()
            shutil.rmtree(scratch, ignore_errors=True)

    asyncio.run(main())
    bound.finished()
    return 0
