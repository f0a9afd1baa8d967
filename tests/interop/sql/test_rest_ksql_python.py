"""ksql-python-ng 0.29.0.1 (PyPI, used as-is: ``from ksql import KSQLAPI``) drives the REST API:
``/info`` (its version check), ``/ksql`` statements and errors, push queries over HTTP/1.1
(``/query``, chunked) and HTTP/2 (``use_http2=True``: ``/query-stream`` over h2c prior knowledge),
``/close-query`` and ``/inserts-stream`` (HTTP/2).

The engine behind the server is the in-memory test engine (the REST layer is under test); the
e2e test with a real node is tests/interop/sql/test_rest_e2e.py."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator

import pytest

from tests.support.cluster_kind import IN_MEMORY_SQL_ENGINE, not_on_cluster
from tests.unit.sql.test_rest_support import RunningServer, publish_when_running, running_server

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # ksql.utils imports telnetlib
    from ksql import KSQLAPI
    from ksql.errors import KSQLError

pytestmark = [pytest.mark.interop, not_on_cluster(IN_MEMORY_SQL_ENGINE),
              pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")]  # its close_query


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with running_server() as srv:
        yield srv


@pytest.fixture
def api(server: RunningServer) -> KSQLAPI:
    # The constructor checks the server's version through GET /info.
    return KSQLAPI(server.url, timeout=30)


def test_version_and_statements(api: KSQLAPI, server: RunningServer) -> None:
    assert api.get_ksql_version() == "0.29.0"
    result = api.ksql("SHOW STREAMS")
    assert result[0]["@type"] == "streams"
    assert [s["name"] for s in result[0]["streams"]] == ["S"]
    created = api.ksql("CREATE STREAM T (A INT) WITH (KAFKA_TOPIC='t', VALUE_FORMAT='JSON') T",
                       stream_properties={"ksql.streams.auto.offset.reset": "earliest"})
    assert created[0]["commandStatus"]["status"] == "SUCCESS"
    assert server.engine.executed[-1][1] == {"ksql.streams.auto.offset.reset": "earliest"}


def test_statement_error_raises_ksql_error_with_the_code(api: KSQLAPI) -> None:
    with pytest.raises(KSQLError) as info:
        api.ksql("FAIL this")
    assert info.value.error_code == 40001
    with pytest.raises(KSQLError) as info:
        api.ksql("SELECT * FROM S EMIT CHANGES")
    assert info.value.error_code == 40002


def test_push_query_over_http1(api: KSQLAPI, server: RunningServer) -> None:
    publisher = publish_when_running(server, [[1, "a"], [2, "b"]])
    chunks = list(api.query("SELECT * FROM S EMIT CHANGES LIMIT 2"))
    publisher.join()
    text = "".join(chunks)
    assert json.loads(text) == [
        {"header": {"queryId": list(server.engine.queries)[-1], "schema": "`ID` INTEGER, `NAME` STRING"}},
        {"row": {"columns": [1, "a"]}}, {"row": {"columns": [2, "b"]}}, {"finalMessage": "Limit Reached"}]


def test_push_query_over_http2_parsed(api: KSQLAPI, server: RunningServer) -> None:
    publisher = publish_when_running(server, [[3, "c"], [4, "d"]])
    rows = list(api.query("SELECT * FROM S EMIT CHANGES LIMIT 2", use_http2=True, parse=True))
    publisher.join()
    assert rows == [{"ID": 3, "NAME": "c"}, {"ID": 4, "NAME": "d"}]


def test_close_query_ends_an_http2_push_query(api: KSQLAPI, server: RunningServer) -> None:
    results = api.query("SELECT * FROM S EMIT CHANGES", use_http2=True)
    header = json.loads(next(results))
    assert api.close_query(header["queryId"]) is True
    assert list(results) == []
    assert server.engine.queries[header["queryId"]].closed.is_set()
    assert api.close_query("no_such_query") is False


def test_inserts_stream(api: KSQLAPI, server: RunningServer) -> None:
    acks = api.inserts_stream("S", [{"ID": 7, "NAME": "g"}, {"ID": 8}])
    assert acks == [{"status": "ok", "seq": 0}, {"status": "ok", "seq": 1}]
    assert server.engine.streams["S"].rows[-2:] == [[7, "g"], [8, None]]
