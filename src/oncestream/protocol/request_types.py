"""One typed request per API at the handler boundary (generated: do not edit by hand).

Each alias is the union of kio's generated request dataclasses of exactly the versions
``protocol/api_keys.API_VERSIONS`` advertises, so a handler annotated ``request: ProduceRequest``
gets attribute access mypy checks against every version it answers: a field some version lacks
is a type error unless the handler asks for it version-aware (``getattr``/``has_field``). The
dispatcher hands handlers kio's decoded object itself (no copy: Produce's records stay the views
kio decoded).

The imports are for the type checker only: importing every version's module at start-up would
cost the broker and the client a few hundred module imports they never use. Regenerate with
``python -m tests.unit.test_protocol_request_types`` after changing the API table; the unit test
of that name fails while this file and the table disagree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import TypeAlias

    from kio.schema.add_offsets_to_txn.v0 import request as _add_offsets_to_txn_v0
    from kio.schema.add_offsets_to_txn.v1 import request as _add_offsets_to_txn_v1
    from kio.schema.add_offsets_to_txn.v2 import request as _add_offsets_to_txn_v2
    from kio.schema.add_offsets_to_txn.v3 import request as _add_offsets_to_txn_v3
    from kio.schema.add_partitions_to_txn.v0 import request as _add_partitions_to_txn_v0
    from kio.schema.add_partitions_to_txn.v1 import request as _add_partitions_to_txn_v1
    from kio.schema.add_partitions_to_txn.v2 import request as _add_partitions_to_txn_v2
    from kio.schema.add_partitions_to_txn.v3 import request as _add_partitions_to_txn_v3
    from kio.schema.add_partitions_to_txn.v4 import request as _add_partitions_to_txn_v4
    from kio.schema.alter_client_quotas.v0 import request as _alter_client_quotas_v0
    from kio.schema.alter_client_quotas.v1 import request as _alter_client_quotas_v1
    from kio.schema.alter_configs.v0 import request as _alter_configs_v0
    from kio.schema.alter_configs.v1 import request as _alter_configs_v1
    from kio.schema.alter_configs.v2 import request as _alter_configs_v2
    from kio.schema.alter_share_group_offsets.v0 import request as _alter_share_group_offsets_v0
    from kio.schema.alter_user_scram_credentials.v0 import request as _alter_user_scram_credentials_v0
    from kio.schema.api_versions.v0 import request as _api_versions_v0
    from kio.schema.api_versions.v1 import request as _api_versions_v1
    from kio.schema.api_versions.v2 import request as _api_versions_v2
    from kio.schema.api_versions.v3 import request as _api_versions_v3
    from kio.schema.consumer_group_describe.v0 import request as _consumer_group_describe_v0
    from kio.schema.consumer_group_describe.v1 import request as _consumer_group_describe_v1
    from kio.schema.consumer_group_heartbeat.v0 import request as _consumer_group_heartbeat_v0
    from kio.schema.consumer_group_heartbeat.v1 import request as _consumer_group_heartbeat_v1
    from kio.schema.create_acls.v1 import request as _create_acls_v1
    from kio.schema.create_acls.v2 import request as _create_acls_v2
    from kio.schema.create_acls.v3 import request as _create_acls_v3
    from kio.schema.create_partitions.v0 import request as _create_partitions_v0
    from kio.schema.create_partitions.v1 import request as _create_partitions_v1
    from kio.schema.create_partitions.v2 import request as _create_partitions_v2
    from kio.schema.create_partitions.v3 import request as _create_partitions_v3
    from kio.schema.create_topics.v2 import request as _create_topics_v2
    from kio.schema.create_topics.v3 import request as _create_topics_v3
    from kio.schema.create_topics.v4 import request as _create_topics_v4
    from kio.schema.create_topics.v5 import request as _create_topics_v5
    from kio.schema.create_topics.v6 import request as _create_topics_v6
    from kio.schema.create_topics.v7 import request as _create_topics_v7
    from kio.schema.delete_acls.v1 import request as _delete_acls_v1
    from kio.schema.delete_acls.v2 import request as _delete_acls_v2
    from kio.schema.delete_acls.v3 import request as _delete_acls_v3
    from kio.schema.delete_groups.v0 import request as _delete_groups_v0
    from kio.schema.delete_groups.v1 import request as _delete_groups_v1
    from kio.schema.delete_groups.v2 import request as _delete_groups_v2
    from kio.schema.delete_records.v0 import request as _delete_records_v0
    from kio.schema.delete_records.v1 import request as _delete_records_v1
    from kio.schema.delete_records.v2 import request as _delete_records_v2
    from kio.schema.delete_share_group_offsets.v0 import request as _delete_share_group_offsets_v0
    from kio.schema.delete_topics.v1 import request as _delete_topics_v1
    from kio.schema.delete_topics.v2 import request as _delete_topics_v2
    from kio.schema.delete_topics.v3 import request as _delete_topics_v3
    from kio.schema.delete_topics.v4 import request as _delete_topics_v4
    from kio.schema.delete_topics.v5 import request as _delete_topics_v5
    from kio.schema.delete_topics.v6 import request as _delete_topics_v6
    from kio.schema.describe_acls.v1 import request as _describe_acls_v1
    from kio.schema.describe_acls.v2 import request as _describe_acls_v2
    from kio.schema.describe_acls.v3 import request as _describe_acls_v3
    from kio.schema.describe_client_quotas.v0 import request as _describe_client_quotas_v0
    from kio.schema.describe_client_quotas.v1 import request as _describe_client_quotas_v1
    from kio.schema.describe_cluster.v0 import request as _describe_cluster_v0
    from kio.schema.describe_cluster.v1 import request as _describe_cluster_v1
    from kio.schema.describe_configs.v1 import request as _describe_configs_v1
    from kio.schema.describe_configs.v2 import request as _describe_configs_v2
    from kio.schema.describe_configs.v3 import request as _describe_configs_v3
    from kio.schema.describe_configs.v4 import request as _describe_configs_v4
    from kio.schema.describe_groups.v0 import request as _describe_groups_v0
    from kio.schema.describe_groups.v1 import request as _describe_groups_v1
    from kio.schema.describe_groups.v2 import request as _describe_groups_v2
    from kio.schema.describe_groups.v3 import request as _describe_groups_v3
    from kio.schema.describe_groups.v4 import request as _describe_groups_v4
    from kio.schema.describe_groups.v5 import request as _describe_groups_v5
    from kio.schema.describe_log_dirs.v1 import request as _describe_log_dirs_v1
    from kio.schema.describe_log_dirs.v2 import request as _describe_log_dirs_v2
    from kio.schema.describe_log_dirs.v3 import request as _describe_log_dirs_v3
    from kio.schema.describe_log_dirs.v4 import request as _describe_log_dirs_v4
    from kio.schema.describe_producers.v0 import request as _describe_producers_v0
    from kio.schema.describe_share_group_offsets.v0 import request as _describe_share_group_offsets_v0
    from kio.schema.describe_share_group_offsets.v1 import request as _describe_share_group_offsets_v1
    from kio.schema.describe_transactions.v0 import request as _describe_transactions_v0
    from kio.schema.describe_user_scram_credentials.v0 import request as _describe_user_scram_credentials_v0
    from kio.schema.end_txn.v0 import request as _end_txn_v0
    from kio.schema.end_txn.v1 import request as _end_txn_v1
    from kio.schema.end_txn.v2 import request as _end_txn_v2
    from kio.schema.end_txn.v3 import request as _end_txn_v3
    from kio.schema.end_txn.v4 import request as _end_txn_v4
    from kio.schema.end_txn.v5 import request as _end_txn_v5
    from kio.schema.fetch.v4 import request as _fetch_v4
    from kio.schema.fetch.v5 import request as _fetch_v5
    from kio.schema.fetch.v6 import request as _fetch_v6
    from kio.schema.fetch.v7 import request as _fetch_v7
    from kio.schema.fetch.v8 import request as _fetch_v8
    from kio.schema.fetch.v9 import request as _fetch_v9
    from kio.schema.fetch.v10 import request as _fetch_v10
    from kio.schema.fetch.v11 import request as _fetch_v11
    from kio.schema.fetch.v12 import request as _fetch_v12
    from kio.schema.find_coordinator.v0 import request as _find_coordinator_v0
    from kio.schema.find_coordinator.v1 import request as _find_coordinator_v1
    from kio.schema.find_coordinator.v2 import request as _find_coordinator_v2
    from kio.schema.find_coordinator.v3 import request as _find_coordinator_v3
    from kio.schema.find_coordinator.v4 import request as _find_coordinator_v4
    from kio.schema.get_telemetry_subscriptions.v0 import request as _get_telemetry_subscriptions_v0
    from kio.schema.heartbeat.v0 import request as _heartbeat_v0
    from kio.schema.heartbeat.v1 import request as _heartbeat_v1
    from kio.schema.heartbeat.v2 import request as _heartbeat_v2
    from kio.schema.heartbeat.v3 import request as _heartbeat_v3
    from kio.schema.heartbeat.v4 import request as _heartbeat_v4
    from kio.schema.incremental_alter_configs.v0 import request as _incremental_alter_configs_v0
    from kio.schema.incremental_alter_configs.v1 import request as _incremental_alter_configs_v1
    from kio.schema.init_producer_id.v0 import request as _init_producer_id_v0
    from kio.schema.init_producer_id.v1 import request as _init_producer_id_v1
    from kio.schema.init_producer_id.v2 import request as _init_producer_id_v2
    from kio.schema.init_producer_id.v3 import request as _init_producer_id_v3
    from kio.schema.init_producer_id.v4 import request as _init_producer_id_v4
    from kio.schema.init_producer_id.v5 import request as _init_producer_id_v5
    from kio.schema.init_producer_id.v6 import request as _init_producer_id_v6
    from kio.schema.join_group.v0 import request as _join_group_v0
    from kio.schema.join_group.v1 import request as _join_group_v1
    from kio.schema.join_group.v2 import request as _join_group_v2
    from kio.schema.join_group.v3 import request as _join_group_v3
    from kio.schema.join_group.v4 import request as _join_group_v4
    from kio.schema.join_group.v5 import request as _join_group_v5
    from kio.schema.join_group.v6 import request as _join_group_v6
    from kio.schema.join_group.v7 import request as _join_group_v7
    from kio.schema.join_group.v8 import request as _join_group_v8
    from kio.schema.join_group.v9 import request as _join_group_v9
    from kio.schema.leave_group.v0 import request as _leave_group_v0
    from kio.schema.leave_group.v1 import request as _leave_group_v1
    from kio.schema.leave_group.v2 import request as _leave_group_v2
    from kio.schema.leave_group.v3 import request as _leave_group_v3
    from kio.schema.leave_group.v4 import request as _leave_group_v4
    from kio.schema.leave_group.v5 import request as _leave_group_v5
    from kio.schema.list_config_resources.v0 import request as _list_config_resources_v0
    from kio.schema.list_config_resources.v1 import request as _list_config_resources_v1
    from kio.schema.list_groups.v0 import request as _list_groups_v0
    from kio.schema.list_groups.v1 import request as _list_groups_v1
    from kio.schema.list_groups.v2 import request as _list_groups_v2
    from kio.schema.list_groups.v3 import request as _list_groups_v3
    from kio.schema.list_groups.v4 import request as _list_groups_v4
    from kio.schema.list_groups.v5 import request as _list_groups_v5
    from kio.schema.list_offsets.v1 import request as _list_offsets_v1
    from kio.schema.list_offsets.v2 import request as _list_offsets_v2
    from kio.schema.list_offsets.v3 import request as _list_offsets_v3
    from kio.schema.list_offsets.v4 import request as _list_offsets_v4
    from kio.schema.list_offsets.v5 import request as _list_offsets_v5
    from kio.schema.list_offsets.v6 import request as _list_offsets_v6
    from kio.schema.list_offsets.v7 import request as _list_offsets_v7
    from kio.schema.list_offsets.v8 import request as _list_offsets_v8
    from kio.schema.list_offsets.v9 import request as _list_offsets_v9
    from kio.schema.list_offsets.v10 import request as _list_offsets_v10
    from kio.schema.list_transactions.v0 import request as _list_transactions_v0
    from kio.schema.list_transactions.v1 import request as _list_transactions_v1
    from kio.schema.metadata.v0 import request as _metadata_v0
    from kio.schema.metadata.v1 import request as _metadata_v1
    from kio.schema.metadata.v2 import request as _metadata_v2
    from kio.schema.metadata.v3 import request as _metadata_v3
    from kio.schema.metadata.v4 import request as _metadata_v4
    from kio.schema.metadata.v5 import request as _metadata_v5
    from kio.schema.metadata.v6 import request as _metadata_v6
    from kio.schema.metadata.v7 import request as _metadata_v7
    from kio.schema.metadata.v8 import request as _metadata_v8
    from kio.schema.metadata.v9 import request as _metadata_v9
    from kio.schema.metadata.v10 import request as _metadata_v10
    from kio.schema.metadata.v11 import request as _metadata_v11
    from kio.schema.metadata.v12 import request as _metadata_v12
    from kio.schema.offset_commit.v2 import request as _offset_commit_v2
    from kio.schema.offset_commit.v3 import request as _offset_commit_v3
    from kio.schema.offset_commit.v4 import request as _offset_commit_v4
    from kio.schema.offset_commit.v5 import request as _offset_commit_v5
    from kio.schema.offset_commit.v6 import request as _offset_commit_v6
    from kio.schema.offset_commit.v7 import request as _offset_commit_v7
    from kio.schema.offset_commit.v8 import request as _offset_commit_v8
    from kio.schema.offset_commit.v9 import request as _offset_commit_v9
    from kio.schema.offset_commit.v10 import request as _offset_commit_v10
    from kio.schema.offset_delete.v0 import request as _offset_delete_v0
    from kio.schema.offset_fetch.v1 import request as _offset_fetch_v1
    from kio.schema.offset_fetch.v2 import request as _offset_fetch_v2
    from kio.schema.offset_fetch.v3 import request as _offset_fetch_v3
    from kio.schema.offset_fetch.v4 import request as _offset_fetch_v4
    from kio.schema.offset_fetch.v5 import request as _offset_fetch_v5
    from kio.schema.offset_fetch.v6 import request as _offset_fetch_v6
    from kio.schema.offset_fetch.v7 import request as _offset_fetch_v7
    from kio.schema.offset_fetch.v8 import request as _offset_fetch_v8
    from kio.schema.offset_fetch.v9 import request as _offset_fetch_v9
    from kio.schema.offset_fetch.v10 import request as _offset_fetch_v10
    from kio.schema.produce.v3 import request as _produce_v3
    from kio.schema.produce.v4 import request as _produce_v4
    from kio.schema.produce.v5 import request as _produce_v5
    from kio.schema.produce.v6 import request as _produce_v6
    from kio.schema.produce.v7 import request as _produce_v7
    from kio.schema.produce.v8 import request as _produce_v8
    from kio.schema.produce.v9 import request as _produce_v9
    from kio.schema.produce.v10 import request as _produce_v10
    from kio.schema.produce.v11 import request as _produce_v11
    from kio.schema.produce.v12 import request as _produce_v12
    from kio.schema.push_telemetry.v0 import request as _push_telemetry_v0
    from kio.schema.sasl_authenticate.v0 import request as _sasl_authenticate_v0
    from kio.schema.sasl_authenticate.v1 import request as _sasl_authenticate_v1
    from kio.schema.sasl_authenticate.v2 import request as _sasl_authenticate_v2
    from kio.schema.sasl_handshake.v0 import request as _sasl_handshake_v0
    from kio.schema.sasl_handshake.v1 import request as _sasl_handshake_v1
    from kio.schema.share_acknowledge.v1 import request as _share_acknowledge_v1
    from kio.schema.share_fetch.v1 import request as _share_fetch_v1
    from kio.schema.share_group_describe.v1 import request as _share_group_describe_v1
    from kio.schema.share_group_heartbeat.v1 import request as _share_group_heartbeat_v1
    from kio.schema.sync_group.v0 import request as _sync_group_v0
    from kio.schema.sync_group.v1 import request as _sync_group_v1
    from kio.schema.sync_group.v2 import request as _sync_group_v2
    from kio.schema.sync_group.v3 import request as _sync_group_v3
    from kio.schema.sync_group.v4 import request as _sync_group_v4
    from kio.schema.sync_group.v5 import request as _sync_group_v5
    from kio.schema.txn_offset_commit.v0 import request as _txn_offset_commit_v0
    from kio.schema.txn_offset_commit.v1 import request as _txn_offset_commit_v1
    from kio.schema.txn_offset_commit.v2 import request as _txn_offset_commit_v2
    from kio.schema.txn_offset_commit.v3 import request as _txn_offset_commit_v3
    from kio.schema.txn_offset_commit.v4 import request as _txn_offset_commit_v4
    from kio.schema.txn_offset_commit.v5 import request as _txn_offset_commit_v5
    from kio.schema.write_txn_markers.v1 import request as _write_txn_markers_v1

    ProduceRequest: TypeAlias = (
        _produce_v3.ProduceRequest
        | _produce_v4.ProduceRequest
        | _produce_v5.ProduceRequest
        | _produce_v6.ProduceRequest
        | _produce_v7.ProduceRequest
        | _produce_v8.ProduceRequest
        | _produce_v9.ProduceRequest
        | _produce_v10.ProduceRequest
        | _produce_v11.ProduceRequest
        | _produce_v12.ProduceRequest
    )  # api key 0
    FetchRequest: TypeAlias = (
        _fetch_v4.FetchRequest
        | _fetch_v5.FetchRequest
        | _fetch_v6.FetchRequest
        | _fetch_v7.FetchRequest
        | _fetch_v8.FetchRequest
        | _fetch_v9.FetchRequest
        | _fetch_v10.FetchRequest
        | _fetch_v11.FetchRequest
        | _fetch_v12.FetchRequest
    )  # api key 1
    ListOffsetsRequest: TypeAlias = (
        _list_offsets_v1.ListOffsetsRequest
        | _list_offsets_v2.ListOffsetsRequest
        | _list_offsets_v3.ListOffsetsRequest
        | _list_offsets_v4.ListOffsetsRequest
        | _list_offsets_v5.ListOffsetsRequest
        | _list_offsets_v6.ListOffsetsRequest
        | _list_offsets_v7.ListOffsetsRequest
        | _list_offsets_v8.ListOffsetsRequest
        | _list_offsets_v9.ListOffsetsRequest
        | _list_offsets_v10.ListOffsetsRequest
    )  # api key 2
    MetadataRequest: TypeAlias = (
        _metadata_v0.MetadataRequest
        | _metadata_v1.MetadataRequest
        | _metadata_v2.MetadataRequest
        | _metadata_v3.MetadataRequest
        | _metadata_v4.MetadataRequest
        | _metadata_v5.MetadataRequest
        | _metadata_v6.MetadataRequest
        | _metadata_v7.MetadataRequest
        | _metadata_v8.MetadataRequest
        | _metadata_v9.MetadataRequest
        | _metadata_v10.MetadataRequest
        | _metadata_v11.MetadataRequest
        | _metadata_v12.MetadataRequest
    )  # api key 3
    OffsetCommitRequest: TypeAlias = (
        _offset_commit_v2.OffsetCommitRequest
        | _offset_commit_v3.OffsetCommitRequest
        | _offset_commit_v4.OffsetCommitRequest
        | _offset_commit_v5.OffsetCommitRequest
        | _offset_commit_v6.OffsetCommitRequest
        | _offset_commit_v7.OffsetCommitRequest
        | _offset_commit_v8.OffsetCommitRequest
        | _offset_commit_v9.OffsetCommitRequest
        | _offset_commit_v10.OffsetCommitRequest
    )  # api key 8
    OffsetFetchRequest: TypeAlias = (
        _offset_fetch_v1.OffsetFetchRequest
        | _offset_fetch_v2.OffsetFetchRequest
        | _offset_fetch_v3.OffsetFetchRequest
        | _offset_fetch_v4.OffsetFetchRequest
        | _offset_fetch_v5.OffsetFetchRequest
        | _offset_fetch_v6.OffsetFetchRequest
        | _offset_fetch_v7.OffsetFetchRequest
        | _offset_fetch_v8.OffsetFetchRequest
        | _offset_fetch_v9.OffsetFetchRequest
        | _offset_fetch_v10.OffsetFetchRequest
    )  # api key 9
    FindCoordinatorRequest: TypeAlias = (
        _find_coordinator_v0.FindCoordinatorRequest
        | _find_coordinator_v1.FindCoordinatorRequest
        | _find_coordinator_v2.FindCoordinatorRequest
        | _find_coordinator_v3.FindCoordinatorRequest
        | _find_coordinator_v4.FindCoordinatorRequest
    )  # api key 10
    JoinGroupRequest: TypeAlias = (
        _join_group_v0.JoinGroupRequest
        | _join_group_v1.JoinGroupRequest
        | _join_group_v2.JoinGroupRequest
        | _join_group_v3.JoinGroupRequest
        | _join_group_v4.JoinGroupRequest
        | _join_group_v5.JoinGroupRequest
        | _join_group_v6.JoinGroupRequest
        | _join_group_v7.JoinGroupRequest
        | _join_group_v8.JoinGroupRequest
        | _join_group_v9.JoinGroupRequest
    )  # api key 11
    HeartbeatRequest: TypeAlias = (
        _heartbeat_v0.HeartbeatRequest
        | _heartbeat_v1.HeartbeatRequest
        | _heartbeat_v2.HeartbeatRequest
        | _heartbeat_v3.HeartbeatRequest
        | _heartbeat_v4.HeartbeatRequest
    )  # api key 12
    LeaveGroupRequest: TypeAlias = (
        _leave_group_v0.LeaveGroupRequest
        | _leave_group_v1.LeaveGroupRequest
        | _leave_group_v2.LeaveGroupRequest
        | _leave_group_v3.LeaveGroupRequest
        | _leave_group_v4.LeaveGroupRequest
        | _leave_group_v5.LeaveGroupRequest
    )  # api key 13
    SyncGroupRequest: TypeAlias = (
        _sync_group_v0.SyncGroupRequest
        | _sync_group_v1.SyncGroupRequest
        | _sync_group_v2.SyncGroupRequest
        | _sync_group_v3.SyncGroupRequest
        | _sync_group_v4.SyncGroupRequest
        | _sync_group_v5.SyncGroupRequest
    )  # api key 14
    DescribeGroupsRequest: TypeAlias = (
        _describe_groups_v0.DescribeGroupsRequest
        | _describe_groups_v1.DescribeGroupsRequest
        | _describe_groups_v2.DescribeGroupsRequest
        | _describe_groups_v3.DescribeGroupsRequest
        | _describe_groups_v4.DescribeGroupsRequest
        | _describe_groups_v5.DescribeGroupsRequest
    )  # api key 15
    ListGroupsRequest: TypeAlias = (
        _list_groups_v0.ListGroupsRequest
        | _list_groups_v1.ListGroupsRequest
        | _list_groups_v2.ListGroupsRequest
        | _list_groups_v3.ListGroupsRequest
        | _list_groups_v4.ListGroupsRequest
        | _list_groups_v5.ListGroupsRequest
    )  # api key 16
    SaslHandshakeRequest: TypeAlias = (
        _sasl_handshake_v0.SaslHandshakeRequest
        | _sasl_handshake_v1.SaslHandshakeRequest
    )  # api key 17
    ApiVersionsRequest: TypeAlias = (
        _api_versions_v0.ApiVersionsRequest
        | _api_versions_v1.ApiVersionsRequest
        | _api_versions_v2.ApiVersionsRequest
        | _api_versions_v3.ApiVersionsRequest
    )  # api key 18
    CreateTopicsRequest: TypeAlias = (
        _create_topics_v2.CreateTopicsRequest
        | _create_topics_v3.CreateTopicsRequest
        | _create_topics_v4.CreateTopicsRequest
        | _create_topics_v5.CreateTopicsRequest
        | _create_topics_v6.CreateTopicsRequest
        | _create_topics_v7.CreateTopicsRequest
    )  # api key 19
    DeleteTopicsRequest: TypeAlias = (
        _delete_topics_v1.DeleteTopicsRequest
        | _delete_topics_v2.DeleteTopicsRequest
        | _delete_topics_v3.DeleteTopicsRequest
        | _delete_topics_v4.DeleteTopicsRequest
        | _delete_topics_v5.DeleteTopicsRequest
        | _delete_topics_v6.DeleteTopicsRequest
    )  # api key 20
    DeleteRecordsRequest: TypeAlias = (
        _delete_records_v0.DeleteRecordsRequest
        | _delete_records_v1.DeleteRecordsRequest
        | _delete_records_v2.DeleteRecordsRequest
    )  # api key 21
    InitProducerIdRequest: TypeAlias = (
        _init_producer_id_v0.InitProducerIdRequest
        | _init_producer_id_v1.InitProducerIdRequest
        | _init_producer_id_v2.InitProducerIdRequest
        | _init_producer_id_v3.InitProducerIdRequest
        | _init_producer_id_v4.InitProducerIdRequest
        | _init_producer_id_v5.InitProducerIdRequest
        | _init_producer_id_v6.InitProducerIdRequest
    )  # api key 22
    AddPartitionsToTxnRequest: TypeAlias = (
        _add_partitions_to_txn_v0.AddPartitionsToTxnRequest
        | _add_partitions_to_txn_v1.AddPartitionsToTxnRequest
        | _add_partitions_to_txn_v2.AddPartitionsToTxnRequest
        | _add_partitions_to_txn_v3.AddPartitionsToTxnRequest
        | _add_partitions_to_txn_v4.AddPartitionsToTxnRequest
    )  # api key 24
    AddOffsetsToTxnRequest: TypeAlias = (
        _add_offsets_to_txn_v0.AddOffsetsToTxnRequest
        | _add_offsets_to_txn_v1.AddOffsetsToTxnRequest
        | _add_offsets_to_txn_v2.AddOffsetsToTxnRequest
        | _add_offsets_to_txn_v3.AddOffsetsToTxnRequest
    )  # api key 25
    EndTxnRequest: TypeAlias = (
        _end_txn_v0.EndTxnRequest
        | _end_txn_v1.EndTxnRequest
        | _end_txn_v2.EndTxnRequest
        | _end_txn_v3.EndTxnRequest
        | _end_txn_v4.EndTxnRequest
        | _end_txn_v5.EndTxnRequest
    )  # api key 26
    WriteTxnMarkersRequest: TypeAlias = (
        _write_txn_markers_v1.WriteTxnMarkersRequest
    )  # api key 27
    TxnOffsetCommitRequest: TypeAlias = (
        _txn_offset_commit_v0.TxnOffsetCommitRequest
        | _txn_offset_commit_v1.TxnOffsetCommitRequest
        | _txn_offset_commit_v2.TxnOffsetCommitRequest
        | _txn_offset_commit_v3.TxnOffsetCommitRequest
        | _txn_offset_commit_v4.TxnOffsetCommitRequest
        | _txn_offset_commit_v5.TxnOffsetCommitRequest
    )  # api key 28
    DescribeAclsRequest: TypeAlias = (
        _describe_acls_v1.DescribeAclsRequest
        | _describe_acls_v2.DescribeAclsRequest
        | _describe_acls_v3.DescribeAclsRequest
    )  # api key 29
    CreateAclsRequest: TypeAlias = (
        _create_acls_v1.CreateAclsRequest
        | _create_acls_v2.CreateAclsRequest
        | _create_acls_v3.CreateAclsRequest
    )  # api key 30
    DeleteAclsRequest: TypeAlias = (
        _delete_acls_v1.DeleteAclsRequest
        | _delete_acls_v2.DeleteAclsRequest
        | _delete_acls_v3.DeleteAclsRequest
    )  # api key 31
    DescribeConfigsRequest: TypeAlias = (
        _describe_configs_v1.DescribeConfigsRequest
        | _describe_configs_v2.DescribeConfigsRequest
        | _describe_configs_v3.DescribeConfigsRequest
        | _describe_configs_v4.DescribeConfigsRequest
    )  # api key 32
    AlterConfigsRequest: TypeAlias = (
        _alter_configs_v0.AlterConfigsRequest
        | _alter_configs_v1.AlterConfigsRequest
        | _alter_configs_v2.AlterConfigsRequest
    )  # api key 33
    DescribeLogDirsRequest: TypeAlias = (
        _describe_log_dirs_v1.DescribeLogDirsRequest
        | _describe_log_dirs_v2.DescribeLogDirsRequest
        | _describe_log_dirs_v3.DescribeLogDirsRequest
        | _describe_log_dirs_v4.DescribeLogDirsRequest
    )  # api key 35
    SaslAuthenticateRequest: TypeAlias = (
        _sasl_authenticate_v0.SaslAuthenticateRequest
        | _sasl_authenticate_v1.SaslAuthenticateRequest
        | _sasl_authenticate_v2.SaslAuthenticateRequest
    )  # api key 36
    CreatePartitionsRequest: TypeAlias = (
        _create_partitions_v0.CreatePartitionsRequest
        | _create_partitions_v1.CreatePartitionsRequest
        | _create_partitions_v2.CreatePartitionsRequest
        | _create_partitions_v3.CreatePartitionsRequest
    )  # api key 37
    DeleteGroupsRequest: TypeAlias = (
        _delete_groups_v0.DeleteGroupsRequest
        | _delete_groups_v1.DeleteGroupsRequest
        | _delete_groups_v2.DeleteGroupsRequest
    )  # api key 42
    IncrementalAlterConfigsRequest: TypeAlias = (
        _incremental_alter_configs_v0.IncrementalAlterConfigsRequest
        | _incremental_alter_configs_v1.IncrementalAlterConfigsRequest
    )  # api key 44
    OffsetDeleteRequest: TypeAlias = (
        _offset_delete_v0.OffsetDeleteRequest
    )  # api key 47
    DescribeClientQuotasRequest: TypeAlias = (
        _describe_client_quotas_v0.DescribeClientQuotasRequest
        | _describe_client_quotas_v1.DescribeClientQuotasRequest
    )  # api key 48
    AlterClientQuotasRequest: TypeAlias = (
        _alter_client_quotas_v0.AlterClientQuotasRequest
        | _alter_client_quotas_v1.AlterClientQuotasRequest
    )  # api key 49
    DescribeUserScramCredentialsRequest: TypeAlias = (
        _describe_user_scram_credentials_v0.DescribeUserScramCredentialsRequest
    )  # api key 50
    AlterUserScramCredentialsRequest: TypeAlias = (
        _alter_user_scram_credentials_v0.AlterUserScramCredentialsRequest
    )  # api key 51
    DescribeClusterRequest: TypeAlias = (
        _describe_cluster_v0.DescribeClusterRequest
        | _describe_cluster_v1.DescribeClusterRequest
    )  # api key 60
    DescribeProducersRequest: TypeAlias = (
        _describe_producers_v0.DescribeProducersRequest
    )  # api key 61
    DescribeTransactionsRequest: TypeAlias = (
        _describe_transactions_v0.DescribeTransactionsRequest
    )  # api key 65
    ListTransactionsRequest: TypeAlias = (
        _list_transactions_v0.ListTransactionsRequest
        | _list_transactions_v1.ListTransactionsRequest
    )  # api key 66
    ConsumerGroupHeartbeatRequest: TypeAlias = (
        _consumer_group_heartbeat_v0.ConsumerGroupHeartbeatRequest
        | _consumer_group_heartbeat_v1.ConsumerGroupHeartbeatRequest
    )  # api key 68
    ConsumerGroupDescribeRequest: TypeAlias = (
        _consumer_group_describe_v0.ConsumerGroupDescribeRequest
        | _consumer_group_describe_v1.ConsumerGroupDescribeRequest
    )  # api key 69
    GetTelemetrySubscriptionsRequest: TypeAlias = (
        _get_telemetry_subscriptions_v0.GetTelemetrySubscriptionsRequest
    )  # api key 71
    PushTelemetryRequest: TypeAlias = (
        _push_telemetry_v0.PushTelemetryRequest
    )  # api key 72
    ListConfigResourcesRequest: TypeAlias = (
        _list_config_resources_v0.ListConfigResourcesRequest
        | _list_config_resources_v1.ListConfigResourcesRequest
    )  # api key 74
    ShareGroupHeartbeatRequest: TypeAlias = (
        _share_group_heartbeat_v1.ShareGroupHeartbeatRequest
    )  # api key 76
    ShareGroupDescribeRequest: TypeAlias = (
        _share_group_describe_v1.ShareGroupDescribeRequest
    )  # api key 77
    ShareFetchRequest: TypeAlias = (
        _share_fetch_v1.ShareFetchRequest
    )  # api key 78
    ShareAcknowledgeRequest: TypeAlias = (
        _share_acknowledge_v1.ShareAcknowledgeRequest
    )  # api key 79
    DescribeShareGroupOffsetsRequest: TypeAlias = (
        _describe_share_group_offsets_v0.DescribeShareGroupOffsetsRequest
        | _describe_share_group_offsets_v1.DescribeShareGroupOffsetsRequest
    )  # api key 90
    AlterShareGroupOffsetsRequest: TypeAlias = (
        _alter_share_group_offsets_v0.AlterShareGroupOffsetsRequest
    )  # api key 91
    DeleteShareGroupOffsetsRequest: TypeAlias = (
        _delete_share_group_offsets_v0.DeleteShareGroupOffsetsRequest
    )  # api key 92
