"""Exactly-once writes of update-mode results (aggregations) through ``foreachBatch``.

Spark lets a streaming query in update mode write only to a sink whose write builder implements
``SupportsStreamingUpdateAsAppend`` (``StreamExecution.createStreamingWrite`` refuses others with
"... does not support Update mode"), and the PySpark Python Data Source API has no way to say so:
``format("oncestream")`` is append-only as a streaming sink. So an update-mode query writes each
micro-batch from ``foreachBatch`` with the connector's own streaming writer, driven exactly as
Spark drives it:

- tasks: ``mapInArrow`` runs ``OnceStreamStreamWriter.write`` on each partition of the batch; the
  jobs a ``foreachBatch`` function starts run on the query's stream-execution thread (PySpark's
  pinned threads), so their tasks carry the query id and batch id local properties
  (``sql.streaming.queryId``, ``streaming.sql.batchId``) the writer's protocol keys its
  transactional ids and commit journal on;
- driver: ``commit(messages, batch_id)`` (journal record, then complete the prepared
  transactions), or ``abort`` if the job failed.

A replayed batch (crash after the journal record, before Spark's commit log) is recognised by the
journal and writes nothing, as with the plain streaming sink: exactly once either way
(docs/spark-exactly-once.md).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql import functions as F

from oncestream.spark.options import sink_options
from oncestream.spark.sink import OnceStreamStreamWriter

_TIMESTAMP = pa.timestamp("us", tz="UTC")


def batch_writer(options: Mapping[str, str], *, time_windowed: bool = False) -> Callable[[Any, int], None]:
    """A ``foreachBatch`` function writing a batch's ``key``/``value`` (and ``timestamp``, when
    the frame has it) rows exactly once with the connector's ``options`` (``topic``, ``kafka.*``).

    ``time_windowed``: the keys are TUMBLING/HOPPING windowed keys (the key's bytes, then the
    window start as 8 bytes big-endian). Each key's windows are then written by one task in
    window-start order, as Kafka Streams forwards the windows one record updates (a hopping
    window's record updates several; Spark's aggregation puts them in different partitions)."""
    opts = dict(options)

    def write_batch(frame: Any, batch_id: int) -> None:
        writer = OnceStreamStreamWriter(sink_options(opts), frame.schema)
        timed = "timestamp" in frame.columns

        def task(rows: Iterator[Any]) -> Iterator[bytes]:
            # RDD rows, not mapInArrow: that one needs pandas, aggregations should not.
            keys, values, micros = [], [], []
            for row in rows:
                keys.append(row[0])
                values.append(row[1])
                if timed:
                    micros.append(row[2])
            columns = {"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary())}
            if timed:
                columns["timestamp"] = pa.array(micros, pa.int64()).cast(_TIMESTAMP)
            yield pickle.dumps(writer.write(iter([pa.RecordBatch.from_pydict(columns)])))

        # The timestamp travels as epoch microseconds: a Python datetime from an RDD row would be
        # in the worker's local time zone.
        selected = ["key", "value", *(["unix_micros(timestamp) AS timestamp"] if timed else [])]
        rows = frame.selectExpr(*selected)
        if time_windowed:
            # Window starts are never negative, so their big-endian bytes sort as the numbers do.
            rows = rows.repartition(F.expr("substring(key, 1, length(key) - 8)")).sortWithinPartitions("key")
        try:
            reports = rows.rdd.mapPartitions(task).collect()
        except Exception:
            writer.abort([], batch_id)
            raise
        writer.commit([pickle.loads(r) for r in reports], batch_id)

    return write_batch
