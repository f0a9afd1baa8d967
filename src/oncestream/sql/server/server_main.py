"""``oncestream sql-server``: one SQL-server node in the foreground.

    oncestream sql-server --bootstrap-server HOST:PORT --listen HOST:PORT --service-id ID
        --state-dir DIR [--spark-master URL] [--config key=value ...] [--ready-file F]
    oncestream sql-users add --file USERS --user NAME [--password PW]

One SparkSession per process (``local[*]`` unless ``--spark-master``), the node (command topic,
replay, query placement) and the REST API (HTTP/1.1 and h2c on one port). ``--config`` takes:

- client properties passed to every Kafka client the node creates (command topic, assignment
  group, the queries' sources and sinks): ``security.protocol``, ``sasl.*``, ``ssl.*``,
  ``client.*`` and the other librdkafka names in ``CLIENT_PROPERTY_PREFIXES``;
- ``checkpoint.root`` (any Hadoop filesystem URL every node reaches, needed for failover; default
  ``<state dir>/checkpoints``);
- ``spark.*`` properties for the SparkSession;
- ``ksql.schema.registry.url`` (and ``ksql.schema.registry.basic.auth.user.info``): the Schema
  Registry of the AVRO and JSON_SR formats (spark/schema_registry_client.py);
- ksqlDB's processing log: ``ksql.logging.processing.topic.auto.create=true`` writes the records
  queries cannot read to the topic ``<service id>ksql_processing_log`` as well as to the logger
  ``processing``, and ``ksql.logging.processing.stream.auto.create=true`` creates the stream
  ``KSQL_PROCESSING_LOG`` over it (sql/engine/processing_log.py);
- ``ksql.spark.start=lazy`` to start Spark only when a query first needs it (default ``eager``);
- the node's own settings (``ksql.command.timeout.ms``, ``ksql.query.assignment.session.timeout.ms``,
  ``ksql.query.assignment.heartbeat.interval.ms``, ``ksql.query.assignment.instance.id`` (the
  node's ``group.instance.id``; default: an id kept in the state dir, empty: none, see
  node_identity), ``ksql.internal.topic.replicas``, ``ksql.max.body.bytes``);
- ``metrics.listen=HOST:PORT``: Prometheus ``/metrics`` (sql/server/metrics.py, docs/metrics.md;
  port 0: the OS picks, the ready file's ``metrics`` names the bound one);
- the REST API's security, ksqlDB's names: ``listeners=https://HOST:PORT`` with the PEM
  ``listener.ssl.*`` files (rest/listener.py), ``authentication.method=BASIC`` with
  ``authentication.users.file``, ``authentication.realm``, ``authentication.skip.paths``
  (rest/basic_auth.py; ``oncestream sql-users add`` writes the users file, docs/sql-security.md).

A caller building the node from Python passes ``run(args, write_steps=...)``: an observer of the
command-topic write steps (command_topic.WriteStepObserver; tests inject crashes this way).

At start the node asks the broker for KIP-939 two-phase commit, as the queries' exactly-once sink
will (``two_phase_check``): a broker that refuses it (not started with
``transaction.two.phase.commit.enable=true``) gets an ERROR line naming that setting in the log; the
node still serves statements, INSERT, push and pull queries, and shows every persistent query as
ERROR with the reason.

SIGTERM (or SIGINT): stop serving, leave the assignment group (the survivors take the queries at
once; a SIGKILLed node restarted on the same state dir instead takes its own queries back at once,
static membership), stop the local queries at a batch boundary, stop Spark and its JVM, exit 0.
The stop is bounded by ``oncestream.shutdown.timeout.ms`` (default 60 s; ``process_shutdown``):
past it, or on a second SIGTERM/SIGINT, the node kills its children (the JVM) and exits at once
with status 1.
``--ready-file F`` is written (whole, by rename) once the node has replayed its command topic and
listens: ``{"host", "port", "url", "serviceId", "sparkUiUrl"}`` (``sparkUiUrl``: the driver's Spark UI,
whose REST API under ``/api/v1`` lists the executors; null while Spark has not started or with
``spark.ui.enabled=false``, the default), and written again once Spark is up (Spark starts beside
the serving node, see ``SparkRuntime``: the first write has ``sparkUiUrl`` null).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oncestream.client import KafkaException
from oncestream.process_shutdown import STOP_SIGNALS, ShutdownBound, install_stop_signals, shutdown_timeout_ms
from oncestream.spark.driver_python import default_spark_pythons
from oncestream.sql.engine.two_phase_check import two_phase_commit_refusal
from oncestream.sql.errors import KsqlError
from oncestream.sql.server.command_topic import WriteStepObserver

if TYPE_CHECKING:
    from oncestream.sql.engine.insert_values import RowWriter
    from oncestream.sql.server.rest.listener import Listener

log = logging.getLogger("oncestream.sql")

CLIENT_PROPERTY_PREFIXES = ("security.", "sasl.", "ssl.", "client.", "enable.ssl.", "socket.", "request.timeout.ms",
                            "reconnect.", "metadata.max.age.ms", "retry.backoff.ms")
_REPLAY_TIMEOUT_S = 300.0
_DEFAULT_MAX_BODY_BYTES = 1 << 20
# Stopping queries at a batch boundary and Spark's JVM takes longer than a broker's stop.
_DEFAULT_SHUTDOWN_TIMEOUT_MS = 60_000


def register(sub: Any) -> None:
    """Add the ``sql-server`` subcommand to the ``oncestream`` command (cli.py)."""
    p = sub.add_parser("sql-server", help="run a SQL server node (ksqlDB's REST API) in the foreground")
    add_arguments(p)
    p.set_defaults(func=run)
    u = sub.add_parser("sql-users", help="add a user to a SQL server's Basic-authentication users file")
    u.add_argument("action", choices=["add"])
    u.add_argument("--file", required=True, help="the users file (authentication.users.file); created if missing")
    u.add_argument("--user", required=True)
    u.add_argument("--password", help="default: $ONCESTREAM_SQL_USER_PASSWORD, else asked on the terminal")
    u.set_defaults(func=run_users)


def run_users(args: argparse.Namespace) -> int:
    """``oncestream sql-users add``: add or replace one user's salted scrypt hash in the file."""
    import getpass

    from oncestream.sql.server.rest.users_file import UsersFileError, set_user

    password = args.password or os.environ.get("ONCESTREAM_SQL_USER_PASSWORD")
    if not password:
        if not sys.stdin.isatty():
            print("oncestream sql-users: give --password or $ONCESTREAM_SQL_USER_PASSWORD", file=sys.stderr)
            return 1
        password = getpass.getpass(f"Password for {args.user}: ")
    try:
        new = set_user(args.file, args.user, password)
    except (UsersFileError, OSError) as exc:
        print(f"oncestream sql-users: {exc}", file=sys.stderr)
        return 1
    print(f"{'added' if new else 'replaced the password of'} user {args.user} in {args.file}")
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap-server", required=True, help="Kafka bootstrap HOST:PORT[,HOST:PORT...]")
    p.add_argument("--listen", default=None,
                   help="HOST:PORT of the REST API over HTTP (default 127.0.0.1:8088; port 0: any free port); "
                        "or --config listeners=https://HOST:PORT")
    p.add_argument("--service-id", required=True, help="nodes with the same service id share one metastore")
    p.add_argument("--state-dir", required=True, help="local state (checkpoints unless checkpoint.root)")
    p.add_argument("--spark-master", default=None, help="Spark master URL (default local[*])")
    p.add_argument("--advertised-url", default=None, help="URL other nodes and clients reach this node at")
    p.add_argument("--config", action="append", metavar="KEY=VALUE",
                   help="client security property, checkpoint.root, spark.* or ksql.* setting")
    p.add_argument("--ready-file", default=None, metavar="PATH", help="write host/port JSON here once ready")
    p.add_argument("--log-level", default="info",
                   help="root log level unless --config log.level=... is given (docs/logging.md)")


