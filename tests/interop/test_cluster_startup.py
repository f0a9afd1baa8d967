"""``oncestream broker --metadata-store ... --object-store ...``: the start-up refusals, as processes.

A cluster broker checks its configuration and both stores before it binds a port; each bad case
ends the process with a message in words and its exit code: 2 for a usage error (argparse), 1 for
a bad configuration, 3 (EXIT_STORE_UNAVAILABLE) for a store that cannot be used: PostgreSQL not
answering, the object store refusing the credentials, or its bucket missing.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from oncestream.broker.cluster_settings import EXIT_STORE_UNAVAILABLE
from oncestream.broker_process import free_tcp_port, oncestream_command
from oncestream.postgres_process import PostgresServer
from tests.support.seaweedfs import SeaweedServer, clean_environ

pytestmark = pytest.mark.interop

RUN_TIMEOUT_S = 120.0  # a bound on a hang only


def _broker(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    argv = [*oncestream_command(), "broker", "--listen", f"127.0.0.1:{free_tcp_port()}", *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)


def _cluster_args(metadata_store: str, object_store: str, *extra: str) -> list[str]:
    return ["--metadata-store", metadata_store, "--object-store", object_store, "--config", "node.id=1", *extra]


def test_data_dir_and_metadata_store_exclude_each_other(tmp_path: Path, pg_database: str) -> None:
    done = _broker(["--data-dir", str(tmp_path), "--metadata-store", pg_database,
                    "--object-store", f"file://{tmp_path}/objects"], clean_environ())
    assert done.returncode == 2, done.stderr
    assert "not allowed with argument" in done.stderr


def test_cluster_mode_needs_a_node_id_and_an_object_store(tmp_path: Path, pg_database: str) -> None:
    no_node = _broker(["--metadata-store", pg_database, "--object-store", f"file://{tmp_path}/objects"],
                      clean_environ())
    assert no_node.returncode == 1, no_node.stderr
    assert "node.id" in no_node.stderr
    no_store = _broker(["--metadata-store", pg_database, "--config", "node.id=1"], clean_environ())
    assert no_store.returncode == 1, no_store.stderr
    assert "--object-store" in no_store.stderr


def test_a_bad_consolidation_key_exits_before_any_store_is_touched(tmp_path: Path, pg_database: str) -> None:
    done = _broker(["--metadata-store", pg_database, "--object-store", f"file://{tmp_path}/objects",
                    "--config", "node.id=1", "--config", "diskless.consolidation.min.batches=many"], clean_environ())
    assert done.returncode == 1, done.stderr
    assert "diskless.consolidation.min.batches" in done.stderr
    assert not (tmp_path / "objects").exists()  # the object store's probe never ran


def test_unreachable_postgresql_is_named(tmp_path: Path) -> None:
    url = f"postgresql://postgres@127.0.0.1:{free_tcp_port()}/nothing_listens_here"
    done = _broker(_cluster_args(url, f"file://{tmp_path}/objects"), clean_environ())
    assert done.returncode == EXIT_STORE_UNAVAILABLE, done.stderr
    assert "metadata store postgresql://postgres@127.0.0.1" in done.stderr
    assert "cannot connect" in done.stderr


def test_missing_database_is_named(tmp_path: Path, postgres: PostgresServer) -> None:
    done = _broker(_cluster_args(postgres.url("no_such_database"), f"file://{tmp_path}/objects"), clean_environ())
    assert done.returncode == EXIT_STORE_UNAVAILABLE, done.stderr
    assert "no_such_database" in done.stderr
    assert "does not exist" in done.stderr


def test_wrong_s3_credentials_are_named(pg_database: str, seaweedfs: SeaweedServer) -> None:
    env = clean_environ(**{**seaweedfs.env(), "AWS_SECRET_ACCESS_KEY": "not-the-secret-key"})
    done = _broker(_cluster_args(pg_database, seaweedfs.uri("startup-wrong-key")), env)
    assert done.returncode == EXIT_STORE_UNAVAILABLE, done.stderr
    assert "access denied" in done.stderr
    assert "AWS_SECRET_ACCESS_KEY" in done.stderr


def test_missing_bucket_is_named(pg_database: str, seaweedfs: SeaweedServer) -> None:
    env = clean_environ(**seaweedfs.env())
    done = _broker(_cluster_args(pg_database, "s3://no-such-bucket-here/prefix"), env)
    assert done.returncode == EXIT_STORE_UNAVAILABLE, done.stderr
    assert "bucket does not exist" in done.stderr
