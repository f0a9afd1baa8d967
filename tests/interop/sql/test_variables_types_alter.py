"""ksqlDB statements that change how later statements read (issue 24 point 4), on a real node over
the broker under test: variables (DEFINE / ${name} / UNDEFINE / SHOW VARIABLES, per request as ksqlDB keeps
them), CREATE TYPE used by CREATE STREAM, and ALTER STREAM ... ADD COLUMN shown by DESCRIBE. The
durable ones (types, altered columns) go through the command topic and survive a node restart.
ksql-python-ng (PyPI, as-is; it has no sessionVariables) sends a request that DEFINEs a variable
and uses it. The node starts Spark lazily: nothing here runs a query."""

from __future__ import annotations

import uuid
import warnings

import pytest

# The module-level node of test_node_info (lazy Spark, its own service id and state directory):
# pytest makes one for this module too.
from tests.interop.sql.test_node_info import node  # noqa: F401
from tests.support.sql_servers import SqlServerProcess

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # ksql.utils imports telnetlib
    from ksql import KSQLAPI

pytestmark = pytest.mark.interop


def columns(node: SqlServerProcess, name: str) -> list[tuple[str, str]]:
    (described,) = node.ok(f"DESCRIBE {name};")
    return [(f["name"], f["schema"]["type"]) for f in described["sourceDescription"]["fields"]]


def restart(node: SqlServerProcess) -> None:
    node.terminate()
    node.start()


def test_variables_types_and_alter_through_a_restart(node: SqlServerProcess) -> None:
    suffix = uuid.uuid4().hex[:6].upper()
    stream, type_name = f"VTA_{suffix}", f"ADDR_{suffix}"
    entities = node.ok(
        f"DEFINE topic = '{stream.lower()}'; DEFINE name = '{stream}';"
        f"CREATE TYPE {type_name} AS STRUCT<number INT, street STRING>;"
        "CREATE STREAM ${name} (id INT KEY, home " + type_name + ") "
        "WITH (kafka_topic='${topic}', value_format='JSON', partitions=1);"
        "SHOW VARIABLES; UNDEFINE topic; UNDEFINE topic; SHOW TYPES;",
        {"ksql.variable.substitution.enable": True})
    created_type, created_stream, variables, warning, types = entities
    assert created_type["commandStatus"]["message"] == (
        f"Registered custom type with name '{type_name}' and SQL type STRUCT<`NUMBER` INTEGER, `STREET` STRING>")
    assert created_stream["statementText"].startswith(f"CREATE STREAM {stream} (")
    assert created_stream["commandStatus"]["status"] == "SUCCESS"
    assert variables["variables"] == [{"name": "name", "value": stream}, {"name": "topic", "value": stream.lower()}]
    assert warning == {"@type": "warning_entity", "statementText": "UNDEFINE topic;", "warnings": [],
                       "message": "Cannot undefine variable 'topic' which was never defined"}
    assert types["types"][type_name]["type"] == "STRUCT"
    # Variables live in their request: a later one without sessionVariables does not know them.
    refused = node.ksql("DESCRIBE ${name};")
    assert refused.status_code == 400
    assert refused.json()["message"].startswith("Illegal argument at Line: 1, Col: 10.")

    altered = node.ok(f"ALTER STREAM {stream} ADD COLUMN note STRING, ADD work {type_name};")
    assert altered[0]["commandStatus"]["message"] == f"Stream {stream} altered."
    expected = [("ID", "INTEGER"), ("HOME", "STRUCT"), ("NOTE", "STRING"), ("WORK", "STRUCT")]
    assert columns(node, stream) == expected

    restart(node)
    assert columns(node, stream) == expected
    (types,) = node.ok("SHOW TYPES;")
    assert [f["name"] for f in types["types"][type_name]["fields"]] == ["NUMBER", "STREET"]
    # The type resolves after the restart too: a new stream uses it, then it is dropped.
    node.ok(f"CREATE STREAM {stream}_2 (id INT KEY, home {type_name}) "
            f"WITH (kafka_topic='{stream.lower()}', value_format='JSON');")
    assert columns(node, f"{stream}_2") == [("ID", "INTEGER"), ("HOME", "STRUCT")]
    dropped = node.ok(f"DROP TYPE {type_name};")
    assert dropped[0]["commandStatus"]["message"] == f"Dropped type '{type_name}'"


def test_ksql_python_sends_a_request_that_defines_and_uses_a_variable(node: SqlServerProcess) -> None:
    assert node.url is not None
    api = KSQLAPI(node.url, timeout=120)
    stream = f"VTA_PY_{uuid.uuid4().hex[:6].upper()}"
    result = api.ksql(f"DEFINE s = '{stream}'; CREATE STREAM ${{s}} (id INT KEY, v STRING) "
                      f"WITH (kafka_topic='{stream.lower()}', value_format='JSON', partitions=1);")
    assert result[0]["commandStatus"]["status"] == "SUCCESS"
    assert [s["name"] for s in api.ksql("SHOW STREAMS;")[0]["streams"] if s["name"] == stream] == [stream]
