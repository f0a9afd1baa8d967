"""TLS listeners with real clients (issue 14, points 1, 2 and 5).

One broker for the module with four listeners at once: PLAINTEXT, SSL (no client certificate),
MTLS (SSL with ``ssl.client.auth=required``) and OPT (SSL with ``ssl.client.auth=requested``),
the last two set through Kafka's per-listener ``listener.name.<l>.ssl.*`` overrides and a custom
``listener.security.protocol.map``. librdkafka, kafka-python and our client produce, consume and
commit transactions over TLS; handshakes that must fail do, and the broker keeps serving.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from oncestream.client.common.connection import BrokerConnection, BrokerUnreachableError, parse_bootstrap
from oncestream.client.common.tls import ssl_context_for
from oncestream.protocol.api_keys import METADATA
from oncestream.protocol.codec import build
from tests.support.certs import ClientCert, Pki
from tests.support.cluster_kind import (
    BROKER_COMMAND_CHECK,
    RESTART_KEEPS_LISTENER_PORTS,
    BrokerUnderTest,
    not_on_cluster,
    processes_of,
)
from tests.support.secured_roundtrips import (
    kafka_python_roundtrip,
    librdkafka_read_committed,
    librdkafka_roundtrip,
    oncestream_roundtrip,
)

pytestmark = pytest.mark.interop

TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def tls_broker(module_our_broker_factory: Callable[..., BrokerUnderTest], pki: Pki) -> BrokerUnderTest:
    """Our single broker, or a cluster whose brokers reach each other on PLAINTEXT; raw
    connections go to its first broker."""
    return module_our_broker_factory({
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0,OPT://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,OPT:SSL",
        **pki.broker_stores(),
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.opt.ssl.client.auth": "requested",
    })


def _ssl_conf(pki: Pki, cert: ClientCert | None = None) -> dict[str, str]:
    conf = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca)}
    if cert is not None:
        conf |= {"ssl.certificate.location": str(cert.cert), "ssl.key.location": str(cert.key)}
    return conf


def _connect(broker: BrokerUnderTest, listener: str, conf: dict[str, str] | None) -> BrokerConnection:
    host, port = parse_bootstrap(broker.listener_bootstrap(listener))  # a cluster's first broker
    return BrokerConnection(host, port, timeout_s=10.0, ssl_context=ssl_context_for(conf or {}))


def _metadata_broker_ports(conn: BrokerConnection) -> set[int]:
    """The ports Metadata lists for the brokers (one, or a cluster's three)."""
    response = conn.call(METADATA, lambda m: build(
        m.MetadataRequest, topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    return {int(broker.port) for broker in response.brokers}


def _works(conn: BrokerConnection) -> bool:
    try:
        with conn:
            _metadata_broker_ports(conn)
        return True
    except BrokerUnreachableError:
        return False


def _refused(broker: BrokerUnderTest, listener: str, conf: dict[str, str] | None) -> bool:
    """True when the handshake or the first request fails (TLS 1.3 reports a refused client
    certificate only once the client reads)."""
    try:
        conn = _connect(broker, listener, conf)
    except BrokerUnreachableError:
        return True
    return not _works(conn)


# -- listeners -----------------------------------------------------------------------------------
def test_each_listener_advertises_itself(tls_broker: BrokerUnderTest, pki: Pki) -> None:
    """Metadata answers with the endpoints of the listener the request came in on (as Kafka):
    the broker's, or every cluster broker's."""
    processes = processes_of(tls_broker)

    def ports(listener: str) -> set[int]:
        return {parse_bootstrap(process.listener_bootstrap(listener))[1] for process in processes}

    assert len(set.union(*(ports(name) for name in ("PLAINTEXT", "SSL", "MTLS", "OPT")))) == 4 * len(processes)
    with _connect(tls_broker, "PLAINTEXT", None) as conn:
        assert _metadata_broker_ports(conn) == ports("PLAINTEXT")
    with _connect(tls_broker, "SSL", _ssl_conf(pki)) as conn:
        assert _metadata_broker_ports(conn) == ports("SSL")
    with _connect(tls_broker, "MTLS", _ssl_conf(pki, pki.alice)) as conn:
        assert _metadata_broker_ports(conn) == ports("MTLS")


def test_plaintext_client_on_a_tls_port_fails_cleanly_and_others_keep_working(
        tls_broker: BrokerUnderTest, pki: Pki) -> None:
    host, port = parse_bootstrap(tls_broker.listener_bootstrap("SSL"))
    with pytest.raises(BrokerUnreachableError):
        BrokerConnection(host, port, timeout_s=10.0)
    # Garbage instead of a ClientHello: the broker closes that socket, nothing more.
    with socket.create_connection((host, port), timeout=10.0) as raw:
        raw.sendall(b"\x00\x00\x00\x10" + b"\xff" * 16)
        with _closed_soon():
            while raw.recv(100):  # perhaps an alert, then EOF
                pass
    assert _works(_connect(tls_broker, "SSL", _ssl_conf(pki)))
    assert _works(_connect(tls_broker, "PLAINTEXT", None))
    assert tls_broker.is_alive()


def test_tls_client_on_the_plaintext_port_fails(tls_broker: BrokerUnderTest, pki: Pki) -> None:
    assert _refused(tls_broker, "PLAINTEXT", _ssl_conf(pki))
    assert _works(_connect(tls_broker, "PLAINTEXT", None))


def test_client_refuses_a_broker_it_does_not_trust(tls_broker: BrokerUnderTest, pki: Pki) -> None:
    """Verification is on by default (librdkafka's meaning): a CA that did not sign the broker
    certificate fails the handshake."""
    other = {"security.protocol": "SSL", "ssl.ca.location": str(pki.other_ca.cert)}
    assert _refused(tls_broker, "SSL", other)


# -- mutual TLS ----------------------------------------------------------------------------------
def test_mtls_required_refuses_a_client_without_certificate(tls_broker: BrokerUnderTest, pki: Pki) -> None:
    assert _refused(tls_broker, "MTLS", _ssl_conf(pki))
    assert _works(_connect(tls_broker, "SSL", _ssl_conf(pki)))


@pytest.mark.parametrize("which", ["expired", "self_signed", "other_ca"])
@pytest.mark.parametrize("listener", ["MTLS", "OPT"])
def test_untrusted_client_certificate_fails_the_handshake(
        tls_broker: BrokerUnderTest, pki: Pki, which: str, listener: str) -> None:
    """Expired, self-signed or foreign-CA certificates fail with required and with requested
    client auth (Kafka: with ``requested``, a certificate that is sent must verify)."""
    assert _refused(tls_broker, listener, _ssl_conf(pki, getattr(pki, which)))
    assert tls_broker.is_alive()


def test_mtls_requested_accepts_no_certificate(tls_broker: BrokerUnderTest, pki: Pki) -> None:
    assert _works(_connect(tls_broker, "OPT", _ssl_conf(pki)))
    assert _works(_connect(tls_broker, "OPT", _ssl_conf(pki, pki.alice)))


class _closed_soon:
    """The broker ends the connection: EOF or a reset, both fine."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type | None, *_: object) -> bool:
        return exc_type is None or issubclass(exc_type, ConnectionError)


def _log_has(broker: BrokerUnderTest, text: str) -> bool:
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        log_path = getattr(broker, "log_path", None)  # a cluster's brokers: their output only
        if text in broker.output_tail() or (log_path and text in Path(log_path).read_text()):
            return True
        time.sleep(0.05)
    return False


def test_mtls_good_certificate_gets_its_subject_as_principal(tls_broker: BrokerUnderTest, pki: Pki) -> None:
    """Kafka's default mapping: ``User:CN=alice``; RFC 2253 for a longer subject."""
    assert _works(_connect(tls_broker, "MTLS", _ssl_conf(pki, pki.alice)))
    assert _log_has(tls_broker, "on listener MTLS: client certificate principal User:CN=alice")
    assert _works(_connect(tls_broker, "MTLS", _ssl_conf(pki, pki.bob_full_dn)))
    assert _log_has(tls_broker, "principal User:CN=bob,OU=eng,O=Acme\\, Inc,C=DE")


# -- real clients over SSL -----------------------------------------------------------------------
def _ck_conf(tls_broker: BrokerUnderTest, pki: Pki, listener: str = "SSL", cert: ClientCert | None = None) -> dict:
    return {"bootstrap.servers": tls_broker.listener_bootstrap(listener), **_ssl_conf(pki, cert)}




@pytest.mark.parametrize(("listener", "cert"), [("SSL", None), ("MTLS", "alice")])
def test_librdkafka_produces_consumes_and_commits_a_transaction_over_ssl(
        tls_broker: BrokerUnderTest, pki: Pki, listener: str, cert: str | None) -> None:
    conf = _ck_conf(tls_broker, pki, listener, getattr(pki, cert) if cert else None)
    topic = f"tls-ck-{uuid.uuid4().hex[:8]}"
    assert librdkafka_roundtrip(conf, topic, 20) == [f"plain-{i}".encode() for i in range(20)] + [
        f"txn-{i}".encode() for i in range(5)]


def test_kafka_python_produces_consumes_and_commits_a_transaction_over_ssl(
        tls_broker: BrokerUnderTest, pki: Pki) -> None:
    ssl_args = {"security_protocol": "SSL", "ssl_cafile": str(pki.ca), "ssl_certfile": str(pki.alice.cert),
                "ssl_keyfile": str(pki.alice.key), "ssl_check_hostname": True}
    topic = f"tls-kp-{uuid.uuid4().hex[:8]}"
    assert kafka_python_roundtrip(tls_broker.listener_bootstrap("MTLS"), ssl_args, topic) == [
        f"kp-{i}".encode() for i in range(5)]


def test_our_client_produces_consumes_and_commits_a_transaction_over_ssl(
        tls_broker: BrokerUnderTest, pki: Pki) -> None:
    topic = f"tls-os-{uuid.uuid4().hex[:8]}"
    values = oncestream_roundtrip(_ck_conf(tls_broker, pki, "MTLS", pki.alice), topic)
    assert values == [f"os-{i}".encode() for i in range(5)]
    # ... and librdkafka reads the same over the other TLS listener.
    assert librdkafka_read_committed(_ck_conf(tls_broker, pki, "SSL"), topic, 5) == values



# -- CLI and the Spark connector's protocol client -------------------------------------------------
def test_cli_client_commands_take_security_from_command_config(tls_broker: BrokerUnderTest, pki: Pki,
                                                               tmp_path: Path) -> None:
    """``--command-config FILE`` of librdkafka properties, as Kafka's tools take it."""
    import subprocess

    from tests.support.brokers import oncestream_executable

    props = tmp_path / "client.properties"
    props.write_text("# mutual TLS\nsecurity.protocol=SSL\n"
                     f"ssl.ca.location={pki.ca}\nssl.certificate.location={pki.alice.cert}\n"
                     f"ssl.key.location={pki.alice.key}\n")
    topic = f"tls-cli-{uuid.uuid4().hex[:8]}"
    base = [oncestream_executable()]
    tls = ["-b", tls_broker.listener_bootstrap("MTLS"), "--command-config", str(props)]

    def run(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([*base, *args], input=stdin, capture_output=True, timeout=TIMEOUT_S)

    assert run("topics", "create", topic, *tls).returncode == 0
    assert run("produce", topic, *tls, stdin=b"one\ntwo\n").returncode == 0
    out = run("consume", topic, "--from-beginning", "--max-messages", "2", *tls)
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode().split() == ["one", "two"]
    # Without the file the TLS port does not answer a plaintext client: a clean error, no hang.
    failed = run("topics", "list", "-b", tls_broker.listener_bootstrap("MTLS"))
    assert failed.returncode != 0
    assert b"Traceback" not in failed.stderr


def test_spark_log_client_passes_kafka_ssl_options_through(tls_broker: BrokerUnderTest, pki: Pki) -> None:
    """The connector's own protocol client honours ``kafka.security.protocol`` / ``kafka.ssl.*``
    (options without the prefix, parsed once on the driver, pickled to the tasks)."""
    import pickle

    from oncestream.spark.errors import BrokerRequestError
    from oncestream.spark.log_client import ClientSettings, LogClient
    from oncestream.spark.options import kafka_params
    from tests.support.clients import create_topic, unique_topic

    options = {"kafka.bootstrap.servers": tls_broker.listener_bootstrap("MTLS"),
               **{f"kafka.{k}": v for k, v in _ssl_conf(pki, pki.alice).items()}}
    settings = pickle.loads(pickle.dumps(ClientSettings.from_config(kafka_params(options))))
    topic = unique_topic("tls-spark")
    create_topic(tls_broker.listener_bootstrap("PLAINTEXT"), topic, partitions=2)
    with LogClient(options["kafka.bootstrap.servers"], settings=settings) as client:
        assert client.metadata([topic]) == {topic: [0, 1]}
    # Without the ssl options the MTLS listener does not answer the same client.
    with LogClient(options["kafka.bootstrap.servers"], settings=ClientSettings(retry_backoff_ms=10),
                   timeout_s=5) as plain:
        with pytest.raises(BrokerRequestError):
            plain.metadata([topic])


def test_spark_partition_reader_reads_over_tls(tls_broker: BrokerUnderTest, pki: Pki) -> None:
    """The source's task body (``read_range``) over an SSL listener: each Fetch response is
    received with ``recv_into`` through the TLS socket into one buffer, several MB of it (many TLS
    records per response), read without copying, and every record comes back once, in order."""
    from oncestream.spark.log_client import ClientSettings
    from oncestream.spark.options import kafka_params
    from oncestream.spark.partition_reader import OffsetRange, read_range
    from tests.support.clients import create_topic, unique_topic
    from tests.support.txn import plain_produce

    topic = unique_topic("tls-read")
    plain = tls_broker.listener_bootstrap("PLAINTEXT")
    create_topic(plain, topic)
    values = [b"%06d" % i + b"x" * 4000 for i in range(1500)]  # 6 MB: two responses of up to 4 MiB
    plain_produce(plain, topic, {0: values})
    options = {f"kafka.{k}": v for k, v in _ssl_conf(pki).items()}
    settings = ClientSettings.from_config(kafka_params({"kafka.bootstrap.servers": "unused:0", **options}))
    rng = OffsetRange(topic, 0, 0, len(values), tls_broker.listener_bootstrap("SSL"), read_committed=True,
                      fail_on_data_loss=True, client=settings)
    read = [v for batch in read_range(rng) for v in batch.column("value").to_pylist()]
    assert read == values


# -- the broker command --------------------------------------------------------------------------
@pytest.mark.parametrize(("args", "message"), [
    (["--listen", "127.0.0.1:0", "--config", "listeners=PLAINTEXT://127.0.0.1:0"], "either --listen or"),
    (["--config", "listeners=SSL://127.0.0.1:0"], "ssl.keystore.location is not set"),
    (["--config", "listeners=SSL://127.0.0.1:0", "--config", "ssl.keystore.location=/nonexistent.pem"],
     "cannot load key"),
    (["--config", "listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
      "--config", "listener.security.protocol.map=PLAINTEXT:PLAINTEXT"], "no security protocol"),
])
@not_on_cluster(BROKER_COMMAND_CHECK)
def test_broker_refuses_bad_listener_or_tls_settings_with_a_message(tmp_path: Path, args: list[str],
                                                                    message: str) -> None:
    import subprocess

    from tests.support.brokers import oncestream_executable

    result = subprocess.run([oncestream_executable(), "broker", "--data-dir", str(tmp_path / "data"), *args],
                            capture_output=True, timeout=TIMEOUT_S)
    assert result.returncode != 0
    assert message in result.stderr.decode()
    assert b"Traceback" not in result.stderr


@not_on_cluster(RESTART_KEEPS_LISTENER_PORTS)
def test_restart_binds_the_same_listener_ports(broker_factory, pki: Pki) -> None:
    """Clients reconnect to the addresses they know: port-0 listeners come back on their ports."""
    broker = broker_factory(config={
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "ssl.keystore.location": str(pki.server_keystore),
    })
    before = dict(broker.listener_ports)
    assert broker.bootstrap == broker.listener_bootstrap("PLAINTEXT")
    broker.restart(crash=True)
    assert broker.listener_ports == before
    assert _works(_connect(broker, "SSL", _ssl_conf(pki)))
