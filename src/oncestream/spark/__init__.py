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
    "DualWriter",
    "OnceStreamSparkError",
    "OptionError",
    "PostgresStore",
    "SqliteStore",
    "TwoPhaseCommitUnsupportedError",
    "dual_write",
    "offsets_behind_latest",
    "register",
]


def register(spark: Any) -> None:
    """Make ``format("oncestream")`` (batch and streaming, read and write) available to ``spark``.

    Spark registers a data source per session, so a registration alone is not seen by
    ``spark.newSession()`` or by a thread working in another session. The package therefore also
    ships the ``pyspark_oncestream`` module, which Spark finds by itself and registers for every
    session of the application; when it has, this call has nothing left to do (registering again
    would only log Spark's "replaced a statically registered data source" warning). Where Spark
    could not look it up (Spark Connect, or a driver Python without oncestream), the source is
    registered with this session only.
    """
    from oncestream.spark.data_source import FORMAT_NAME, OnceStreamDataSource

    if not _known_to_session(spark, FORMAT_NAME):
        spark.dataSource.register(OnceStreamDataSource)


def _known_to_session(spark: Any, name: str) -> bool:
    """Whether the session already resolves the format name (statically or at runtime)."""
    try:
        return bool(spark._jsparkSession.sessionState().dataSourceManager().dataSourceExists(name))
    except Exception:  # noqa: BLE001 - no JVM handle (Spark Connect) or another Spark: just register
        return False


def __getattr__(name: str) -> Any:
    # The dual-write helper pulls in the database drivers only when used.
    if name in ("dual_write", "DualWriter"):
        from oncestream.spark import dual_writer

        return getattr(dual_writer, name)
    if name == "offsets_behind_latest":
        from oncestream.spark import source

        return source.offsets_behind_latest
    if name in ("SqliteStore", "PostgresStore"):
        from oncestream.spark import stores

        return getattr(stores, name)
    raise AttributeError(name)
