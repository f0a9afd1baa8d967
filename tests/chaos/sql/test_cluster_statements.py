"""Two SQL-server nodes with one service id (issue 12, "a cluster of servers"): conflicting
statements sent concurrently to both, many times. The command topic's single-writer protocol
(docs/sql-command-topic.md) lets exactly one of each pair through; both nodes end with the same
metastore (DESCRIBE of everything compared).
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.sql_servers import LAZY_SPARK, SqlServerProcess, wait_until

pytestmark = pytest.mark.chaos



def _create(name: str, schema: str) -> str:
    return (f"CREATE STREAM {name} ({schema}) WITH (KAFKA_TOPIC='{name.lower()}', PARTITIONS=1, "
            "VALUE_FORMAT='JSON');")


def _describe_all(node: SqlServerProcess, names: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in names:
        entity = node.ok(f"DESCRIBE {name} EXTENDED;")[0]
        description = entity["sourceDescription"]
        # Everything that comes from the metastore (not per-node runtime statistics).
        out[name] = {k: description.get(k) for k in ("name", "type", "fields", "topic", "keyFormat", "valueFormat",
                                                     "statement", "partitions", "writeQueries", "readQueries")}
    streams = node.ok("SHOW STREAMS;")[0]["streams"]
    out["<streams>"] = sorted((s["name"], s["topic"]) for s in streams)
    return out


@pytest.mark.parametrize("rounds", [20, pytest.param(150, marks=pytest.mark.slow)])
def test_concurrent_conflicting_creates_exactly_one_wins(broker, tmp_path: Path, rounds: int) -> None:
    service_id = f"conflict_{uuid.uuid4().hex[:6]}_"
    nodes = [SqlServerProcess(bootstrap=broker.bootstrap, service_id=service_id, state_dir=tmp_path / n,
                              config=LAZY_SPARK, name=n) for n in ("a", "b")]
    for node in nodes:
        node.start()
    try:
        names = [f"S{i}_{uuid.uuid4().hex[:4]}".upper() for i in range(rounds)]
        schemas = ["ID INT KEY, V STRING", "ID BIGINT KEY, W DOUBLE, X STRING"]
        last_sequence = -1
        for name in names:
            results: dict[int, httpx.Response] = {}
            barrier = threading.Barrier(2)

            def send(i: int, name: str = name, barrier: threading.Barrier = barrier,
                     results: dict[int, httpx.Response] = results) -> None:
                barrier.wait()
                results[i] = nodes[i].ksql(_create(name, schemas[i]))

            threads = [threading.Thread(target=send, args=(i,)) for i in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(180)
            statuses = sorted(r.status_code for r in results.values())
            assert statuses == [200, 400], {i: r.text for i, r in results.items()}
            winner = next(i for i, r in results.items() if r.status_code == 200)
            loser = results[1 - winner].json()
            assert loser["error_code"] == 40001, loser
            assert "already exists" in loser["message"], loser
            status = results[winner].json()[0]
            assert status["commandStatus"]["status"] == "SUCCESS"
            assert status["commandSequenceNumber"] > last_sequence
            last_sequence = status["commandSequenceNumber"]
            # The winner's schema is the one both nodes describe.
            fields = [f["name"] for f in nodes[1 - winner].ok(f"DESCRIBE {name};",
                                                              command_sequence_number=last_sequence)[0]
                      ["sourceDescription"]["fields"]]
            assert fields == (["ID", "V"] if winner == 0 else ["ID", "W", "X"])
        for node in nodes:
            node.ok("SHOW STREAMS;", command_sequence_number=last_sequence)
        wait_until(lambda: _describe_all(nodes[0], names) == _describe_all(nodes[1], names),
                   "both metastores equal", timeout_s=60)
        # Every node answers /status for any command, and /clusterStatus lists both nodes.
        for node in nodes:
            status_of = node.get(f"/status/stream/`{names[-1]}`/create").json()
            assert status_of == {"status": "SUCCESS", "message": "Stream created", "queryId": None}, status_of
        hosts = sorted(n.url.split("://", 1)[1] for n in nodes if n.url)
        wait_until(lambda: sorted(nodes[0].get("/clusterStatus").json()["clusterStatus"]) == hosts,
                   "both nodes in /clusterStatus", nodes=nodes)
    finally:
        for node in nodes:
            node.kill()
