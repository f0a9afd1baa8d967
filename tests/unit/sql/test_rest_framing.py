"""The bytes of ksqlDB's streaming responses (sans-io), checked against the framing of ksqlDB's own
writers: QueryStreamWriter (/query), JsonStreamedRowResponseWriter, JsonQueryStreamResponseWriter
and DelimitedQueryStreamResponseWriter (/query-stream), and the inserts-stream ack writers; plus
the Accept negotiation Vert.x does for a route's ``produces`` list."""

from __future__ import annotations

import json

import pytest

from oncestream.sql.engine.interface import ColumnHeader
from oncestream.sql.server.rest import framing
from oncestream.sql.server.rest.framing import DELIMITED, JSON, KSQL_V1_JSON
from oncestream.sql.server.rest.http import NotAcceptableError, negotiate

COLUMNS = [ColumnHeader("ID", "INTEGER"), ColumnHeader("NAME", "STRING"), ColumnHeader("S", "STRUCT<`A` INTEGER>")]


def test_query_push_framing_is_query_stream_writers_header_rows_then_final_message() -> None:
    w = framing.LegacyQueryWriter()
    body = (w.start("transient_S_1", COLUMNS) + w.row([1, "a", {"A": 1}]) + (w.heartbeat or b"") + w.row([2, None, None])
            + w.end(limit_reached=True, completed=True))
    assert body == (b'[{"header":{"queryId":"transient_S_1","schema":"`ID` INTEGER, `NAME` STRING, `S` STRUCT<`A` INTEGER>"}},\n'
                    b'{"row":{"columns":[1,"a",{"A":1}]}},\n'
                    b'\n'
                    b'{"row":{"columns":[2,null,null]}},\n'
                    b'{"finalMessage":"Limit Reached"}]\n')
    # The lone newlines aside, the whole response is one JSON array.
    assert json.loads(body)[-1] == {"finalMessage": "Limit Reached"}


def test_query_push_completed_without_limit_says_query_completed() -> None:
    w = framing.LegacyQueryWriter()
    assert w.end(limit_reached=False, completed=True) == b'{"finalMessage":"Query Completed"}]\n'


def test_query_pull_framing_has_no_final_message_and_no_heartbeat() -> None:
    w = framing.LegacyQueryWriter(is_pull=True)
    assert w.heartbeat is None
    body = w.start("q", COLUMNS[:1]) + w.row([1]) + w.row([2]) + w.end(limit_reached=False, completed=True)
    assert body == b'[{"header":{"queryId":"q","schema":"`ID` INTEGER"}},\n{"row":{"columns":[1]}},\n{"row":{"columns":[2]}}]'


def test_query_error_after_header_is_an_error_message_row() -> None:
    w = framing.LegacyQueryWriter()
    out = w.error({"@type": "generic_error", "error_code": 50000, "message": "boom"})
    assert out == b'\n{"errorMessage":{"@type":"generic_error","error_code":50000,"message":"boom"}},\n'


def test_query_stream_delimited_is_one_json_value_per_line() -> None:
    w = framing.DelimitedWriter()
    body = w.start("q1", COLUMNS[:2]) + w.row([1, "a"]) + w.row([2, "b"]) + w.end(limit_reached=True, completed=True)
    assert body == (b'{"queryId":"q1","columnNames":["ID","NAME"],"columnTypes":["INTEGER","STRING"]}\n'
                    b'[1,"a"]\n[2,"b"]\n')
    assert w.media_type == DELIMITED


def test_query_stream_json_is_one_array_without_newlines() -> None:
    w = framing.JsonArrayWriter()
    body = w.start("q1", COLUMNS[:2]) + w.row([1, "a"]) + w.row([2, "b"]) + w.end(limit_reached=True, completed=True)
    assert body == b'[{"queryId":"q1","columnNames":["ID","NAME"],"columnTypes":["INTEGER","STRING"]},[1,"a"],[2,"b"]]'
    assert json.loads(body)[2] == [2, "b"]


def test_query_stream_ksql_v1_json_is_streamed_rows_with_final_message() -> None:
    w = framing.StreamedRowWriter()
    body = w.start("q1", COLUMNS[:1]) + w.row([1]) + w.end(limit_reached=True, completed=True)
    assert body == (b'[{"header":{"queryId":"q1","schema":"`ID` INTEGER"}},\n{"row":{"columns":[1]}},\n'
                    b'{"finalMessage":"Limit Reached"}]')
    assert w.media_type == KSQL_V1_JSON
    pull = framing.StreamedRowWriter(is_pull=True)
    assert json.loads(pull.start("q", COLUMNS[:1]) + pull.row([1]) + pull.end(limit_reached=False, completed=True)) == [
        {"header": {"queryId": "q", "schema": "`ID` INTEGER"}}, {"row": {"columns": [1]}}]


def test_inserts_acks_delimited_and_json_array() -> None:
    d = framing.InsertsAckWriter(delimited=True)
    assert d.item(framing.insert_ack(0)) + d.item(framing.insert_error(1, 40000, "bad")) + d.end() == (
        b'{"status":"ok","seq":0}\n'
        b'{"@type":"generic_error","error_code":40000,"message":"bad","status":"error","seq":1}\n')
    j = framing.InsertsAckWriter(delimited=False)
    assert j.end() == b"[]"
    j = framing.InsertsAckWriter(delimited=False)
    assert j.item(framing.insert_ack(0)) + j.item(framing.insert_ack(1)) + j.end() == (
        b'[{"status":"ok","seq":0},{"status":"ok","seq":1}]')


def test_non_ascii_is_written_as_utf8_like_jackson() -> None:
    assert framing.DelimitedWriter().row(["é"]) == '["é"]\n'.encode()


@pytest.mark.parametrize(("accept", "expected"), [
    (None, DELIMITED),
    ("*/*", DELIMITED),
    ("application/json", JSON),
    ("application/vnd.ksql.v1+json", KSQL_V1_JSON),
    ("application/vnd.ksql.v1+json; q=0.9, application/json; q=0.5", KSQL_V1_JSON),
    ("application/vnd.ksql.v1+json; q=0.4, application/json; q=0.5", JSON),
    ("text/html, application/*;q=0.2", DELIMITED),
])
def test_accept_negotiation_picks_the_clients_preference_among_the_routes_types(accept: str | None, expected: str) -> None:
    assert negotiate(accept, (DELIMITED, JSON, KSQL_V1_JSON), default=DELIMITED) == expected


def test_accept_without_any_produced_type_is_not_acceptable() -> None:
    with pytest.raises(NotAcceptableError) as info:
        negotiate("text/html", (KSQL_V1_JSON, JSON), default=JSON)
    assert info.value.http_status == 406


def test_values_without_a_json_type_are_written_as_ksqldb_writes_them() -> None:
    import datetime
    from decimal import Decimal

    row = [Decimal("1.25"), Decimal("10"), b"\x00\x01", datetime.date(2024, 1, 2),
           datetime.datetime(2024, 1, 2, 3, 4, 5, 6000), datetime.time(1, 2, 3)]
    assert framing.DelimitedWriter().row(row) == (
        b'[1.25,10,"AAE=","2024-01-02","2024-01-02T03:04:05.006000","01:02:03"]\n')
    with pytest.raises(TypeError):
        framing.dumps([object()])
