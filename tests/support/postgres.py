"""pytest fixtures of a real PostgreSQL server (oncestream/postgres_process.py).

Fixtures: ``postgres`` (one server for the whole session; tests must leave it running),
``pg_database`` (a fresh, empty database of that server per test: its ``postgresql://`` URL) and
``postgres_factory`` (servers of a module's own, for tests that stop, kill or restart them).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator

import psycopg
import pytest

from oncestream.postgres_process import PostgresServer

__all__ = ["PostgresServer", "create_database", "pg_database", "postgres", "postgres_factory"]

_database_numbers = itertools.count()


def create_database(server: PostgresServer, prefix: str = "t") -> str:
    """Create an empty database on ``server``; its name (unique in this process)."""
    name = f"{prefix}_{os.getpid()}_{next(_database_numbers)}"
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One PostgreSQL for the whole session (initdb takes seconds); tests use their own database
    (``pg_database``) and leave the server running; tests that stop it use ``postgres_factory``."""
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture
def pg_database(postgres: PostgresServer) -> str:
    """The ``postgresql://`` URL of a fresh database on the session's server."""
    return postgres.url(create_database(postgres))


@pytest.fixture(scope="module")
def postgres_factory() -> Iterator[Callable[[], PostgresServer]]:
    """Start PostgreSQL servers of the module's own (to stop, kill and restart); all removed at the end."""
    started: list[PostgresServer] = []

    def start() -> PostgresServer:
        server = PostgresServer()
        started.append(server)
        return server.start()

    try:
        yield start
    finally:
        for server in started:
            server.remove()
