"""``format("oncestream")``: the PySpark Python Data Source tying the reader and writers together."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from oncestream.spark.options import include_headers, sink_options, source_options
from oncestream.spark.partition_reader import SPARK_SCHEMA_DDL
from oncestream.spark.sink import OnceStreamBatchWriter, OnceStreamStreamWriter
from oncestream.spark.source import OnceStreamBatchReader, OnceStreamStreamReader

FORMAT_NAME = "oncestream"
# Spark's Kafka source columns without headers (includeHeaders=false).
SPARK_SCHEMA_NO_HEADERS_DDL = SPARK_SCHEMA_DDL.rsplit(", headers ", 1)[0]


class OnceStreamDataSource(DataSource):
    """Kafka-protocol source and sink with Spark's Kafka connector options and columns."""

    @classmethod
    def name(cls) -> str:
        """The format name: ``spark.read.format("oncestream")``."""
        return FORMAT_NAME

    def schema(self) -> str:
        """Spark's Kafka source columns; with includeHeaders=true also ``headers`` (null when a
        record has none)."""
        return SPARK_SCHEMA_DDL if include_headers(self.options) else SPARK_SCHEMA_NO_HEADERS_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        """Batch read from startingOffsets (earliest) to endingOffsets (latest)."""
        return OnceStreamBatchReader(source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """Micro-batch read; offsets live in Spark's checkpoint."""
        return OnceStreamStreamReader(source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """Batch write; atomic (one prepared transaction per task, committed by the driver)."""
        return OnceStreamBatchWriter(sink_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """Streaming write; exactly once unless exactlyOnce=false."""
        return OnceStreamStreamWriter(sink_options(self.options), schema)
