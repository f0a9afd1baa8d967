"""End to end (issue 12): ksql-python-ng 0.29.0.1 from PyPI, used as-is, drives a real SQL-server
node (``oncestream sql-server`` over the broker under test, Spark in the node): statements and their errors
on /ksql, rows in through /inserts-stream, and push queries over HTTP/1.1 (/query) and HTTP/2
(/query-stream, h2c prior knowledge) reading them back; the shell runs against the same node (the
node of tests/interop/sql/conftest.py, shared with other modules: unique stream names)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
import warnings
from pathlib import Path

import pytest

from tests.support.cluster_kind import BrokerUnderTest
from tests.support.sql_servers import SqlServerProcess

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # ksql.utils imports telnetlib
    from ksql import KSQLAPI
    from ksql.errors import KSQLError

pytestmark = [pytest.mark.interop,
              pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")]

ROOT = Path(__file__).resolve().parents[3]
EARLIEST_QUERY = {"ksql.streams.auto.offset.reset": "earliest"}   # /query's streamsProperties
EARLIEST_STREAM = {"auto.offset.reset": "earliest"}                # /query-stream's properties


@pytest.fixture(scope="module")
def node(shared_spark_node: tuple[BrokerUnderTest, SqlServerProcess]) -> SqlServerProcess:
    """conftest's node (Spark started by the first query that needs it; inserts need none),
    shared with other modules."""
    return shared_spark_node[1]


@pytest.fixture(scope="module")
def api(node: SqlServerProcess) -> KSQLAPI:
    assert node.url is not None
    return KSQLAPI(node.url, timeout=300)


@pytest.fixture(scope="module")
def stream(api: KSQLAPI) -> str:
    name = f"E2E_{uuid.uuid4().hex[:6].upper()}"
    created = api.ksql(f"CREATE STREAM {name} (ID INT KEY, NAME STRING) "
                       f"WITH (KAFKA_TOPIC='{name.lower()}', VALUE_FORMAT='JSON', PARTITIONS=1);")
    assert created[0]["@type"] == "currentStatus"
    assert created[0]["commandStatus"]["status"] == "SUCCESS"
    acks = api.inserts_stream(name, [{"ID": 1, "NAME": "a"}, {"ID": 2, "NAME": "b"}])
    assert acks == [{"status": "ok", "seq": 0}, {"status": "ok", "seq": 1}]
    return name


def test_info_listing_and_description(api: KSQLAPI, node: SqlServerProcess, stream: str) -> None:
    assert api.get_ksql_version()
    assert node.get("/info").json()["KsqlServerInfo"]["ksqlServiceId"] == node.service_id
    listed = api.ksql("SHOW STREAMS;")[0]
    assert listed["@type"] == "streams"
    assert stream in [s["name"] for s in listed["streams"]]
    described = api.ksql(f"DESCRIBE {stream};")[0]["sourceDescription"]
    assert [(f["name"], f["schema"]["type"]) for f in described["fields"]] == [("ID", "INTEGER"), ("NAME", "STRING")]


def test_statement_errors(api: KSQLAPI, stream: str) -> None:
    with pytest.raises(KSQLError) as info:
        api.ksql(f"SELECT * FROM {stream} EMIT CHANGES;")
    assert info.value.error_code == 40002
    with pytest.raises(KSQLError) as info:
        api.ksql(f"CREATE STREAM {stream} (ID INT KEY) WITH (KAFKA_TOPIC='x', VALUE_FORMAT='JSON');")
    assert info.value.error_code == 40001
    with pytest.raises(KSQLError) as info:
        api.ksql("CREATE STREAM BROKEN (ID INT WITH (;")
    assert info.value.error_code == 40001
    assert "line 1:" in info.value.msg


def test_push_query_over_http1(api: KSQLAPI, stream: str) -> None:
    chunks = list(api.query(f"SELECT ID, NAME FROM {stream} EMIT CHANGES LIMIT 2;", stream_properties=EARLIEST_QUERY))
    rows = json.loads("".join(chunks))
    assert rows[0]["header"]["schema"] == "`ID` INTEGER, `NAME` STRING"
    assert [r["row"]["columns"] for r in rows[1:3]] == [[1, "a"], [2, "b"]]
    assert rows[-1] == {"finalMessage": "Limit Reached"}


def test_push_query_over_http2(api: KSQLAPI, stream: str) -> None:
    rows = list(api.query(f"SELECT ID, NAME FROM {stream} EMIT CHANGES LIMIT 2;", use_http2=True, parse=True,
                          stream_properties=EARLIEST_STREAM))
    assert rows == [{"ID": 1, "NAME": "a"}, {"ID": 2, "NAME": "b"}]


def test_shell_runs_statements_and_a_query(node: SqlServerProcess, stream: str) -> None:
    assert node.url is not None
    done = subprocess.run(
        [sys.executable, "-m", "oncestream.cli", "sql", "--server", node.url, "-e",
         f"SHOW STREAMS; DESCRIBE {stream};\n"
         f"SET 'auto.offset.reset'='earliest'; SELECT * FROM {stream} EMIT CHANGES LIMIT 1;"],
        capture_output=True, text=True, timeout=300, env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert "|1 " in done.stdout
    assert "Limit Reached" in done.stdout
    assert f" {stream} " in done.stdout  # a row of SHOW STREAMS' table
    assert " ID    | INTEGER (key)" in done.stdout  # DESCRIBE's fields
