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
SASL_HANDSHAKE: Final = 17
API_VERSIONS_KEY: Final = 18
CREATE_TOPICS: Final = 19
DELETE_TOPICS: Final = 20
DELETE_RECORDS: Final = 21
INIT_PRODUCER_ID: Final = 22
ADD_PARTITIONS_TO_TXN: Final = 24
ADD_OFFSETS_TO_TXN: Final = 25
END_TXN: Final = 26
WRITE_TXN_MARKERS: Final = 27
TXN_OFFSET_COMMIT: Final = 28
DESCRIBE_ACLS: Final = 29
CREATE_ACLS: Final = 30
DELETE_ACLS: Final = 31
DESCRIBE_CONFIGS: Final = 32
ALTER_CONFIGS: Final = 33
DESCRIBE_LOG_DIRS: Final = 35
CREATE_PARTITIONS: Final = 37
SASL_AUTHENTICATE: Final = 36
DELETE_GROUPS: Final = 42
INCREMENTAL_ALTER_CONFIGS: Final = 44
OFFSET_DELETE: Final = 47
DESCRIBE_CLIENT_QUOTAS: Final = 48
ALTER_CLIENT_QUOTAS: Final = 49
DESCRIBE_USER_SCRAM_CREDENTIALS: Final = 50
ALTER_USER_SCRAM_CREDENTIALS: Final = 51
DESCRIBE_CLUSTER: Final = 60
DESCRIBE_PRODUCERS: Final = 61
DESCRIBE_TRANSACTIONS: Final = 65
LIST_TRANSACTIONS: Final = 66
CONSUMER_GROUP_HEARTBEAT: Final = 68
CONSUMER_GROUP_DESCRIBE: Final = 69
GET_TELEMETRY_SUBSCRIPTIONS: Final = 71
PUSH_TELEMETRY: Final = 72
LIST_CONFIG_RESOURCES: Final = 74
SHARE_GROUP_HEARTBEAT: Final = 76
SHARE_GROUP_DESCRIBE: Final = 77
SHARE_FETCH: Final = 78
SHARE_ACKNOWLEDGE: Final = 79
DESCRIBE_SHARE_GROUP_OFFSETS: Final = 90
ALTER_SHARE_GROUP_OFFSETS: Final = 91
DELETE_SHARE_GROUP_OFFSETS: Final = 92

