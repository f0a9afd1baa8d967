"""A SASL_PLAINTEXT broker for the SASL suites: PLAIN users from JAAS, SCRAM users bootstrapped
in the data dir before start (what ``oncestream users add --data-dir`` writes), and each client's
security settings."""

from __future__ import annotations

from pathlib import Path

from oncestream.broker.sasl.credentials import ScramCredentialStore
from oncestream.broker.sasl.scram import MECHANISMS, make_credential
from tests.support.brokers import BrokerProcess
from tests.support.txn import TXN_BROKER_CONFIG

PLAIN_USERS = {"admin": "admin-secret", "alice": "alice-secret"}
SCRAM_USERS = {"scram-alice": "scram-secret"}  # under both SCRAM mechanisms
MECHANISM_USERS = {"PLAIN": ("alice", "alice-secret"),
                   "SCRAM-SHA-256": ("scram-alice", "scram-secret"),
                   "SCRAM-SHA-512": ("scram-alice", "scram-secret")}
ALL_MECHANISMS = list(MECHANISM_USERS)


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


def librdkafka_conf(mechanism: str, user: str | None = None, password: str | None = None) -> dict[str, str]:
    """confluent-kafka / oncestream client settings (librdkafka's names)."""
    default_user, default_pw = MECHANISM_USERS[mechanism]
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": user or default_user, "sasl.password": password or default_pw}


def kafka_python_conf(mechanism: str, user: str | None = None, password: str | None = None) -> dict[str, str]:
    default_user, default_pw = MECHANISM_USERS[mechanism]
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism,
            "sasl_plain_username": user or default_user, "sasl_plain_password": password or default_pw}
