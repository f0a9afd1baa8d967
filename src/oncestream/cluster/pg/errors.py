"""Typed errors of cluster mode's PostgreSQL access, each with the Kafka error code a handler answers.

``MetadataStoreUnavailableError`` is retriable: PostgreSQL could not be reached or kept failing
with retriable errors until the retry bound; nothing was committed (REQUEST_TIMED_OUT, which every
Kafka client retries). Its subclass ``CommitOutcomeUnknownError`` is the one case where the caller
must not assume either way: the connection was lost after COMMIT was sent, so the transaction may
or may not have committed; the caller reads back (``MetadataStore.run(fn, read_back=...)``) before
answering, or answers as Kafka does for a timed-out write (REQUEST_TIMED_OUT: maybe persisted). A
handler that catches ``MetadataStoreUnavailableError`` and answers REQUEST_TIMED_OUT is right for
both.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from oncestream.errors import OnceStreamError


class MetadataStoreError(OnceStreamError):
    """PostgreSQL refused a statement for a reason retrying does not cure (a bug, a constraint,
    wrong credentials, a missing database)."""

    code = ErrorCode.unknown_server_error


class MetadataStoreUnavailableError(MetadataStoreError):
    """PostgreSQL is unreachable or kept failing retriably until the retry bound; retriable."""

    code = ErrorCode.request_timed_out


class CommitOutcomeUnknownError(MetadataStoreUnavailableError):
    """The connection dropped after COMMIT was sent: the transaction may have committed. Resolve
    by reading back; never assume it failed (a retry could apply it twice) or succeeded."""


class BadMetadataStoreUrlError(MetadataStoreError):
    """``--metadata-store`` is not a ``postgresql://USER[:PASSWORD]@HOST:PORT/DB`` URL."""

    code = ErrorCode.invalid_config


class NodeIdInUseError(MetadataStoreError):
    """Another live broker incarnation holds this node id (its lease has not expired)."""

    code = ErrorCode.duplicate_broker_registration


class BrokerFencedError(MetadataStoreError):
    """This broker's registration lease expired (by PostgreSQL's clock) or was taken over: it
    must stop acting for the cluster and register again."""

    code = ErrorCode.stale_broker_epoch


class SecurityStoreWriteError(OSError):
    """An ACL or SCRAM credential change could not be written to PostgreSQL. An ``OSError``, as
    the file stores' write failures are, so the broker's handlers answer it the same way
    (KAFKA_STORAGE_ERROR, "not stored"). The change may have committed when the connection was
    lost during COMMIT; every such change is idempotent, so the client may simply retry it."""
