"""Fixtures of the cluster library tests: a database with the cluster schema, an object store."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from oncestream.remote.object_store import ObjectStore, open_object_store
from tests.cluster.diskless_read_support import create_schema
from tests.support.seaweedfs import SeaweedServer, clean_environ


@pytest.fixture
def cluster_db(pg_database: str) -> str:
    """A fresh database with the catalog's and the diskless tables."""
    asyncio.run(create_schema(pg_database))
    return pg_database


@pytest.fixture
def object_store(seaweedfs: SeaweedServer) -> ObjectStore:
    """A fresh key prefix in the session's SeaweedFS bucket."""
    return open_object_store(seaweedfs.uri(f"diskless-{uuid.uuid4().hex}"), clean_environ(**seaweedfs.env()))