def _parse_config(items: list[str] | None) -> dict[str, str]:
    props: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"oncestream sql-server: --config expects key=value, got {item!r}")
        props[key.strip()] = value.strip()
    return props


def client_properties(props: dict[str, str]) -> dict[str, str]:
    """The --config entries that every Kafka client of the node gets."""
    return {k: v for k, v in props.items() if k.startswith(CLIENT_PROPERTY_PREFIXES)}


def _write_ready(path: Path, body: dict[str, Any]) -> None:
    temp = path.with_name(path.name + ".tmp")
    temp.write_text(json.dumps(body))
    os.replace(temp, path)


def _spark_session(master: str | None, props: dict[str, str], state_dir: Path) -> Any:
    """The node's one SparkSession (the runtime's recommended settings, then ``spark.*`` overrides).

    The Python every Spark Python worker runs, the executors' included, is the driver's
    ``PYSPARK_PYTHON``: an operator's setting (the interpreter path that exists on every machine of
    a cluster, docs/spark-cluster.md) is kept; unset, it is this server's own interpreter. The
    driver's own data-source processes run ``PYSPARK_DRIVER_PYTHON``: unset, this installation's
    ``oncestream-driver-python`` (oncestream/spark/driver_python.py: the source's process starts
    within Spark's fixed 10 s on a loaded machine too)."""
    default_spark_pythons()
    from pyspark.sql import SparkSession

    from oncestream.sql.engine import runtime as runtime_module

    builder = SparkSession.builder.master(master or "local[*]").appName("oncestream-sql-server")
    recommended = getattr(runtime_module, "spark_session_config", None)
    settings: dict[str, str] = dict(recommended()) if callable(recommended) else {}
    settings.setdefault("spark.sql.shuffle.partitions", "4")
    settings.setdefault("spark.ui.enabled", "false")
    settings.setdefault("spark.local.dir", str(state_dir / "spark-local"))
    settings.update({k: v for k, v in props.items() if k.startswith("spark.")})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    from oncestream.spark import register as register_connector

    register_connector(spark)
    return spark


