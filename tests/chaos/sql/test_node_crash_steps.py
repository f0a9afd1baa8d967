"""SIGKILL a SQL-server node at each step of the command-topic write protocol (issue 12): no
statement is lost after its HTTP success, none is applied twice, none half-applied; the restarted
node rebuilds the same metastore as a node replaying the topic from scratch.

The node kills itself at a step of oncestream.sql.server.command_topic.WRITE_STEPS through a write-step
observer the test tree injects (``SqlServerProcess.start(crash_step=...)``,
tests/support/sql_node_with_faults.py).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest

from oncestream.sql.server.command_topic import WRITE_STEPS, command_topic_name
from tests.support.narrow import present
from tests.support.sql_servers import LAZY_SPARK, SqlServerProcess
from tests.support.txn import READ_COMMITTED, read_to_end

pytestmark = pytest.mark.chaos

# Up to "produced" nothing committed is in the topic (a produced record's transaction is aborted
# when the next writer's init_transactions fences it); from "committed" on the command is there.
COMMITTED_FROM = WRITE_STEPS.index("committed")


def _create(name: str) -> str:
    return f"CREATE STREAM {name} (ID INT KEY, V STRING) WITH (KAFKA_TOPIC='{name.lower()}', PARTITIONS=1, VALUE_FORMAT='JSON');"


def _committed_commands(bootstrap: str, topic: str) -> list[str]:
    """Keys of the committed records of the command topic (a librdkafka read_committed reader,
    read up to its end-of-partition at the last stable offset: no fixed idle wait)."""
    records = read_to_end(bootstrap, topic, 1, isolation=READ_COMMITTED)[0]
    return [present(record.key, "record key").decode() for record in records]


def _streams(node: SqlServerProcess) -> list[tuple[str, str]]:
    return sorted((s["name"], s["topic"]) for s in node.ok("SHOW STREAMS;")[0]["streams"])


@pytest.mark.parametrize("cycles", [1, pytest.param(3, marks=pytest.mark.slow)])
def test_sigkill_at_every_write_step(broker, tmp_path: Path, cycles: int) -> None:
    service_id = f"crash_{uuid.uuid4().hex[:6]}_"
    topic = command_topic_name(service_id)
    node = SqlServerProcess(bootstrap=broker.bootstrap, service_id=service_id, state_dir=tmp_path / "node",
                            config=LAZY_SPARK)
    node.start()
    acknowledged: list[str] = []
    try:
        for index, step in [(i, s) for _cycle in range(cycles) for i, s in enumerate(WRITE_STEPS)]:
            before = f"OK_{index}_{uuid.uuid4().hex[:4]}".upper()
            node.ok(_create(before))            # acknowledged: must survive every crash
            acknowledged.append(before)
            node.kill()
            node.start(crash_step=step)
            victim = f"CRASH_{index}_{uuid.uuid4().hex[:4]}".upper()
            with pytest.raises(httpx.TransportError):
                node.ksql(_create(victim))      # the node dies before answering
            node.process.wait(60)  # type: ignore[union-attr]
            assert node.process.returncode == -9, node.log_tail()  # type: ignore[union-attr]
            node.start()                        # restarted without the fault
            names = [name for name, _topic in _streams(node)]
            assert all(a in names for a in acknowledged), (step, names)
            if index >= COMMITTED_FROM:
                assert victim in names, f"committed at {step} but not applied: {names}"
            else:
                assert victim not in names, f"applied although the node died at {step}"
            # Retrying the statement: applied exactly once either way.
            retry = node.ksql(_create(victim))
            if victim in names:
                assert retry.status_code == 400, retry.text
                assert "already exists" in retry.json()["message"], retry.text
            else:
                assert retry.status_code == 200, retry.text
            keys = _committed_commands(broker.bootstrap, topic)
            assert keys.count(f"stream/`{victim}`/create") == 1, (step, keys)
            assert all(keys.count(f"stream/`{a}`/create") == 1 for a in acknowledged), keys
            acknowledged.append(victim)
        # A node replaying from scratch builds the same metastore.
        fresh = SqlServerProcess(bootstrap=broker.bootstrap, service_id=service_id, state_dir=tmp_path / "fresh",
                                 config=LAZY_SPARK, name="fresh")
        fresh.start()
        try:
            expected = _streams(node)
            assert _streams(fresh) == expected
            for name, _topic in expected:
                a = node.ok(f"DESCRIBE {name};")[0]["sourceDescription"]
                b = fresh.ok(f"DESCRIBE {name};")[0]["sourceDescription"]
                assert a["fields"] == b["fields"]
                assert a["statement"] == b["statement"]
        finally:
            fresh.kill()
    finally:
        node.kill()
