"""Fixtures of the cluster library tests."""

from __future__ import annotations

import uuid

import pytest

from oncestream.remote.object_store import ObjectStore, open_object_store
from tests.support.seaweedfs import SeaweedServer, clean_environ


@pytest.fixture
def object_store(seaweedfs: SeaweedServer) -> ObjectStore:
    """A fresh key prefix in the session's SeaweedFS bucket."""
    return open_object_store(seaweedfs.uri(f"diskless-{uuid.uuid4().hex}"), clean_environ(**seaweedfs.env()))
