"""SCRAM users (issue 14 point 3, KIP-554): ``oncestream users add|list|delete`` offline and
online, librdkafka's AlterUserScramCredentials, and credentials that survive a broker SIGKILL."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError as CKafkaError
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from tests.support.brokers import BrokerProcess
from tests.support.clients import CLIENT_TIMEOUT_S, unique_topic
from tests.support.cluster_kind import DATA_DIR_USERS, not_on_cluster
from tests.support.sasl import librdkafka_conf, sasl_broker_config

pytestmark = pytest.mark.interop

ONCESTREAM = str(Path(sys.executable).parent / "oncestream")


def users_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ONCESTREAM, "users", *args], capture_output=True, text=True, timeout=60)


def can_produce(broker: BrokerProcess, mechanism: str, user: str, password: str) -> bool:
    """One produce as ``user``: True if delivered, False on an authentication error."""
    errors: list[CKafkaError] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "error_cb": errors.append,
                         **librdkafka_conf(mechanism, user, password)})
    producer.produce(unique_topic("users"), b"v")
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    left = producer.flush(0.2)
    while left and not any(e.code() == CKafkaError._AUTHENTICATION for e in errors):
        assert time.monotonic() < deadline, f"neither delivered nor refused: {errors}"
        left = producer.flush(0.2)
    producer.purge()
    return left == 0


@not_on_cluster(DATA_DIR_USERS)
def test_users_offline_bootstrap_online_management_and_sigkill(tmp_path):
    data_dir = tmp_path / "data"
    # Offline, into a new empty data dir: the first SCRAM admin.
    added = users_cli("add", "--data-dir", str(data_dir), "--user", "root", "--mechanism", "SCRAM-SHA-512",
                      "--password", "root-pw", "--iterations", "8192")
    assert added.returncode == 0, added.stderr
    listed = users_cli("list", "--data-dir", str(data_dir))
    assert listed.stdout.split("\n")[0] == "root SCRAM-SHA-512 iterations=8192"
    assert b"root-pw" not in (data_dir / "scram-credentials.json").read_bytes()

    broker = BrokerProcess(data_dir, config=sasl_broker_config())
    broker.start()
    try:
        assert can_produce(broker, "SCRAM-SHA-512", "root", "root-pw")
        busy = users_cli("list", "--data-dir", str(data_dir))
        assert busy.returncode == 1
        assert "in use" in busy.stderr

        # Online with the root user's SCRAM login from a librdkafka properties file.
        config = tmp_path / "client.properties"
        config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
                          "sasl.username=root\nsasl.password=root-pw\n")
        online = ("--bootstrap-server", broker.bootstrap, "--command-config", str(config))
        assert users_cli("add", *online, "--user", "carol", "--mechanism", "SCRAM-SHA-256",
                         "--password", "carol-pw").returncode == 0
        # librdkafka's KIP-554 client as well.
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, **librdkafka_conf("SCRAM-SHA-512", "root", "root-pw")})
        futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"dave-pw")])
        for future in futures.values():
            future.result(CLIENT_TIMEOUT_S)
        listed = users_cli("list", *online)
        assert listed.returncode == 0, listed.stderr
        assert set(listed.stdout.split("\n")) >= {"carol SCRAM-SHA-256 iterations=4096",
                                                   "dave SCRAM-SHA-512 iterations=4096",
                                                   "root SCRAM-SHA-512 iterations=8192"}
        described = admin.describe_user_scram_credentials(["nobody"])
        (future,) = described.values() if isinstance(described, dict) else [described]
        with pytest.raises(Exception, match="does not exist"):
            future.result(CLIENT_TIMEOUT_S)

        broker.restart(crash=True)  # SIGKILL: acknowledged credentials must be on disk
        assert can_produce(broker, "SCRAM-SHA-256", "carol", "carol-pw")
        assert can_produce(broker, "SCRAM-SHA-512", "dave", "dave-pw")
        assert not can_produce(broker, "SCRAM-SHA-512", "dave", "wrong")

        assert users_cli("delete", *online, "--user", "carol").returncode == 0
        assert not can_produce(broker, "SCRAM-SHA-256", "carol", "carol-pw")
        missing = users_cli("delete", *online, "--user", "carol", "--mechanism", "SCRAM-SHA-256")
        assert missing.returncode == 1
        assert "does not exist" in missing.stderr
    finally:
        broker.kill()
    offline = users_cli("list", "--data-dir", str(data_dir))
    assert "carol" not in offline.stdout
    assert "dave SCRAM-SHA-512" in offline.stdout
    assert users_cli("delete", "--data-dir", str(data_dir), "--user", "dave").returncode == 0
    assert "dave" not in users_cli("list", "--data-dir", str(data_dir)).stdout
