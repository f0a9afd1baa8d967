"""Golden tests of ksqlDB's header columns (``HEADERS``, ``HEADER('k')``) through Spark: records
produced with headers by confluent-kafka (one transaction committed, one aborted), read by the
compiled query read_committed; output read read_committed with confluent-kafka and compared byte
for byte with what ksqlDB writes (QTT headers.json: every header in order, an empty array for
none; HEADER('k') the last header with key k, null when absent or valueless)."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import Producer

from oncestream.sql.engine.runtime import RUNNING
from oncestream.sql.language.catalog import SourceInfo
from tests.spark.sql.golden import EARLIEST, analyze, create_topics, ddl, read_output, sink_of, start, unique

pytestmark = [pytest.mark.spark]

Headers = list[tuple[str, str | bytes | None]]


def _produce_with_headers(bootstrap: str, topic: str, committed: list[tuple[bytes, bytes, Headers]],
                          aborted: list[tuple[bytes, bytes, Headers]]) -> None:
    """``aborted`` in a transaction that aborts, then ``committed`` in one that commits."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("hdr-txn"), "linger.ms": 5})
    producer.init_transactions(30)
    for records, commit in ((aborted, False), (committed, True)):
        producer.begin_transaction()
        for ts, (key, value, headers) in enumerate(records, start=1):
            producer.produce(topic, value=value, key=key, headers=headers, timestamp=1000 * ts)
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)


def _events(bootstrap: str) -> SourceInfo:
    topic = unique("events")
    create_topics(bootstrap, topic)
    source = ddl(f"CREATE STREAM EVENTS (K STRING KEY, H ARRAY<STRUCT<KEY STRING, VALUE BYTES>> HEADERS, V BIGINT, "
                 f"A BYTES HEADER('abc')) WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='JSON');")
    _produce_with_headers(bootstrap, topic, committed=[
        (b"k1", b'{"V":1}', []),
        (b"k2", b'{"V":2}', [("abc", b"\x1a"), ("abc", b"!"), ("def", b"#")]),
        (b"k3", b'{"V":3}', [("abc", None), ("x", b"")]),
    ], aborted=[(b"gone", b'{"V":0}', [("abc", b"never")])])
    return source


def test_header_columns_come_out_as_ksqldb_writes_them(runtime, eos_broker):
    """CSAS selecting a HEADERS column, a HEADER('abc') column and a function of it: both become
    value columns of the output; the aborted record (its headers too) is never seen."""
    bootstrap = eos_broker.bootstrap
    events = _events(bootstrap)
    out_topic = unique("out")
    create_topics(bootstrap, out_topic)
    _statement, analyzed = analyze("CREATE STREAM OUT AS SELECT K, V, H, A, LEN(A) AS N FROM EVENTS EMIT CHANGES;",
                                   {"EVENTS": events})
    sink = sink_of(analyzed, "OUT", out_topic)
    assert not sink.header_columns
    start(runtime, "CSAS_OUT_1", analyzed, sink)
    got = read_output(bootstrap, out_topic, 3, runtime=runtime, query_id="CSAS_OUT_1")
    assert runtime.status("CSAS_OUT_1").state == RUNNING
    assert got == [
        (b"k1", b'{"V":1,"H":[],"A":null,"N":null}'),
        (b"k2", b'{"V":2,"H":[{"KEY":"abc","VALUE":"Gg=="},{"KEY":"abc","VALUE":"IQ=="},{"KEY":"def","VALUE":"Iw=="}],'
                b'"A":"IQ==","N":1}'),
        (b"k3", b'{"V":3,"H":[{"KEY":"abc","VALUE":null},{"KEY":"x","VALUE":""}],"A":null,"N":null}'),
    ]
    runtime.stop_persistent("CSAS_OUT_1")


def test_push_query_filters_on_header_columns(runtime, eos_broker):
    """A push query with a header column in WHERE and SELECT *: rows in ksqlDB's column order
    (key, value columns, then header columns), BYTES base64 as the REST API writes them."""
    bootstrap = eos_broker.bootstrap
    events = _events(bootstrap)
    _statement, analyzed = analyze("SELECT * FROM EVENTS WHERE H[1]->KEY = 'abc' EMIT CHANGES LIMIT 2;",
                                   {"EVENTS": events})
    push = runtime.start_push(analyzed, EARLIEST)
    assert [c.name for c in push.columns] == ["K", "V", "H", "A"]

    async def collect() -> list:
        return [row async for row in push.rows()]

    rows = asyncio.run(asyncio.wait_for(collect(), 180))
    assert rows == [
        ["k2", 2, [{"KEY": "abc", "VALUE": "Gg=="}, {"KEY": "abc", "VALUE": "IQ=="}, {"KEY": "def", "VALUE": "Iw=="}],
         "IQ=="],
        ["k3", 3, [{"KEY": "abc", "VALUE": None}, {"KEY": "x", "VALUE": ""}], None],
    ]
    assert push.limit_reached
