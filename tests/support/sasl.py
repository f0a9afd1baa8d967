"""A SASL_PLAINTEXT broker for the SASL suites: PLAIN users from JAAS, SCRAM users bootstrapped
in the data dir before start (what ``oncestream users add --data-dir`` writes) or, for a broker of
the kind under test (``sasl_broker_of_kind``: our single broker or a cluster, whose SCRAM users
live in PostgreSQL), created with AlterUserScramCredentials once it runs; and each client's
security settings."""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialUpsertion,
)

from oncestream.broker.sasl.credentials import ScramCredentialStore
from oncestream.broker.sasl.scram import MECHANISMS, make_credential
from oncestream.client.common.connection import BrokerConnection
from oncestream.client.common.sasl import SaslClientError, SaslCredentials
from oncestream.client.common.tls import ssl_context_for
from tests.support.brokers import BrokerProcess
from tests.support.clients import CLIENT_TIMEOUT_S
from tests.support.cluster_kind import BrokerUnderTest, processes_of
from tests.support.metrics import METRICS_BROKER_CONFIG
from tests.support.txn import TXN_BROKER_CONFIG

PLAIN_USERS = {"admin": "admin-secret", "alice": "alice-secret"}
SCRAM_USERS = {"scram-alice": "scram-secret"}  # under both SCRAM mechanisms
MECHANISM_USERS = {"PLAIN": ("alice", "alice-secret"),
                   "SCRAM-SHA-256": ("scram-alice", "scram-secret"),
                   "SCRAM-SHA-512": ("scram-alice", "scram-secret")}
ALL_MECHANISMS = list(MECHANISM_USERS)
# The SASL_PLAINTEXT suites' broker (test_sasl_clients, test_sasl_negative): an hour-long SASL
# session (KIP-368) and /metrics. One config, so that the cluster kind runs both on one cluster.
SASL_SUITES_EXTRA = {"connections.max.reauth.ms": "3600000", **METRICS_BROKER_CONFIG}


def plain_jaas(users: dict[str, str], login: str | None = None) -> str:
    """A PlainLoginModule config accepting ``users``; ``login``: one of them whose name and
    password are also the broker's own (``username``/``password``: a cluster broker's login to
    its peers, docs/cluster.md)."""
    own = f'username="{login}" password="{users[login]}" ' if login is not None else ""
    entries = " ".join(f'user_{name}="{pw}"' for name, pw in users.items())
    return f"org.apache.kafka.common.security.plain.PlainLoginModule required {own}{entries};"


def sasl_broker_config(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The default listener as SASL_PLAINTEXT with PLAIN and both SCRAMs enabled; a cluster's
    brokers log in to each other on it with PLAIN as ``admin``."""
    config = dict(TXN_BROKER_CONFIG)
    config.update({
        "listener.security.protocol.map": "PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.plaintext.plain.sasl.jaas.config": plain_jaas(PLAIN_USERS, login="admin"),
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "connection.failed.authentication.delay.ms": "20",
    })
    config.update(extra or {})
    return config


def add_scram_users(data_dir: Path, users: dict[str, str], iterations: int = 4096) -> None:
    """Write SCRAM credentials into a stopped broker's data dir."""
    store = ScramCredentialStore.open(data_dir)
    store.apply([(user, mech, make_credential(m, pw, iterations)) for user, pw in users.items()
                 for mech, m in MECHANISMS.items()], [])


def start_sasl_broker(data_dir: Path, extra: dict[str, str] | None = None) -> BrokerProcess:
    data_dir.mkdir(parents=True, exist_ok=True)
    add_scram_users(data_dir, SCRAM_USERS)
    broker = BrokerProcess(data_dir=data_dir, config=sasl_broker_config(extra))
    broker.start()
    return broker


def sasl_broker_of_kind(factory: Callable[..., BrokerUnderTest], extra: dict[str, str] | None = None,
                        admin_conf: Mapping[str, str] | None = None) -> BrokerUnderTest:
    """A broker of the kind under test from conftest's ``module_our_broker_factory`` with
    ``sasl_broker_config(extra)`` and ``SCRAM_USERS`` (``add_scram_users_online``; ``admin_conf``:
    the settings of a client that may create them, default PLAIN ``admin`` on ``bootstrap``)."""
    broker = factory(sasl_broker_config(extra))
    add_scram_users_online(broker, SCRAM_USERS, admin_conf or librdkafka_conf("PLAIN", "admin", PLAIN_USERS["admin"]))
    return broker


def add_scram_users_online(broker: BrokerUnderTest, users: Mapping[str, str], admin_conf: Mapping[str, str],
                           iterations: int = 4096) -> None:
    """Create (or update) ``users`` under both SCRAM mechanisms with AlterUserScramCredentials,
    then wait until every broker process authenticates each of them (a cluster's brokers learn a
    credential from PostgreSQL: a NOTIFY, or a poll within a second). ``admin_conf``: a client of
    ``broker.bootstrap`` allowed to alter credentials; the brokers are asked on the same listener."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **admin_conf})
    upserts: list[UserScramCredentialAlteration] = [
        UserScramCredentialUpsertion(user, ScramCredentialInfo(getattr(ScramMechanism, mech.replace("-", "_")), iterations),
                                     password.encode())
        for user, password in users.items() for mech in MECHANISMS]
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(CLIENT_TIMEOUT_S)
    tls = ssl_context_for(dict(admin_conf))
    for process in processes_of(broker):
        host, port = process.bootstrap.rsplit(":", 1)
        for user, password in users.items():
            for mech in MECHANISMS:
                deadline = time.monotonic() + CLIENT_TIMEOUT_S
                while not _authenticates(host, int(port), SaslCredentials(mech, user, password), tls):
                    assert time.monotonic() < deadline, f"{process.bootstrap} does not authenticate {user} ({mech})"
                    time.sleep(0.1)


def _authenticates(host: str, port: int, credentials: SaslCredentials, tls: ssl.SSLContext | None) -> bool:
    try:
        with BrokerConnection(host, port, sasl=credentials, ssl_context=tls):
            return True
    except SaslClientError:
        return False


def librdkafka_conf(mechanism: str, user: str | None = None, password: str | None = None) -> dict[str, str]:
    """confluent-kafka / oncestream client settings (librdkafka's names)."""
    default_user, default_pw = MECHANISM_USERS[mechanism]
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": user or default_user, "sasl.password": password or default_pw}


def kafka_python_conf(mechanism: str, user: str | None = None, password: str | None = None) -> dict[str, str]:
    default_user, default_pw = MECHANISM_USERS[mechanism]
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism,
            "sasl_plain_username": user or default_user, "sasl_plain_password": password or default_pw}
