"""Golden test of WINDOW SESSION with EMIT CHANGES, as ksqlDB writes it (Kafka Streams'
KStreamSessionWindowAggregate): every record writes its session's result; a record that bridges
two sessions writes a tombstone for each (keyed by its old window, timestamp its end), then the
merged session (timestamp: its end). The sessions are state in the query's checkpoint
(compile/session_aggregation.py), so a merge after a restart still tombstones the session written
before it. Outputs read read_committed with confluent-kafka; each round of input is one record.
"""

from __future__ import annotations

import struct

import pytest

from tests.spark.sql.golden import analyze, create_topics, ddl, produce, read_timed_output, sink_of, start, unique

pytestmark = [pytest.mark.spark]

T0 = 1_700_000_000_000
WAIT_S = 600.0


def _key(key: int, start: int, end: int) -> bytes:
    # KAFKA BIGINT key of a session window: key || end || start (Kafka Streams' SessionKeySchema)
    return struct.pack(">qqq", key, end, start)


def _round(runtime, topic, total, query_id):
    records = read_timed_output(runtime.settings.bootstrap_servers, topic, total, timeout_s=WAIT_S, runtime=runtime,
                                query_id=query_id)
    assert len(records) == total, records
    return records


def _session_query(eos_broker, name: str, select: str):
    """(bootstrap, input topic, output topic, analyzed C*AS) of ``select`` over a new stream
    S (ID BIGINT KEY, X BIGINT) in JSON."""
    bootstrap = eos_broker.bootstrap
    topic, out = unique(f"{name}_in"), unique(f"{name}_out")
    create_topics(bootstrap, topic, out)
    s = ddl(f"CREATE STREAM S (ID BIGINT KEY, X BIGINT) WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='JSON');")
    _s, analyzed = analyze(f"CREATE TABLE SESS AS {select}", {"S": s})
    return bootstrap, topic, out, analyzed


def test_session_merges_write_tombstones_then_the_merged_session_across_a_restart(runtime, eos_broker):
    """latest-offset-udaf.json "merging session windows", with COUNT, MAX and the window bounds:
    ts 0, 1500, 700 (1 s gap) give [0,0], [1500,1500], two tombstones and [0,1500]. After a
    restart from the checkpoint, ts 2400 extends [0,1500] (a tombstone of it, then [0,2400])."""
    bootstrap, topic, out, analyzed = _session_query(
        eos_broker, "session", "SELECT ID, COUNT(*) AS C, MAX(X) AS M, LATEST_BY_OFFSET(X) AS L, WINDOWSTART AS WS, "
        "WINDOWEND AS WE FROM S WINDOW SESSION (1 SECOND) GROUP BY ID EMIT CHANGES;")
    sink = sink_of(analyzed, "SESS", out)
    query_id = "CTAS_SESSIONS_1"
    one = struct.pack(">q", 1)

    def value(c: int, m: int, latest: int, ws: int, we: int) -> bytes:
        return f'{{"C":{c},"M":{m},"L":{latest},"WS":{T0 + ws},"WE":{T0 + we}}}'.encode()

    produce(bootstrap, topic, [(one, b'{"X":1}', T0)])
    start(runtime, query_id, analyzed, sink)
    assert _round(runtime, out, 1, query_id) == [(_key(1, T0, T0), value(1, 1, 1, 0, 0), T0)]

    produce(bootstrap, topic, [(one, b'{"X":3}', T0 + 1500)])
    assert _round(runtime, out, 2, query_id)[1:] == [(_key(1, T0 + 1500, T0 + 1500), value(1, 3, 3, 1500, 1500),
                                                      T0 + 1500)]

    produce(bootstrap, topic, [(one, b'{"X":2}', T0 + 700)])
    assert _round(runtime, out, 5, query_id)[2:] == [
        (_key(1, T0, T0), None, T0),
        (_key(1, T0 + 1500, T0 + 1500), None, T0 + 1500),
        (_key(1, T0, T0 + 1500), value(3, 3, 2, 0, 1500), T0 + 1500),
    ]

    runtime.stop_persistent(query_id)
    produce(bootstrap, topic, [(one, b'{"X":0}', T0 + 2400)])
    start(runtime, query_id, analyzed, sink, properties={})
    assert _round(runtime, out, 7, query_id)[5:] == [
        (_key(1, T0, T0 + 1500), None, T0 + 1500),
        (_key(1, T0, T0 + 2400), value(4, 3, 0, 0, 2400), T0 + 2400),
    ]
    runtime.stop_persistent(query_id)


def test_session_having_writes_a_tombstone_only_for_a_session_that_passed(runtime, eos_broker):
    """HAVING over session windows is ksqlDB's KTableFilter on the session table: SUM(X) > 2 with
    ts 0 (X 1: fails, nothing), 1500 (X 3: passes), 700 (X -5: merges both; [0,0] never passed,
    nothing; [1500,1500] passed, a tombstone; the merged [0,1500] fails, nothing)."""
    bootstrap, topic, out, analyzed = _session_query(
        eos_broker, "session_having", "SELECT ID, SUM(X) AS T FROM S WINDOW SESSION (1 SECOND) GROUP BY ID "
        "HAVING SUM(X) > 2 EMIT CHANGES;")
    query_id = "CTAS_SESSIONS_HAVING_1"
    one = struct.pack(">q", 1)
    produce(bootstrap, topic, [(one, b'{"X":1}', T0), (one, b'{"X":3}', T0 + 1500)])
    start(runtime, query_id, analyzed, sink_of(analyzed, "SESS", out))
    assert _round(runtime, out, 1, query_id) == [(_key(1, T0 + 1500, T0 + 1500), b'{"T":3}', T0 + 1500)]
    produce(bootstrap, topic, [(one, b'{"X":-5}', T0 + 700)])
    assert _round(runtime, out, 2, query_id)[1:] == [(_key(1, T0 + 1500, T0 + 1500), None, T0 + 1500)]
    runtime.stop_persistent(query_id)
