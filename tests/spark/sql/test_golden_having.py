"""Golden tests of HAVING over a stream aggregation, as ksqlDB writes it (Kafka Streams'
KTableFilter with old values sent): a result failing HAVING is a tombstone only when the key's
previous result passed; a key whose previous result failed too (or that had none) gets nothing.
The "previous result passed" flag is state in the query's checkpoint (compile/having_gate.py), so
it carries across micro-batches and a restart. Outputs read read_committed with confluent-kafka.

Each round of input is one micro-batch (produced while the query runs and read back before the
next round); a batch's records of different keys come out in any order, so rounds are compared
sorted.
"""

from __future__ import annotations

import struct

import pytest

from tests.spark.sql.golden import analyze, create_topics, ddl, produce, read_output, sink_of, start, unique

pytestmark = [pytest.mark.spark]

T0 = 1_700_000_010_000   # a multiple of 30 s: the tumbling windows below start at T0
WAIT_S = 600.0


def _int(v: int) -> bytes:
    return struct.pack(">i", v)


def _round(runtime, topic, total, query_id):
    """The records of the round that brings the topic to ``total`` records (exactly: a batch's
    records are committed in one transaction, so an extra one would be visible too)."""
    records = read_output(runtime.settings.bootstrap_servers, topic, total, timeout_s=WAIT_S, runtime=runtime,
                          query_id=query_id)
    assert len(records) == total, records
    return records


def test_having_tombstones_only_keys_whose_last_result_passed_across_batches_and_a_restart(runtime, eos_broker):
    """SUM(X) > 10 per K. Round 1: a fails first (nothing), b passes. Round 2: a fails again
    (nothing), b falls below (tombstone), c passes. Round 3: a passes, b fails again (nothing).
    Then the query is stopped and started again from its checkpoint. Round 4: a falls below
    (tombstone: live before the restart), b fails again (nothing), c passes again."""
    bootstrap = eos_broker.bootstrap
    topic, out = unique("having_in"), unique("having_out")
    create_topics(bootstrap, topic, out)
    s = ddl(f"CREATE STREAM S (ID INT KEY, K STRING, X BIGINT) WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='JSON');")
    _s, analyzed = analyze("CREATE TABLE BIG AS SELECT K, SUM(X) AS T FROM S GROUP BY K HAVING SUM(X) > 10 "
                           "EMIT CHANGES;", {"S": s})
    sink = sink_of(analyzed, "BIG", out)
    query_id = "CTAS_HAVING_1"
    produce(bootstrap, topic, [(_int(1), b'{"K":"a","X":5}', T0), (_int(2), b'{"K":"b","X":20}', T0 + 1)])
    start(runtime, query_id, analyzed, sink)
    assert _round(runtime, out, 1, query_id) == [(b"b", b'{"T":20}')]

    produce(bootstrap, topic, [(_int(1), b'{"K":"a","X":1}', T0 + 2), (_int(2), b'{"K":"b","X":-15}', T0 + 3),
                               (_int(3), b'{"K":"c","X":11}', T0 + 4)])
    assert sorted(_round(runtime, out, 3, query_id)[1:], key=repr) == sorted([(b"b", None), (b"c", b'{"T":11}')],
                                                                            key=repr)

    produce(bootstrap, topic, [(_int(1), b'{"K":"a","X":10}', T0 + 5), (_int(2), b'{"K":"b","X":1}', T0 + 6)])
    assert _round(runtime, out, 4, query_id)[3:] == [(b"a", b'{"T":16}')]

    runtime.stop_persistent(query_id)
    produce(bootstrap, topic, [(_int(1), b'{"K":"a","X":-10}', T0 + 7), (_int(2), b'{"K":"b","X":-1}', T0 + 8),
                               (_int(3), b'{"K":"c","X":100}', T0 + 9)])
    start(runtime, query_id, analyzed, sink, properties={})
    assert sorted(_round(runtime, out, 6, query_id)[4:], key=repr) == sorted([(b"a", None), (b"c", b'{"T":111}')],
                                                                            key=repr)
    runtime.stop_persistent(query_id)


def test_windowed_having_tombstones_a_window_only_after_it_passed(runtime, eos_broker):
    """having.json "table having": SUM(VALUE) > 100 per ID in 30 s tumbling windows. ID 0's only
    result fails (nothing); ID 1's window passes, then falls below (tombstone of that window); ID
    1's next window fails from its first result (nothing), then passes."""
    bootstrap = eos_broker.bootstrap
    topic, out = unique("having_win_in"), unique("having_win_out")
    create_topics(bootstrap, topic, out)
    s = ddl(f"CREATE STREAM TEST (ID BIGINT KEY, NAME STRING, VALUE BIGINT) "
            f"WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='DELIMITED');")
    _s, analyzed = analyze("CREATE TABLE T1 AS SELECT ID, SUM(VALUE) AS S FROM TEST WINDOW TUMBLING (SIZE 30 SECONDS) "
                           "GROUP BY ID HAVING SUM(VALUE) > 100 EMIT CHANGES;", {"TEST": s})
    query_id = "CTAS_HAVING_WIN_2"
    one, zero = struct.pack(">q", 1), struct.pack(">q", 0)
    first, second = struct.pack(">q", T0), struct.pack(">q", T0 + 30_000)
    produce(bootstrap, topic, [(zero, b"zero,0", T0), (one, b"one,101", T0 + 1)])
    start(runtime, query_id, analyzed, sink_of(analyzed, "T1", out))
    assert _round(runtime, out, 1, query_id) == [(one + first, b'{"S":101}')]

    produce(bootstrap, topic, [(one, b"one,-5", T0 + 2), (one, b"one,5", T0 + 30_001)])
    assert _round(runtime, out, 2, query_id)[1:] == [(one + first, None)]

    produce(bootstrap, topic, [(one, b"one,100", T0 + 30_002)])
    assert _round(runtime, out, 3, query_id)[2:] == [(one + second, b'{"S":105}')]
    runtime.stop_persistent(query_id)
