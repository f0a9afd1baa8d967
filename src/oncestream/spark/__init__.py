"""oncestream's Spark connector: ``format("oncestream")`` for Spark Structured Streaming and batch
jobs (options and columns of Spark's Kafka connector, read_committed source, exactly-once sink
through KIP-939 two-phase commit), plus ``dual_write`` for atomic log + database writes.

    import oncestream.spark
    oncestream.spark.register(spark)
    df = (spark.readStream.format("oncestream")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092").option("subscribe", "in").load())
    df.writeStream.format("oncestream").option("kafka.bootstrap.servers", "127.0.0.1:9092")
      .option("topic", "out").option("checkpointLocation", "/tmp/cp").start()
"""

from __future__ import annotations

from typing import Any

from oncestream.spark.errors import (
    CommitResolutionError,
    DataLossError,
    OnceStreamSparkError,
    OptionError,
    TwoPhaseCommitUnsupportedError,
)

__all__ = [
    "CommitResolutionError",
    "DataLossError",
    "OnceStreamSparkError",
    "OptionError",
    "PostgresStore",
    "SqliteStore",
    "TwoPhaseCommitUnsupportedError",
    "DualWriter",
    "dual_write",
    "register",
]


def register(spark: Any) -> None:
    """Register ``format("oncestream")`` with a SparkSession (batch and streaming, read and write)."""
    from oncestream.spark.data_source import OnceStreamDataSource

    spark.dataSource.register(OnceStreamDataSource)


def __getattr__(name: str) -> Any:
    # The dual-write helper pulls in the database drivers only when used.
    if name in ("dual_write", "DualWriter"):
        from oncestream.spark import dual_writer

        return getattr(dual_writer, name)
    if name in ("SqliteStore", "PostgresStore"):
        from oncestream.spark import stores

        return getattr(stores, name)
    raise AttributeError(name)
