"""The object store behind tiered storage: one narrow, blocking interface and the URI that picks one.

``ObjectStore`` is all the remote log manager and the remote reader know about storage (Kafka's
RemoteStorageManager plays this part, one level higher). Two implementations:

- ``s3://BUCKET/PREFIX``: any S3 API (AWS, SeaweedFS, MinIO, Ceph...) through obstore
  (``s3_store.S3ObjectStore``); the AWS_* environment variables and the AWS shared files
  configure it.
- ``file:///path``: a directory (``local_store.LocalObjectStore``), for tests and for a shared
  file system mounted on the broker.

Every failure is a ``RemoteStorageError`` (``RemoteObjectNotFoundError`` for a missing key,
``RemoteAccessDeniedError`` for refused credentials) whose message names the key and the store.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import BinaryIO, Protocol, runtime_checkable
from urllib.parse import unquote, urlsplit

from oncestream.errors import InvalidConfigError


@runtime_checkable
class ObjectStore(Protocol):
    """Blocking, thread-safe; called only on the broker's remote threads. Keys are relative to the
    store's root (bucket prefix or directory), ``/``-separated, never starting with ``/``."""

    description: str
    """The URI without credentials, for logs and DescribeConfigs."""

    def put(self, key: str, data: bytes | memoryview) -> None:
        """Store ``data`` under ``key`` all at once: a reader sees the old object or the new one."""
        ...

    def put_file(self, key: str, file: BinaryIO, size: int) -> None:
        """Store the next ``size`` bytes of the open ``file`` under ``key``, streamed (segments
        reach 1 GiB); all at once as ``put``. A file shorter than ``size`` is an error."""
        ...

    def get(self, key: str) -> bytes:
        """The whole object under ``key``."""
        ...

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object; shorter when the object ends before ``end``
        (empty when it ends at or before ``start``)."""
        ...

    def size(self, key: str) -> int:
        """The object's length in bytes."""
        ...

    def delete(self, key: str) -> None:
        """Remove the object; a missing key is not an error (deletes are retried after crashes)."""
        ...

    def list(self, prefix: str) -> builtins.list[str]:
        """Every key that starts with ``prefix`` (a plain string prefix), sorted."""
        ...


def open_object_store(uri: str, environ: Mapping[str, str]) -> ObjectStore:
    """The store ``uri`` names (``rsm.config.storage.uri``): ``s3://BUCKET[/PREFIX]`` or
    ``file:///ABSOLUTE/PATH``. ``environ`` supplies the AWS_* variables of an S3 store (the
    broker passes ``os.environ``). InvalidConfigError for a URI that names no store."""
    parts = urlsplit(uri)
    if parts.username is not None or parts.password is not None:
        raise InvalidConfigError(
            "object store uri: credentials do not belong in the uri"
            " (set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or the AWS shared files)"
        )
    if parts.query or parts.fragment:
        raise InvalidConfigError(f"object store uri {uri!r}: no query or fragment is understood")
    if parts.scheme == "s3":
        bucket = parts.netloc
        if not bucket:
            raise InvalidConfigError(f"object store uri {uri!r}: no bucket (s3://BUCKET/PREFIX)")
        prefix = unquote(parts.path).strip("/")
        from oncestream.remote.s3_store import S3ObjectStore  # obstore loads only when S3 is used

        return S3ObjectStore(bucket, prefix, environ)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise InvalidConfigError(
                f"object store uri {uri!r}: a file uri names a local path (file:///path)"
            )
        path = unquote(parts.path)
        if not path.startswith("/") or path.rstrip("/") == "":
            raise InvalidConfigError(
                f"object store uri {uri!r}: the directory must be an absolute path other than /"
            )
        from oncestream.remote.local_store import LocalObjectStore

        return LocalObjectStore(path)
    raise InvalidConfigError(
        f"object store uri {uri!r}: the scheme must be s3:// or file:// (got {parts.scheme!r})"
    )
