"""SQL formats benchmark (not a test), issue 25: serialize / deserialize throughput of AVRO
records vs JSON records in the SQL server's serde, one run.

    PYTHONPATH=src:. .venv/bin/python bench/sql_avro_vs_json.py [--records 20000] [--spark-records 200000]

Both forms of the SQL server's serde are measured on the same rows (an order: BIGINT, STRING,
DECIMAL(8,2), TIMESTAMP, DATE, ARRAY<STRING>, STRUCT<...>):

1. **Python form** (``RecordLayout.encode_value`` / ``decode_value``: INSERT VALUES,
   /inserts-stream, pull queries): records/s of encoding then decoding ``--records`` rows.
2. **Spark form** (``serde_columns``: what a compiled persistent/push query runs): a DataFrame of
   ``--spark-records`` encoded values is decoded and re-encoded (``count()`` of the result forces
   both), local[*] Spark; JSON stays in the JVM (from_json/to_json), AVRO/JSON_SR go through
   Python UDFs over fastavro. The first run of each format is a warm-up, not counted.

The registry is an in-memory one (``tests.support.memory_schema_registry``): the codec fetches a
schema once per id and registers once per process, so the registry is out of the per-record
path either way. Prints a table and a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from decimal import Decimal
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from oncestream.sql.engine.serde import RecordLayout, layout_of
from oncestream.sql.language import types as t
from oncestream.sql.language.catalog import Column, Format, Namespace, SourceInfo
from oncestream.sql.language.sql_ast import SourceKind
from tests.support.memory_schema_registry import MemoryRegistry

VALUES = [("ID", t.BIGINT), ("ITEM", t.STRING), ("AMOUNT", t.decimal(8, 2)), ("PLACED", t.TIMESTAMP),
          ("DAY", t.DATE), ("TAGS", t.array_of(t.STRING)), ("ADDR", t.struct_of(("CITY", t.STRING), ("ZIP", t.INTEGER)))]
FORMATS = (Format.JSON, Format.AVRO, Format.JSON_SR)


def _layout(fmt: Format, registry: MemoryRegistry) -> RecordLayout:
    columns = (Column("K", t.STRING, Namespace.KEY), *(Column(n, ty) for n, ty in VALUES))
    return layout_of(SourceInfo(name="O", kind=SourceKind.STREAM, topic="orders", key_format=Format.KAFKA,
                                value_format=fmt, columns=columns, statement=""), registry)


def _row(i: int) -> dict[str, Any]:
    return {"ID": i, "ITEM": f"item-{i % 97}", "AMOUNT": Decimal(i % 10_000) / 100, "PLACED": 1_700_000_000_000 + i,
            "DAY": 19_000 + i % 365, "TAGS": ["a", "b", str(i % 7)], "ADDR": {"CITY": "Paris", "ZIP": 75000 + i % 20}}


def python_form(records: int) -> dict[str, dict[str, float]]:
    rows = [_row(i) for i in range(records)]
    out: dict[str, dict[str, float]] = {}
    for fmt in FORMATS:
        layout = _layout(fmt, MemoryRegistry.empty())
        layout.encode_value(rows[0])      # registers the schema: not in the timed loop
        t0 = time.perf_counter()
        encoded = [layout.encode_value(r) for r in rows]
        t1 = time.perf_counter()
        decoded = [layout.decode_value(e) for e in encoded]
        t2 = time.perf_counter()
        assert decoded[-1] == rows[-1], (fmt, decoded[-1], rows[-1])
        size = sum(len(e or b"") for e in encoded) / records
        out[fmt.value] = {"encode_per_s": records / (t1 - t0), "decode_per_s": records / (t2 - t1), "bytes": size}
    return out


def spark_form(records: int) -> dict[str, float]:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from oncestream.sql.engine.compile import serde_columns
    from oncestream.sql.engine.runtime import spark_session_config

    os.environ["PYSPARK_PYTHON"] = sys.executable     # workers import oncestream from this venv
    builder = SparkSession.builder.master("local[*]").appName("oncestream-avro-bench").config("spark.ui.enabled", "false")
    for key, value in spark_session_config().items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    out: dict[str, float] = {}
    try:
        for fmt in FORMATS:
            registry = MemoryRegistry.empty()
            layout = _layout(fmt, registry)
            sample = [layout.encode_value(_row(i)) for i in range(1000)]   # registers on the driver
            frame = spark.createDataFrame([(sample[i % 1000],) for i in range(records)],
                                          T.StructType([T.StructField("value", T.BinaryType())])).cache()
            frame.count()
            decoded = frame.select(*serde_columns.decode_value(layout, F.col("value")))
            values = {c.name: F.col(f"`{c.name}`") for c in layout.value_columns}
            both = decoded.select(serde_columns.encode_value(layout, values).alias("v"))
            both.where(F.col("v").isNotNull()).count()        # warm-up
            t0 = time.perf_counter()
            n = both.where(F.col("v").isNotNull()).count()
            elapsed = time.perf_counter() - t0
            assert n == records
            out[fmt.value] = records / elapsed
            frame.unpersist()
    finally:
        spark.stop()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--spark-records", type=int, default=200_000)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    py = python_form(args.records)
    print(f"Python form, {args.records} records")
    print(f"{'format':8} {'encode rec/s':>14} {'decode rec/s':>14} {'bytes/rec':>10}")
    for fmt, r in py.items():
        print(f"{fmt:8} {r['encode_per_s']:14,.0f} {r['decode_per_s']:14,.0f} {r['bytes']:10.1f}")
    spark = spark_form(args.spark_records) if args.spark_records else {}
    if spark:
        print(f"Spark form, {args.spark_records} records decoded and re-encoded")
        for fmt, rate in spark.items():
            print(f"{fmt:8} {rate:14,.0f} rec/s")
    print(f"load average after: {os.getloadavg()}")
    print(json.dumps({"python": py, "spark": spark}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
