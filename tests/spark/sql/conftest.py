"""Fixtures of the SQL golden tests: one SparkSession for the module with the SQL server's
settings (``runtime.spark_session_config``), a broker with KIP-939 two-phase commit (the
exactly-once sink needs it) and a ``QueryRuntime`` over both."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from oncestream.sql.engine.processing_log import (
    ProcessingLogSettings,
    current_processing_log,
    ensure_topic,
    use_processing_log,
)
from oncestream.sql.engine.runtime import QueryRuntime, RuntimeSettings, spark_session_config
from tests.spark.sql.golden import unique


@pytest.fixture(scope="module")
def sql_spark(_spark_sessions: Any) -> Any:
    """A session of the shared SparkContext with the SQL server's settings (its own SQL conf,
    so other modules keep theirs); two shuffle partitions keep stateful batches cheap here."""
    from tests.spark.conftest import LOCAL_MASTER

    session = _spark_sessions.get(LOCAL_MASTER).newSession()
    for key, value in spark_session_config().items():
        session.conf.set(key, value)
    session.conf.set("spark.sql.shuffle.partitions", "2")
    return session


@pytest.fixture(scope="module")
def runtime(sql_spark: Any, eos_broker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[QueryRuntime]:
    """A query runtime writing checkpoints under a temporary root."""
    settings = RuntimeSettings(bootstrap_servers=eos_broker.bootstrap,
                               checkpoint_root=str(tmp_path_factory.mktemp("checkpoints")),
                               service_id="golden_")
    rt = QueryRuntime(sql_spark, settings)
    try:
        yield rt
    finally:
        rt.stop_all()


@pytest.fixture(scope="module")
def registry(eos_broker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """``oncestream schema-registry`` on the module's broker, made the SQL engine's registry (as
    server_main does from ``ksql.schema.registry.url``) for the module."""
    from oncestream.spark.schema_registry_client import RegistryClient
    from oncestream.sql.engine.serde import current_registry, use_registry
    from tests.support.schema_registries import SchemaRegistryProcess

    process = SchemaRegistryProcess(bootstrap=eos_broker.bootstrap, work_dir=tmp_path_factory.mktemp("registry"))
    process.start()
    before = current_registry()
    try:
        process.wait_writable()
        use_registry(RegistryClient(process.url))
        yield process
    finally:
        use_registry(before)
        process.stop()


@pytest.fixture
def processing_log(eos_broker: Any) -> Iterator[ProcessingLogSettings]:
    """A processing-log topic for queries compiled during the test (as the server's
    ``ksql.logging.processing.topic.auto.create=true`` and ``rows.include=true`` make one)."""
    settings = ProcessingLogSettings.from_properties(
        {"ksql.logging.processing.topic.auto.create": "true", "ksql.logging.processing.rows.include": "true",
         "ksql.logging.processing.stream.auto.create": "true"}, unique("golden_"), eos_broker.bootstrap, {})
    assert settings.topic is not None
    assert settings.topic.endswith("ksql_processing_log")
    ensure_topic(settings)
    before = current_processing_log()
    use_processing_log(settings)
    try:
        yield settings
    finally:
        use_processing_log(before)