def _stop_spark(spark: Any) -> None:
    """Stop Spark and make sure its JVM (and with it the Python workers) is gone."""
    from pyspark import SparkContext

    try:
        spark.stop()
    except Exception as exc:  # noqa: BLE001 - shutting down anyway
        log.warning("oncestream sql: stopping Spark: %s", exc)
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None) if gateway is not None else None
    try:
        if gateway is not None:
            gateway.shutdown()
    except Exception as exc:  # noqa: BLE001
        log.debug("oncestream sql: gateway shutdown: %s", exc)
    if proc is not None:
        try:
            if proc.stdin is not None:
                proc.stdin.close()  # the JVM exits when its parent's pipe closes
            proc.wait(timeout=20)
        except Exception:  # noqa: BLE001 - still running: make it stop
            proc.kill()
            proc.wait(timeout=10)


class SparkStartError(KsqlError):
    """The node's SparkSession could not be created: statements that need Spark are refused."""


class SparkRuntime:
    """The node's ``QueryRuntime`` and its SparkSession.

    ``ksql.spark.start=eager`` (the default): Spark starts, in a thread of its own, as soon as the
    node listens (``start_eager``; not before, so importing PySpark and launching the JVM do not
    compete for the interpreter with the replay and the listener's start, about 0.4 s), and the
    node serves meanwhile: statements, ``/info``, ``/clusterStatus`` and pull queries (served from
    the KIP-892 stores, ``engine.pull``) need no Spark, so a restarted node answers them about a
    second after its spawn instead of after the JVM's 10-20 s.
    ``lazy``: Spark starts only when a query first needs it (a node that only serves statements
    never starts a JVM; the tests of the write protocol use it).

    INSERT ... VALUES and ``/inserts-stream`` need no Spark either (``RowWriter``). What needs
    Spark (a persistent query's start, a push query) calls ``get``, which waits until the session
    is up: a push query sent during the start is answered once Spark is there, as it would be on
    a node that was slow to start it (persistent queries
    are started by the placement thread, so CREATE ... AS SELECT and INSERT INTO ... SELECT are
    acknowledged at once and show PENDING until then). A start that failed is raised to each
    caller (``SparkStartError``); a node stopping meanwhile answers ksqlDB's shutting-down error."""

    def __init__(self, make: Any, eager: bool, inserts: RowWriter | None = None) -> None:
        """``make()`` gives (SparkSession, QueryRuntime); ``inserts`` writes INSERT VALUES rows
        without Spark (None: through the runtime, waiting for Spark)."""
        self._make = make
        self._inserts = inserts
        self._lock = threading.Lock()
        self._runtime: Any = None
        self._spark: Any = None
        self._error: str | None = None
        self._started = threading.Event()     # set once the start ended, well or not
        self._stopping = threading.Event()
        self._starter: threading.Thread | None = None
        self._eager = eager
        self._on_up: list[Any] = []

    def when_up(self, callback: Any) -> None:
        """Call ``callback()`` once Spark is up (now if it is; never if its start fails)."""
        with self._lock:
            if self._runtime is None:
                self._on_up.append(callback)
                return
        callback()

    def start_eager(self) -> None:
        """Begin starting Spark now if ``eager`` (the node listens); nothing if ``lazy``."""
        if self._eager:
            self._begin()

    def _begin(self) -> None:
        """Start Spark in its own thread (once)."""
        with self._lock:
            if self._starter is not None:
                return
            self._starter = threading.Thread(target=self._start, name="sql-spark-start", daemon=True)
        log.info("oncestream sql: Spark session starting")
        self._starter.start()

    def _start(self) -> None:
        began = time.monotonic()
        try:
            spark, runtime = self._make()
        except BaseException as exc:  # noqa: BLE001 - every caller of get() is told, the node keeps serving
            if not self._stopping.is_set():
                log.error("oncestream sql: Spark could not start: %s", exc)
            with self._lock:
                self._error = f"{type(exc).__name__}: {exc}"
        else:
            with self._lock:
                self._spark, self._runtime = spark, runtime
                callbacks, self._on_up = self._on_up, []
            log.info("oncestream sql: Spark session ready in %.1f s", time.monotonic() - began)
            for callback in callbacks:
                try:
                    callback()
                except Exception as exc:  # noqa: BLE001 - a ready-file write failing must not stop Spark
                    log.warning("oncestream sql: after Spark started: %s", exc)
        finally:
            self._started.set()

    @property
    def state(self) -> str:
        """NOT_STARTED (lazy, not needed yet), STARTING, RUNNING or ERROR."""
        with self._lock:
            if self._runtime is not None:
                return "RUNNING"
            if self._error is not None:
                return "ERROR"
            return "STARTING" if self._starter is not None else "NOT_STARTED"

    def get(self) -> Any:
        """The QueryRuntime, waiting for Spark to be up (starting it if lazy and not started)."""
        from oncestream.sql.errors import SERVER_SHUTTING_DOWN, NotReadyError

        self._begin()
        while not self._started.wait(0.5):
            if self._stopping.is_set():
                raise NotReadyError("The server is shutting down", error_code=SERVER_SHUTTING_DOWN)
        with self._lock:
            if self._runtime is None:
                raise SparkStartError(f"Spark could not start on this node: {self._error}")
            return self._runtime

    def __getattr__(self, name: str) -> Any:
        return getattr(self.get(), name)

    def insert_values(self, sink: Any, row: Any) -> None:
        """INSERT VALUES / ``/inserts-stream``: written at once, Spark or not (see ``RowWriter``)."""
        if self._inserts is None:
            self.get().insert_values(sink, row)
        else:
            self._inserts.insert_values(sink, row)

    def ui_url(self) -> str | None:
        """The Spark UI of this node's driver (None before Spark started or with the UI disabled)."""
        with self._lock:
            spark = self._spark
        return None if spark is None else spark.sparkContext.uiWebUrl

    def running(self) -> list[str]:
        with self._lock:
            runtime = self._runtime
        return [] if runtime is None else list(runtime.running())

    def stop(self, start_timeout_s: float = 30.0) -> None:
        """Stop every query, then Spark and its JVM (nothing to do if Spark never started). A
        start still under way is waited for (bounded) so its JVM is stopped cleanly; one that
        does not end in time is left to ``_end_children``."""
        self._stopping.set()
        if self._inserts is not None:
            self._inserts.close()
        with self._lock:
            starter = self._starter
        if starter is not None:
            starter.join(start_timeout_s)
        with self._lock:
            runtime, spark = self._runtime, self._spark
        if runtime is None:
            return
        try:
            runtime.stop_all()
        except Exception as exc:  # noqa: BLE001 - shutting down anyway
            log.warning("oncestream sql: stopping queries: %s", exc)
        _stop_spark(spark)


