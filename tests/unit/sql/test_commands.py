"""The command-topic record format: ksqlDB's command ids, the JSON value, and the typed
``IncompatibleCommandError`` for records this version cannot apply (the node goes degraded)."""

from __future__ import annotations

import json

import pytest

from oncestream.sql.language.parser import parse
from oncestream.sql.server.commands import (
    COMMAND_VERSION,
    Command,
    IncompatibleCommandError,
    command_id,
    decode,
    encode,
    goes_to_command_topic,
)
from oncestream.sql.server.metastore import CommandResult, Metastore, QueryRunState
from tests.support.narrow import of_type, present


def stmt(text: str):
    (s,) = parse(text)
    return s


@pytest.mark.parametrize(("text", "expected"), [
    ("CREATE STREAM s (id INT KEY, v STRING) WITH (kafka_topic='t', value_format='json');", "stream/`S`/create"),
    ("CREATE TABLE t (id INT PRIMARY KEY, v STRING) WITH (kafka_topic='t', value_format='json');", "table/`T`/create"),
    ("CREATE STREAM s2 AS SELECT * FROM s;", "stream/`S2`/create"),
    ("CREATE TABLE t2 AS SELECT v, COUNT(*) FROM s GROUP BY v;", "table/`T2`/create"),
    ("INSERT INTO s2 SELECT * FROM s;", "stream/`S2`/create"),
    ("DROP STREAM s;", "stream/S/drop"),
    ("DROP TABLE IF EXISTS t DELETE TOPIC;", "table/T/drop"),
    ("TERMINATE CSAS_S2_3;", "terminate/CSAS_S2_3/execute"),
    ("TERMINATE ALL;", "terminate/ALL/execute"),
    ("PAUSE CSAS_S2_3;", "pause/CSAS_S2_3/execute"),
    ("PAUSE ALL;", "pause/ALL/execute"),
    ("RESUME CSAS_S2_3;", "resume/CSAS_S2_3/execute"),
    ("resume all;", "resume/ALL/execute"),
])
def test_command_ids_as_ksqldb_writes_them(text: str, expected: str) -> None:
    s = stmt(text)
    assert goes_to_command_topic(s)
    assert command_id(s) == expected


@pytest.mark.parametrize("text", ["SHOW STREAMS;", "DESCRIBE s;", "SET 'auto.offset.reset'='earliest';",
                                  "UNSET 'auto.offset.reset';", "SELECT * FROM s EMIT CHANGES;", "EXPLAIN CSAS_X_1;",
                                  "INSERT INTO s (id, v) VALUES (1, 'a');"])
def test_local_statements_do_not_go_to_the_command_topic(text: str) -> None:
    s = stmt(text)
    assert not goes_to_command_topic(s)
    with pytest.raises(ValueError, match=r"does not go to the command topic"):
        command_id(s)


def test_encode_decode_round_trip() -> None:
    cmd = Command("stream/`S`/create", "CREATE STREAM s (id INT KEY) WITH (kafka_topic='t', value_format='json');",
                  {"ksql.streams.auto.offset.reset": "earliest"}, {"ksql.streams.auto.offset.reset": "earliest"},
                  {"topic": "t", "partitions": 3, "replicas": 1, "createTopic": False})
    key, value = encode(cmd)
    assert key == b"stream/`S`/create"
    body = json.loads(value)
    assert body == {"statement": cmd.statement, "streamsProperties": cmd.streams_properties,
                    "originalProperties": cmd.original_properties, "plan": cmd.plan, "version": COMMAND_VERSION}
    assert decode(key, value) == cmd


@pytest.mark.parametrize(("key", "value", "reason"), [
    (b"stream/`S`/create", b"{not json", "unreadable"),
    (b"stream/`S`/create", b"\xff\xfe", "unreadable"),
    (b"stream/`S`/create", b"[1, 2]", "not a JSON object"),
    (b"stream/`S`/create", b'{"statement": "x", "version": 2}', "newer than this server"),
    (b"stream/`S`/create", b'{"version": 1}', "no statement"),
    (b"stream/`S`/create", b'{"statement": "x", "version": "1"}', "invalid version"),
    (b"bogus", b'{"statement": "x", "version": 1}', "unknown command id"),
    (None, b'{"statement": "x"}', "null key"),
    (b"stream/`S`/create", None, "null key or value"),
    (b"stream/`S`/create", b'{"statement": "x", "streamsProperties": [1]}', "malformed properties"),
])
def test_unreadable_or_newer_records_are_typed_errors(key, value, reason: str) -> None:
    with pytest.raises(IncompatibleCommandError, match=reason):
        decode(key, value)


def _replayed(text: str, topics: dict[str, int]) -> Metastore:
    """The follower's metastore: the leader validates and applies each statement of ``text``, the
    follower applies the decoded records (no AST: parsed from the record's text); they must agree."""
    leader, follower = Metastore(), Metastore()
    for offset, s in enumerate(parse(text)):
        cmd = leader.validate(s, {}, topics)
        leader.apply(cmd, offset)
        follower.apply(decode(*encode(cmd)), offset)
    assert leader == follower
    return follower


def test_decoded_commands_replay_through_the_parser_into_an_equal_metastore() -> None:
    text = ("CREATE STREAM s (id INT KEY, v STRING) WITH (kafka_topic='t', value_format='json');"
            "CREATE STREAM s2 AS SELECT id, ucase(v) AS u FROM s WHERE v <> 'x';"
            "CREATE TABLE t2 AS SELECT v, COUNT(*) AS n FROM s GROUP BY v;"
            "TERMINATE CSAS_S2_1;")
    follower = _replayed(text, {"t": 4})
    assert present(follower.source("T2"), "source T2").partitions == 4
    assert [q.query_id for q in follower.queries()] == ["CTAS_T2_2"]


def test_pause_and_resume_replay_from_decoded_records_into_an_equal_metastore() -> None:
    """PAUSE / RESUME travel the command topic like TERMINATE (ksqlDB's CommandIdAssigner): a node
    that replays the records (a restarted one, or any other node) holds the same run states."""
    text = ("CREATE STREAM s (id INT KEY, v STRING) WITH (kafka_topic='t', value_format='json');"
            "CREATE STREAM s2 AS SELECT * FROM s;"
            "CREATE STREAM s3 AS SELECT * FROM s;"
            "PAUSE ALL;"
            "RESUME CSAS_S3_2;")
    follower = _replayed(text, {"t": 1})
    assert follower.run_state("CSAS_S2_1") is QueryRunState.PAUSED
    assert follower.run_state("CSAS_S3_2") is QueryRunState.RUNNING


def test_a_record_that_no_longer_parses_is_an_error_result() -> None:
    ms = Metastore()
    effects = ms.apply(Command("stream/`S`/create", "CREATE STREAM oops ("), 0)
    assert of_type(effects[-1], CommandResult, "last effect").status == "ERROR"
    assert ms.sources() == []
