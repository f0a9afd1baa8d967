"""Transactional state stores (KIP-892) and the changelog materializer that fills them.

See docs/state-stores.md.
"""

from oncestream.state.errors import (
    CommitFailedError,
    IncompatibleFormatError,
    OffsetRegressionError,
    StateStoreError,
    StoreCorruptedError,
    StoreFailedError,
    StoreLockedError,
    UncommittedLimitError,
)
from oncestream.state.store import (
    CommittedReader,
    StateStore,
    UncommittedReader,
    WriteBatch,
)

__all__ = [
    "CommitFailedError",
    "CommittedReader",
    "IncompatibleFormatError",
    "OffsetRegressionError",
    "StateStore",
    "StateStoreError",
    "StoreCorruptedError",
    "StoreFailedError",
    "StoreLockedError",
    "UncommittedLimitError",
    "UncommittedReader",
    "WriteBatch",
]