def run(args: argparse.Namespace, *, write_steps: WriteStepObserver | None = None) -> int:
    """Run one node until SIGTERM/SIGINT; 0 on a clean stop. ``write_steps`` is injected into
    the node (told each step of the command-topic write protocol)."""
    from oncestream.logging_setup import LogConfigError, LogSettings, configure_logging

    try:
        configure_logging(LogSettings.from_properties(_parse_config(args.config), str(args.log_level)))
    except LogConfigError as exc:
        print(f"oncestream sql: {exc}", file=sys.stderr)
        return 1
    from oncestream.sql.engine.insert_values import RowWriter
    from oncestream.sql.engine.runtime import QueryRuntime, RuntimeSettings
    from oncestream.sql.server.node import Node, NodeSettings
    from oncestream.sql.server.node_identity import NodeIdentityError, node_instance_id
    from oncestream.sql.server.rest.app import create_app
    from oncestream.sql.server.rest.basic_auth import AuthConfigError, BasicAuthMiddleware, BasicAuthSettings
    from oncestream.sql.server.rest.listener import ListenerConfigError, listener_from
    from oncestream.sql.server.rest.users_file import UsersFileError, load_users

    props = _parse_config(args.config)
    args.metrics_listen = props.get("metrics.listen")  # /metrics (sql/server/metrics.py)
    try:
        # Before anything starts: a listener or users file that cannot work is the operator's to fix.
        listener = listener_from(args.listen, props)
        basic_auth = BasicAuthSettings.from_properties(props)
        users = load_users(basic_auth.users_file) if basic_auth is not None else {}
    except (ListenerConfigError, AuthConfigError, UsersFileError) as exc:
        log.error("oncestream sql: %s", exc)
        return 1
    try:
        bound = ShutdownBound(shutdown_timeout_ms(props, _DEFAULT_SHUTDOWN_TIMEOUT_MS), "oncestream sql",
                              before_forced_exit=_kill_children)
    except ValueError as exc:
        log.error("oncestream sql: %s", exc)
        return 1
    state_dir = Path(args.state_dir).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    checkpoint_root = props.get("checkpoint.root") or str(state_dir / "checkpoints")
    clients = client_properties(props)
    # Imported here, as the rest of the engine: `oncestream --help` must start without the sql
    # extra (sqlglot), which the serde modules need (tests/interop/test_install_commands.py).
    from oncestream.spark.schema_registry_client import RegistryClient
    from oncestream.sql.engine.serde import use_registry

    use_registry(RegistryClient.from_properties(dict(props)))
    from oncestream.sql.engine.processing_log import ProcessingLogSettings, use_processing_log

    processing_log = ProcessingLogSettings.from_properties(props, args.service_id, args.bootstrap_server, clients)
    use_processing_log(processing_log)
    try:
        instance_id = node_instance_id(props, state_dir)
    except (NodeIdentityError, OSError) as exc:
        log.error("oncestream sql: %s", exc)
        return 1
    settings = NodeSettings(
        service_id=args.service_id, bootstrap_servers=args.bootstrap_server, client_properties=clients,
        properties=props,
        command_timeout_ms=int(props.get("ksql.command.timeout.ms", 60_000)),
        session_timeout_ms=int(props.get("ksql.query.assignment.session.timeout.ms", 10_000)),
        heartbeat_interval_ms=int(props.get("ksql.query.assignment.heartbeat.interval.ms", 1_000)),
        replication_factor=int(props.get("ksql.internal.topic.replicas", 1)),
        state_dir=str(state_dir), instance_id=instance_id,
    )

    def make() -> tuple[Any, Any]:
        spark = _spark_session(args.spark_master, props, state_dir)
        return spark, QueryRuntime(spark, RuntimeSettings(
            bootstrap_servers=args.bootstrap_server, client_properties=clients, checkpoint_root=checkpoint_root,
            service_id=args.service_id))

    # SIGTERM during start-up (Spark's JVM takes seconds) also ends in a clean stop; once
    # serving, the event loop's handlers take over.
    def terminated(_signum: int, _frame: Any) -> None:
        bound.arm_second_signal()
        bound.begin()
        raise _Terminated()

    for sig in STOP_SIGNALS:
        signal.signal(sig, terminated)
    runtime: SparkRuntime | None = None
    node: Any = None
    status = 0
    try:
        runtime = SparkRuntime(make, eager=props.get("ksql.spark.start", "eager") != "lazy",
                               inserts=RowWriter(args.bootstrap_server, clients))
        node = Node(settings, runtime, write_steps=write_steps)
        node.start()
        # Once the node reached the cluster (an unreachable one or bad credentials are the start's
        # own error above), beside the rest of the start: the check delays nothing.
        threading.Thread(target=_check_two_phase_commit, args=(args.bootstrap_server, clients, args.service_id),
                         name="sql-two-phase-commit-check", daemon=True).start()
        if not node.runner.wait_replayed(_REPLAY_TIMEOUT_S) and node.runner.degraded_reason is None:
            log.error("oncestream sql: the command topic was not replayed within %.0f s", _REPLAY_TIMEOUT_S)
        _processing_log_topic(node, processing_log)
        app: Any = create_app(node, max_body_bytes=int(props.get("ksql.max.body.bytes", _DEFAULT_MAX_BODY_BYTES)))
        if basic_auth is not None:
            app = BasicAuthMiddleware(app, users, realm=basic_auth.realm, skip_paths=basic_auth.skip_paths)
        asyncio.run(_serve(app, node, runtime, listener, args, bound))
    except _Terminated:
        log.info("oncestream sql: terminated while starting")
    except (KafkaException, KsqlError) as exc:
        # No traceback for what the operator must fix (unreachable cluster, credentials...).
        log.error("oncestream sql: cannot start the node against %s: %s", args.bootstrap_server, exc)
        status = 1
    finally:
        # One bounded stop: a signal from now on exits at once (the first one already did this).
        bound.arm_second_signal()
        bound.begin()
        log.info("oncestream sql: shutting down")
        if node is not None:
            node.stop()
        if runtime is not None:
            runtime.stop()
        elif "pyspark" in sys.modules:
            _stop_spark_if_started()
        _end_children()
    bound.finished()
    return status