# api_key -> (min_version, max_version), inclusive.
API_VERSIONS: Final[dict[int, tuple[int, int]]] = {
    PRODUCE: (3, 12),  # v12: transaction version 2 (KIP-890 part 2), implicit partition add
    FETCH: (4, 12),  # v13+ address topics by id
    LIST_OFFSETS: (1, 10),  # v8/v9: KIP-1005 tiered offsets -4/-5; v10: KIP-1075 timeout; v11 (-6) not ours
    METADATA: (0, 12),
    OFFSET_COMMIT: (2, 10),  # v9: member id + member epoch (KIP-848); v10: topics by id
    OFFSET_FETCH: (1, 10),  # v9: member id + member epoch checked (KIP-848); v10: topics by id
    FIND_COORDINATOR: (0, 4),
    JOIN_GROUP: (0, 9),
    HEARTBEAT: (0, 4),
    LEAVE_GROUP: (0, 5),
    SYNC_GROUP: (0, 5),
    DESCRIBE_GROUPS: (0, 5),
    LIST_GROUPS: (0, 5),
    SASL_HANDSHAKE: (0, 1),
    API_VERSIONS_KEY: (0, 3),
    CREATE_TOPICS: (2, 7),
    DELETE_TOPICS: (1, 6),
    DELETE_RECORDS: (0, 2),
    INIT_PRODUCER_ID: (0, 6),  # v6: KIP-939 enable2Pc / keepPreparedTxn
    ADD_PARTITIONS_TO_TXN: (0, 4),  # v4: batched, verify-only form (KIP-890 part 1)
    ADD_OFFSETS_TO_TXN: (0, 3),
    END_TXN: (0, 5),  # v5: transaction version 2, epoch bumped on every commit and abort
    WRITE_TXN_MARKERS: (1, 1),
    TXN_OFFSET_COMMIT: (0, 5),  # v5: transaction version 2 adds the offsets partition itself
    DESCRIBE_ACLS: (1, 3),  # kio has no v0 (no pattern type); Kafka 4 dropped v0 as well
    CREATE_ACLS: (1, 3),
    DELETE_ACLS: (1, 3),
    DESCRIBE_CONFIGS: (1, 4),
    ALTER_CONFIGS: (0, 2),
    DESCRIBE_LOG_DIRS: (1, 4),  # Kafka 4 dropped v0; v4 adds the volume's total/usable bytes; v5 (cordoned dirs) not served
    CREATE_PARTITIONS: (0, 3),
    SASL_AUTHENTICATE: (0, 2),
    DELETE_GROUPS: (0, 2),
    INCREMENTAL_ALTER_CONFIGS: (0, 1),
    OFFSET_DELETE: (0, 0),
    DESCRIBE_CLIENT_QUOTAS: (0, 1),  # KIP-546; v1 flexible (Kafka 4's AdminClient)
    ALTER_CLIENT_QUOTAS: (0, 1),
    DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),  # KIP-554
    ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    DESCRIBE_CLUSTER: (0, 1),  # KIP-700; v1: endpoint type (KIP-919); v2 (fenced brokers) not served
    DESCRIBE_PRODUCERS: (0, 0),
    DESCRIBE_TRANSACTIONS: (0, 0),
    LIST_TRANSACTIONS: (0, 1),
    CONSUMER_GROUP_HEARTBEAT: (0, 1),  # KIP-848; v1: the client makes its member id (KIP-1082)
    CONSUMER_GROUP_DESCRIBE: (0, 1),
    GET_TELEMETRY_SUBSCRIPTIONS: (0, 0),  # KIP-714 (librdkafka 2.16 sends v0, the only version)
    PUSH_TELEMETRY: (0, 0),
    LIST_CONFIG_RESOURCES: (0, 1),  # v0: ListClientMetricsResources; v1: any config resource type (KIP-1142)
    # KIP-932 share groups, v1 each: what librdkafka 2.16 sends (its only version) and Kafka 4.x's
    # first GA version. ShareFetch/ShareAcknowledge v2 (record-limit acquire mode, RENEW
    # acknowledgements) are not served.
    SHARE_GROUP_HEARTBEAT: (1, 1),
    SHARE_GROUP_DESCRIBE: (1, 1),
    SHARE_FETCH: (1, 1),
    SHARE_ACKNOWLEDGE: (1, 1),
    DESCRIBE_SHARE_GROUP_OFFSETS: (0, 1),  # v1 adds the lag
    ALTER_SHARE_GROUP_OFFSETS: (0, 0),
    DELETE_SHARE_GROUP_OFFSETS: (0, 0),
}

# The APIs that exist only while share groups are enabled (group.share.enable, share.version).
SHARE_GROUP_APIS: Final = frozenset({SHARE_GROUP_HEARTBEAT, SHARE_GROUP_DESCRIBE, SHARE_FETCH, SHARE_ACKNOWLEDGE,
                                     DESCRIBE_SHARE_GROUP_OFFSETS, ALTER_SHARE_GROUP_OFFSETS,
                                     DELETE_SHARE_GROUP_OFFSETS})

# Finalized feature levels announced in ApiVersions (v3+). transaction.version 2 tells clients
# they may use KIP-890 part 2 (Produce v12, TxnOffsetCommit v5, EndTxn v5).
# share.version 1 enables KIP-932 share groups (level 0, or group.share.enable=false, turns the
# share APIs off as Kafka 4.2 does). group.version 1 enables the KIP-848 consumer group protocol
# (0: ConsumerGroupHeartbeat and ConsumerGroupDescribe answer UNSUPPORTED_VERSION).
FEATURES: Final[dict[str, tuple[int, int]]] = {
    "transaction.version": (0, 2), "share.version": (0, 1), "group.version": (0, 1)}
