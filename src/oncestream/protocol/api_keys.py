"""The one table of API versions this broker supports.

Only APIs whose every advertised version is fully implemented by a handler appear here; the
ApiVersions response and the request dispatcher both read this table, so adding a row without a
handler fails the dispatcher's start-up check (see broker/dispatch.py).
"""

from __future__ import annotations

from typing import Final

PRODUCE: Final = 0
FETCH: Final = 1
LIST_OFFSETS: Final = 2
METADATA: Final = 3
OFFSET_COMMIT: Final = 8
OFFSET_FETCH: Final = 9
FIND_COORDINATOR: Final = 10
JOIN_GROUP: Final = 11
HEARTBEAT: Final = 12
LEAVE_GROUP: Final = 13
SYNC_GROUP: Final = 14
DESCRIBE_GROUPS: Final = 15
LIST_GROUPS: Final = 16
API_VERSIONS_KEY: Final = 18
CREATE_TOPICS: Final = 19
DELETE_TOPICS: Final = 20
DELETE_RECORDS: Final = 21
INIT_PRODUCER_ID: Final = 22
DESCRIBE_CONFIGS: Final = 32
ALTER_CONFIGS: Final = 33
DELETE_GROUPS: Final = 42
INCREMENTAL_ALTER_CONFIGS: Final = 44
OFFSET_DELETE: Final = 47

# api_key -> (min_version, max_version), inclusive.
API_VERSIONS: Final[dict[int, tuple[int, int]]] = {
    PRODUCE: (3, 11),  # v12 means transaction version 2 (KIP-890 part 2): not yet
    FETCH: (4, 12),  # v13+ address topics by id
    LIST_OFFSETS: (1, 6),  # v7 adds MAX_TIMESTAMP (-3): not yet
    METADATA: (0, 12),
    OFFSET_COMMIT: (2, 8),  # v9+ belong to the KIP-848 consumer protocol
    OFFSET_FETCH: (1, 8),
    FIND_COORDINATOR: (0, 4),
    JOIN_GROUP: (0, 9),
    HEARTBEAT: (0, 4),
    LEAVE_GROUP: (0, 5),
    SYNC_GROUP: (0, 5),
    DESCRIBE_GROUPS: (0, 5),
    LIST_GROUPS: (0, 5),
    API_VERSIONS_KEY: (0, 3),
    CREATE_TOPICS: (2, 7),
    DELETE_TOPICS: (1, 6),
    DELETE_RECORDS: (0, 2),
    INIT_PRODUCER_ID: (0, 4),
    DESCRIBE_CONFIGS: (1, 4),
    ALTER_CONFIGS: (0, 2),
    DELETE_GROUPS: (0, 2),
    INCREMENTAL_ALTER_CONFIGS: (0, 1),
    OFFSET_DELETE: (0, 0),
}