def _processing_log_topic(node: Any, settings: Any) -> None:
    """ksqlDB's start-up step: the processing-log topic (``ksql.logging.processing.topic.auto.create``)
    and the stream over it (``...stream.auto.create``), unless they exist. A failure is logged:
    the node serves without them."""
    from oncestream.sql.engine.processing_log import ensure_topic, stream_statement

    if settings.topic is None:
        return
    ensure_topic(settings)
    if not settings.create_stream or node.metastore_snapshot().source(settings.stream_name) is not None:
        return
    try:
        asyncio.run(node.execute(stream_statement(settings), {}))
    except (KsqlError, KafkaException, OSError) as exc:
        log.warning("oncestream sql: cannot create the %s stream: %s", settings.stream_name, exc)


def _check_two_phase_commit(bootstrap_servers: str, clients: dict[str, str], service_id: str) -> None:
    """Say at start, loudly, when the broker refuses the two-phase commit every persistent query
    needs. The node still serves (statements, INSERT, push and pull queries need no 2PC, and the
    broker may be reconfigured while it runs); each persistent query started meanwhile is ERROR
    with the same reason (runtime.start_persistent). Runs beside the start: it delays nothing."""
    try:
        refusal = two_phase_commit_refusal(bootstrap_servers, clients, service_id)
    except Exception as exc:  # noqa: BLE001 - inconclusive (broker gone, node stopping): one line, no traceback
        log.warning("oncestream sql: could not check that the broker allows two-phase commit: %s",
                    exc if isinstance(exc, KafkaException) else f"{type(exc).__name__}: {exc}")
        return
    if refusal is not None:
        log.error("oncestream sql: persistent queries cannot run: %s", refusal)


