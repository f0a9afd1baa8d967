"""HTTPS and HTTP Basic authentication as confluent-kafka's Schema Registry client configures them
(``url=https://...``, ``ssl.ca.location``, ``basic.auth.user.info``), against two instances so a
forwarded write carries the credentials too."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import httpx
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from oncestream.broker_process import ManagedBroker
from oncestream.sql.server.rest.users_file import set_user
from tests.support.brokers import NO_INITIAL_REBALANCE_DELAY
from tests.support.certs import Pki
from tests.support.schema_registries import SchemaRegistryProcess

pytestmark = pytest.mark.interop
MODULE_BROKER_CONFIG = NO_INITIAL_REBALANCE_DELAY

SCHEMA = Schema(json.dumps({"type": "record", "name": "S", "fields": [{"name": "a", "type": "int"}]}), "AVRO")


def test_https_and_basic_auth_with_forwarding(broker: ManagedBroker, pki: Pki, tmp_path: Path) -> None:
    users = tmp_path / "users"
    set_user(users, "alice", "wonderland")
    suffix = uuid.uuid4().hex[:8]
    config = {"kafkastore.topic": f"_schemas_{suffix}", "schema.registry.group.id": f"sr-{suffix}",
              "listeners": "https://127.0.0.1:0", "listener.ssl.keystore.location": str(pki.server_keystore),
              "inter.instance.ssl.ca.location": str(pki.ca),
              "authentication.method": "BASIC", "authentication.users.file": str(users)}
    first = SchemaRegistryProcess(bootstrap=broker.bootstrap, work_dir=tmp_path, config=config, name="first")
    second = SchemaRegistryProcess(bootstrap=broker.bootstrap, work_dir=tmp_path, config=config, name="second")
    try:
        first.start()
        second.start()
        assert first.url.startswith("https://")
        assert second.url.startswith("https://")
        clients = [SchemaRegistryClient({"url": p.url, "ssl.ca.location": str(pki.ca),
                                         "basic.auth.user.info": "alice:wonderland"}) for p in (first, second)]
        schema_id = None
        for _ in range(300):  # up to a minute, until a primary is elected (registering is idempotent)
            try:
                schema_id = clients[1].register_schema(f"secure-{suffix}", SCHEMA)
                break
            except SchemaRegistryError as exc:
                if exc.http_status_code != 500:
                    raise
                time.sleep(0.2)
        assert schema_id is not None
        assert clients[0].register_schema(f"secure-{suffix}", SCHEMA) == schema_id
        assert clients[0].get_schema(schema_id).schema_str == SCHEMA.schema_str

        wrong = SchemaRegistryClient({"url": first.url, "ssl.ca.location": str(pki.ca),
                                      "basic.auth.user.info": "alice:looking-glass"})
        with pytest.raises(SchemaRegistryError) as refused:
            wrong.get_subjects()
        assert refused.value.http_status_code == 401
        anonymous = httpx.get(f"{second.url}/subjects", verify=str(pki.ca), timeout=10)
        assert anonymous.status_code == 401
        assert anonymous.json()["error_code"] == 401
        # A client that does not trust the server's CA fails the handshake.
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{first.url}/subjects", timeout=10)
    finally:
        first.stop()
        second.stop()
