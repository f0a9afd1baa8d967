"""``oncestream schema-registry --bootstrap-server HOST:PORT --listen HOST:PORT [--command-config FILE]
[--config K=V ...] [--ready-file F]``: one Schema Registry instance.

Start-up: create the schemas topic if absent, read it to its end into the state, join the
registry group (the primary election), then serve the REST API; the ready file (if asked for)
gets ``{"url": ...}`` once it serves. SIGTERM/SIGINT stop it (leaving the group, so another
instance becomes primary at once); the stop is bounded by ``oncestream.shutdown.timeout.ms``.

``--config`` takes the reference server's settings where they apply (docs/schema-registry.md):
``kafkastore.topic`` (``_schemas``), ``kafkastore.topic.replication.factor`` (min(3, brokers)),
``kafkastore.timeout.ms`` (10000: a write's bound, read-back included),
``kafkastore.init.timeout.ms`` (60000: reading the topic at start), ``schema.registry.group.id``
(``schema-registry``), ``schema.compatibility.level`` (``backward``), ``leader.eligibility``
(``true``), ``host.name`` / ``advertised.url`` (the URL other instances forward to),
``leader.session.timeout.ms`` (10000: how long a dead primary holds its role), ``listeners`` and
``listener.ssl.*`` (HTTPS; ``inter.instance.ssl.ca.location``: the CA a follower checks the
primary's certificate with when forwarding, default the truststore, else the system's),
``authentication.method=BASIC`` with ``authentication.users.file`` and ``authentication.realm``;
``log.level``, ``log.level.<logger>``, ``log.format`` (docs/logging.md);
Kafka client properties (``security.protocol``, ``sasl.*``, ``ssl.*``, plain or prefixed
``kafkastore.``) go to the clients, as do ``--command-config``'s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from hypercorn.asyncio import serve as hypercorn_serve

from oncestream.cli_common import CliError, read_command_config
from oncestream.durable_files import write_file_atomically
from oncestream.http_serve import bind_socket, make_config
from oncestream.logging_setup import LogConfigError, LogSettings, configure_logging
from oncestream.process_shutdown import ShutdownBound, install_stop_signals, shutdown_timeout_ms
from oncestream.schema_registry import errors
from oncestream.schema_registry.election import Identity, PrimaryElection
from oncestream.schema_registry.http_app import Cluster, SchemaRegistryApp
from oncestream.schema_registry.kafka_log import TopicReader, TopicWriter, ensure_topic
from oncestream.schema_registry.records import Record
from oncestream.schema_registry.registry import Registry
from oncestream.schema_registry.state import RegistryState
from oncestream.sql.server.rest.basic_auth import AuthConfigError, BasicAuthMiddleware, BasicAuthSettings
from oncestream.sql.server.rest.listener import Listener, ListenerConfigError, listener_from
from oncestream.sql.server.rest.users_file import UsersFileError, load_users

log = logging.getLogger("oncestream.schema_registry")


_TAKEOVER_RETRY_S = 1.0
CLIENT_PROPERTY_PREFIXES = ("security.", "sasl.", "ssl.", "client.", "enable.ssl.", "socket.", "request.timeout.ms",
                            "reconnect.", "metadata.max.age.ms", "retry.backoff.ms")


def _parse_config(items: list[str] | None) -> dict[str, str]:
    props: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(f"schema-registry: --config expects key=value, got {item!r}")
        props[key.strip()] = value.strip()
    return props


def client_conf(bootstrap: str, props: Mapping[str, str], command_config: Mapping[str, str]) -> dict[str, Any]:
    """The Kafka client properties of every client of the instance."""
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap}
    conf.update(command_config)
    for key, value in props.items():
        plain = key.removeprefix("kafkastore.")
        if plain.startswith(CLIENT_PROPERTY_PREFIXES) and plain != "timeout.ms":
            conf[plain] = value
    return conf


class RegistryNode(Cluster):
    """The reader, the election and (while primary) the writer of one instance."""

    def __init__(self, conf: Mapping[str, Any], props: Mapping[str, str], state: RegistryState) -> None:
        self.conf = dict(conf)
        self.topic = props.get("kafkastore.topic", "_schemas")
        self.group_id = props.get("schema.registry.group.id", "schema-registry")
        self.timeout_s = int(props.get("kafkastore.timeout.ms", "10000")) / 1000
        self.state = state
        self.reader = TopicReader(self.conf, self.topic, state)
        self._writer: TopicWriter | None = None
        self._primary_url: str | None = None
        self._url = ""
        self._lock = threading.Lock()
        self._generation = 0
        self._closed = False
        self.election: PrimaryElection | None = None

    # Cluster ------------------------------------------------------------------------------------
    def is_primary(self) -> bool:
        with self._lock:
            return self._writer is not None

    def primary_url(self) -> str | None:
        with self._lock:
            return self._primary_url

    def position(self) -> int:
        return self.reader.position

    def wait_for(self, offset: int, timeout_s: float) -> bool:
        return self.reader.wait_for(offset, timeout_s)

    # SchemaLog -----------------------------------------------------------------------------------
    def append(self, batch: list[Record]) -> None:
        with self._lock:
            writer = self._writer
        if writer is None:
            raise errors.unknown_primary()
        writer.append(batch)

    # election ------------------------------------------------------------------------------------
    def join(self, url: str, eligible: bool, session_timeout_ms: int) -> None:
        self._url = url
        self.election = PrimaryElection(group_id=self.group_id, identity=Identity(url, eligible),
                                        client_conf=self.conf, on_change=self._on_primary,
                                        session_timeout_ms=session_timeout_ms,
                                        heartbeat_interval_ms=max(100, session_timeout_ms // 10))
        self.election.start()

    def _on_primary(self, url: str | None) -> None:
        with self._lock:
            self._primary_url = None if url == self._url else url
            self._generation += 1
            generation = self._generation
            old, self._writer = self._writer, None
        if old is not None:
            threading.Thread(target=old.close, daemon=True).start()
        if url == self._url:
            threading.Thread(target=self._become_primary, args=(generation,), name="schema-registry-primary",
                             daemon=True).start()

    def _become_primary(self, generation: int) -> None:
        """Fence the previous primary and catch up (``TopicWriter.start``), retried while this
        instance is still the one elected: until then writes are answered 50004."""
        while True:
            with self._lock:
                if generation != self._generation or self._closed:
                    return
            writer = TopicWriter(self.conf, self.topic, f"{self.group_id}-{self.topic}-writer", self.reader,
                                 timeout_s=self.timeout_s)
            try:
                writer.start()
                break
            except Exception as exc:  # noqa: BLE001 - retried below; the cause goes to the log
                log.error("schema registry: could not take over as primary (retrying): %s", exc)
                writer.close()
                time.sleep(_TAKEOVER_RETRY_S)
        with self._lock:
            stale = generation != self._generation or self._closed
            if not stale:
                self._writer = writer
                self._primary_url = self._url
        if stale:
            writer.close()
        else:
            log.info("schema registry: this instance (%s) is the primary", self._url)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        if self.election is not None:
            self.election.stop()
        with self._lock:
            writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
        self.reader.close()


def _authenticator(props: Mapping[str, str]) -> Callable[[str | None], Awaitable[str | None]] | None:
    settings = BasicAuthSettings.from_properties(props)
    if settings is None:
        return None

    async def inner(scope: Any, receive: Any, send: Any) -> None:  # pragma: no cover - never called
        raise RuntimeError("unused")

    checker = BasicAuthMiddleware(inner, load_users(settings.users_file), realm=settings.realm)
    return checker.authenticate


async def _serve(app: SchemaRegistryApp, listener: Listener, ready: Callable[[str], None],
                 stop: asyncio.Event, bound: ShutdownBound) -> None:
    install_stop_signals(asyncio.get_running_loop(), bound, stop.set)
    sock = bind_socket(listener.host, listener.port)
    url = listener.url(int(sock.getsockname()[1]))
    config = make_config(sock, graceful_timeout_s=5.0, tls=listener.tls)
    ready(url)
    log.info("schema registry: serving %s", url)
    try:
        await hypercorn_serve(app, config, shutdown_trigger=stop.wait, mode="asgi")  # type: ignore[arg-type]
    finally:
        await app.aclose()


def run(args: argparse.Namespace, *, default_listen: str) -> int:
    """Run one instance until SIGTERM/SIGINT (``default_listen``: without ``--listen`` nor ``listeners``)."""
    props = _parse_config(args.config)
    try:
        configure_logging(LogSettings.from_properties(props))
    except LogConfigError as exc:
        raise CliError(f"schema-registry: {exc}") from None
    command_config = read_command_config(args.command_config) if args.command_config else {}
    try:
        listener = listener_from(args.listen if args.listen or "listeners" in props else default_listen, props)
        authenticate = _authenticator(props)
    except (ListenerConfigError, AuthConfigError, UsersFileError) as exc:
        raise CliError(f"schema-registry: {exc}") from None
    conf = client_conf(args.bootstrap_server, props, command_config)
    state = RegistryState()
    node = RegistryNode(conf, props, state)
    init_timeout_s = int(props.get("kafkastore.init.timeout.ms", "60000")) / 1000
    replication = props.get("kafkastore.topic.replication.factor")
    try:
        ensure_topic(conf, node.topic, int(replication) if replication else None, init_timeout_s)
    except errors.RegistryError as exc:
        raise CliError(f"schema-registry: {exc.message}") from None
    node.reader.start()
    end = node.reader.end_offset(init_timeout_s)
    if end > 0 and not node.reader.wait_for(end - 1, init_timeout_s):
        log.warning("schema registry: read %d of %d records of %s within kafkastore.init.timeout.ms; serving anyway",
                    node.reader.position, end, node.topic)
    registry = Registry(state, node, default_level=props.get("schema.compatibility.level", "backward"))
    forward_ca = props.get("inter.instance.ssl.ca.location") or props.get("listener.ssl.truststore.location")
    forward_verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=forward_ca) if forward_ca else True
    app = SchemaRegistryApp(registry, node, authenticate, forward_verify=forward_verify)
    bound = ShutdownBound(shutdown_timeout_ms(props), "oncestream schema-registry")
    eligible = props.get("leader.eligibility", "true").lower() == "true"
    session_timeout_ms = int(props.get("leader.session.timeout.ms", "10000"))

    def ready(url: str) -> None:
        advertised = props.get("advertised.url") or (
            f"{listener.scheme}://{props['host.name']}:{url.rsplit(':', 1)[1]}" if "host.name" in props else url)
        node.join(advertised, eligible, session_timeout_ms)
        if args.ready_file:
            write_file_atomically(Path(args.ready_file), json.dumps({"url": url, "advertisedUrl": advertised}).encode(),
                                  sync_directory=False)

    try:
        asyncio.run(_serve(app, listener, ready, asyncio.Event(), bound))
    finally:
        node.close()
        bound.finished()
    return 0