def _children() -> list[int]:
    """Pids of this process's living children (Linux /proc)."""
    me = str(os.getpid())
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[1] == me and fields[0] != "Z":
                out.append(int(entry.name))
    return out


def _kill_children() -> None:
    """SIGKILL every child left (the Spark JVM, its workers): a forced exit must not leave them."""
    if Path("/proc").is_dir():
        for pid in _children():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _end_children(timeout_s: float = 15.0) -> None:
    """A JVM whose start was interrupted (no gateway to stop it through) would outlive us: SIGTERM
    what is left of our children, SIGKILL after ``timeout_s``, and reap them."""
    if not Path("/proc").is_dir():
        return
    pids = _children()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while pids and time.monotonic() < deadline:
        for pid in list(pids):
            with contextlib.suppress(ChildProcessError):
                done, _status = os.waitpid(pid, os.WNOHANG)
                if done == 0:
                    continue
            pids.remove(pid)
        time.sleep(0.05)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


class _Terminated(Exception):
    """SIGTERM/SIGINT before the server was serving."""


def _stop_spark_if_started() -> None:
    """A JVM started by a SparkSession that never finished building (terminated meanwhile)."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None or SparkContext._gateway is not None:
        _stop_spark(active if active is not None else _NoSession())


class _NoSession:
    def stop(self) -> None:
        """Nothing to stop but the JVM (``_stop_spark`` does that)."""


async def _serve(app: Any, node: Any, runtime: SparkRuntime, listener: Listener, args: argparse.Namespace,
                 bound: ShutdownBound) -> None:
    from oncestream.sql.server.rest.serve import serve

    shutdown = asyncio.Event()
    install_stop_signals(asyncio.get_running_loop(), bound, shutdown.set)

    metrics_endpoint = None
    if props_listen := args.metrics_listen:
        from oncestream.metrics.endpoint import MetricsEndpoint

        node.metrics.watch(node, runtime)
        metrics_endpoint = MetricsEndpoint.from_listen(node.metrics.registry, props_listen, off_loop=True)
        await metrics_endpoint.start()

    def ready(bound_port: int) -> None:
        # Nodes exchange no HTTP requests (they coordinate through Kafka); the advertised URL is what
        # clients are told (SHOW QUERIES, /clusterStatus), so it carries the listener's scheme.
        advertised = args.advertised_url or listener.url(bound_port)
        node.join_cluster(advertised)

        def write_ready() -> None:
            if args.ready_file:
                body = {"host": listener.host, "port": bound_port, "url": advertised,
                        "serviceId": node.service_id, "sparkUiUrl": runtime.ui_url()}
                if metrics_endpoint is not None:
                    body["metrics"] = {"host": metrics_endpoint.host, "port": metrics_endpoint.port}
                _write_ready(Path(args.ready_file), body)

        write_ready()
        log.info("oncestream sql: node %s of service %s ready", advertised, node.service_id)
        # Written again, with the Spark UI's address, once Spark is up.
        runtime.when_up(write_ready)
        runtime.start_eager()

    try:
        await serve(app, listener.host, listener.port, shutdown, ready, tls=listener.tls)
    finally:
        if metrics_endpoint is not None:
            metrics_endpoint.close()


def main(argv: list[str] | None = None) -> int:
    """``python -m oncestream.sql.server.server_main ...`` (same options as ``oncestream sql-server``)."""
    parser = argparse.ArgumentParser(prog="oncestream sql-server", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
