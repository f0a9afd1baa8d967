"""Two registry instances share one schemas topic: writes through either reach the primary
(the other forwards them), both read them back, and after a SIGKILL of the primary the survivor
takes over and registers with ids never handed out before. confluent-kafka's client is the judge."""

from __future__ import annotations

import json
import os
import signal
import uuid
from pathlib import Path

import httpx
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from oncestream.broker_process import ManagedBroker
from tests.support.brokers import NO_INITIAL_REBALANCE_DELAY
from tests.support.schema_registries import SchemaRegistryProcess

pytestmark = [pytest.mark.interop, pytest.mark.chaos]
MODULE_BROKER_CONFIG = NO_INITIAL_REBALANCE_DELAY


def avro(*fields: str) -> Schema:
    return Schema(json.dumps({"type": "record", "name": "Event",
                              "fields": [{"name": f, "type": "string", "default": ""} for f in fields]}), "AVRO")


def two_instances(broker: ManagedBroker, tmp_path: Path, names: tuple[str, str]) -> list[SchemaRegistryProcess]:
    """Two instances on one fresh schemas topic and group (6 s sessions), not started."""
    suffix = uuid.uuid4().hex[:8]
    config = {"kafkastore.topic": f"_schemas_{suffix}", "schema.registry.group.id": f"sr-{suffix}",
              "leader.session.timeout.ms": "6000"}
    return [SchemaRegistryProcess(bootstrap=broker.bootstrap, work_dir=tmp_path, config=config, name=n) for n in names]


def start_in_order(first: SchemaRegistryProcess, second: SchemaRegistryProcess) -> None:
    first.start()
    first.wait_writable()   # alone in the group: the primary
    second.start()
    second.wait_writable()  # forwards to the first


def test_two_instances_share_state_and_survive_a_sigkill_of_the_primary(broker: ManagedBroker, tmp_path: Path) -> None:
    first, second = two_instances(broker, tmp_path, ("first", "second"))
    try:
        start_in_order(first, second)
        via_first = SchemaRegistryClient({"url": first.url})
        via_second = SchemaRegistryClient({"url": second.url})
        ids = {via_first.register_schema("events-value", avro("a"))}
        # A write through the follower is forwarded, and the follower reads it back at once.
        ids.add(via_second.register_schema("events-value", avro("a", "b")))
        assert SchemaRegistryClient({"url": second.url}).get_versions("events-value") == [1, 2]
        assert SchemaRegistryClient({"url": first.url}).get_versions("events-value") == [1, 2]
        ids.add(via_second.register_schema("other-value", avro("x")))
        assert len(ids) == 3
        # DELETE /contexts through the follower: forwarded, the primary's 204 answered, read back at once
        via_first.register_schema(":.gone:x-value", avro("g"))
        via_first.delete_subject(":.gone:x-value")
        via_first.delete_subject(":.gone:x-value", permanent=True)
        assert ".gone" in via_second.get_contexts()
        deleted = httpx.delete(f"{second.url}/contexts/:.gone:", timeout=30)
        assert (deleted.status_code, deleted.content) == (204, b"")
        assert ".gone" not in via_second.get_contexts()

        first.kill()
        second.wait_writable(timeout_s=90)  # the survivor took over once the session timed out
        survivor = SchemaRegistryClient({"url": second.url})
        new_id = survivor.register_schema("events-value", avro("a", "b", "c"))
        assert new_id not in ids
        assert new_id > max(ids)
        assert survivor.get_versions("events-value") == [1, 2, 3]
        assert {survivor.get_schema(i).schema_str for i in ids} == {
            avro("a").schema_str, avro("a", "b").schema_str, avro("x").schema_str}

        # The killed instance comes back as a follower with the whole state rebuilt from the topic.
        first.start()
        first.wait_writable()
        back = SchemaRegistryClient({"url": first.url})
        assert back.get_versions("events-value") == [1, 2, 3]
        newest = back.register_schema("more-value", avro("m"))
        assert newest not in ids | {new_id}
        assert SchemaRegistryClient({"url": second.url}).get_schema(newest).schema_str == avro("m").schema_str
    finally:
        first.stop()
        second.stop()


def test_a_paused_primary_is_fenced_and_no_id_is_handed_out_twice(broker: ManagedBroker, tmp_path: Path) -> None:
    """SIGSTOP the primary until the other instance took over, then SIGCONT it: the old primary
    still believes it writes until it hears it lost its membership, but its transactional id was
    fenced by the new primary, so whatever it answers meanwhile, no id is handed out twice and
    both instances end with one state."""
    old, new = two_instances(broker, tmp_path, ("old", "new"))
    try:
        start_in_order(old, new)
        ids = {SchemaRegistryClient({"url": old.url}).register_schema("a-value", avro("a"))}
        os.kill(old.pid, signal.SIGSTOP)
        try:
            new.wait_writable(timeout_s=90)
            ids.add(SchemaRegistryClient({"url": new.url}).register_schema("b-value", avro("b")))
        finally:
            os.kill(old.pid, signal.SIGCONT)
        # Straight away through the old primary: fenced (an error) or, once it rejoined, forwarded.
        answers = []
        for name in ("c", "d"):
            response = httpx.post(f"{old.url}/subjects/{name}-value/versions", json={"schema": avro(name).schema_str},
                                  timeout=30)
            answers.append(response.status_code)
            if response.status_code == 200:
                ids.add(response.json()["id"])
        old.wait_writable(timeout_s=90)
        ids.add(SchemaRegistryClient({"url": old.url}).register_schema("e-value", avro("e")))
        subjects = sorted(SchemaRegistryClient({"url": new.url}).get_subjects())
        registered = [s for s in ("a-value", "b-value", "c-value", "d-value", "e-value") if s in subjects]
        # Every registered subject has its own id, and both instances know each of them.
        by_new = {SchemaRegistryClient({"url": new.url}).get_latest_version(s).schema_id for s in registered}
        by_old = {SchemaRegistryClient({"url": old.url}).get_latest_version(s).schema_id for s in registered}
        assert len(by_new) == len(registered)
        assert by_new == by_old
        assert ids <= by_new
        assert all(code in (200, 500) for code in answers), answers
    finally:
        old.stop()
        new.stop()
