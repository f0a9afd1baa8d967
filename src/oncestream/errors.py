"""Typed exceptions used inside oncestream, each carrying the Kafka error code it maps to.

Inside the sans-io core we raise these; at the protocol edge the broker turns ``exc.code`` into the
error code field of the response. Never raise a bare ``Exception`` for a protocol-level condition.

Why the root is ``OnceStreamError`` and not ``KafkaError``: there is one ``KafkaError`` in
oncestream, the client's error value (``oncestream.client.KafkaError``, defined in
``client/common/errors.py``), because confluent-kafka code reads it under that name (``msg.error()``, ``KafkaException.args[0]``,
``KafkaError._PARTITION_EOF``) and our client is a drop-in for it. These exceptions are a different
thing, raised and caught inside the broker, the log and the coordinators (and by the record
decoders the client shares), so they take the project's name. A user of the client never sees one
of them: the client turns a broker's error code into a ``KafkaError`` value.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode


class OnceStreamError(Exception):
    """Base of every internal error that has a Kafka error code (the ``code`` a response carries)."""

    code: ErrorCode = ErrorCode.unknown_server_error

    def __init__(self, message: str = "", *, code: ErrorCode | None = None) -> None:
        super().__init__(message or self.__class__.__name__)
        if code is not None:
            self.code = code


class CorruptRecordError(OnceStreamError):
    """A batch failed its CRC or structural checks (CORRUPT_MESSAGE)."""

    code = ErrorCode.corrupt_message


class InvalidRecordError(OnceStreamError):
    """A batch is well-formed but violates a rule (INVALID_RECORD)."""

    code = ErrorCode.invalid_record


class UnsupportedMagicError(OnceStreamError):
    """Record batches older than magic 2 are not accepted (UNSUPPORTED_FOR_MESSAGE_FORMAT)."""

    code = ErrorCode.unsupported_for_message_format


class MessageTooLargeError(OnceStreamError):
    """A batch is larger than max.message.bytes (MESSAGE_TOO_LARGE)."""

    code = ErrorCode.message_too_large


class OutOfOrderSequenceError(OnceStreamError):
    """An idempotent batch leaves a gap in the sequence (OUT_OF_ORDER_SEQUENCE_NUMBER)."""

    code = ErrorCode.out_of_order_sequence_number


class InvalidProducerEpochError(OnceStreamError):
    """A batch carries an epoch older than the partition has seen (INVALID_PRODUCER_EPOCH)."""

    code = ErrorCode.invalid_producer_epoch


class UnknownProducerIdError(OnceStreamError):
    """The partition has no state for this producer and the batch does not start at 0 (KIP-360)."""

    code = ErrorCode.unknown_producer_id


class OffsetOutOfRangeError(OnceStreamError):
    """A fetch or delete asked for an offset outside [log start, high watermark]."""

    code = ErrorCode.offset_out_of_range


class InvalidConfigError(OnceStreamError):
    """A topic or broker config value is not acceptable (INVALID_CONFIG)."""

    code = ErrorCode.invalid_config


class StorageError(OnceStreamError):
    """The disk failed us (KAFKA_STORAGE_ERROR)."""

    code = ErrorCode.kafka_storage_error


class LogInvariantError(StorageError):
    """A partition log broke one of its own invariants (offsets, positions, index order): a bug
    or damaged state, answered KAFKA_STORAGE_ERROR rather than risking a corrupt log. Raised
    explicitly instead of ``assert``, which ``python -O`` strips."""


class RemoteStorageError(StorageError):
    """The object store of tiered storage failed (KIP-405's RemoteStorageException): the message
    names the key and the store. Kafka answers UNKNOWN_SERVER_ERROR for it (a remote failure says
    nothing about the local disk), so the code differs from its parent's."""

    code = ErrorCode.unknown_server_error


class RemoteObjectNotFoundError(RemoteStorageError):
    """The object store has no object under the key (S3 404, a missing file)."""


class RemoteAccessDeniedError(RemoteStorageError):
    """The object store refused the credentials or the operation (S3 401/403)."""


# --- group coordinator (classic consumer group protocol) -------------------------------------------


class InvalidGroupIdError(OnceStreamError):
    """The group id is missing or empty where the API requires one (INVALID_GROUP_ID)."""

    code = ErrorCode.invalid_group_id


class CoordinatorNotAvailableError(OnceStreamError):
    """The group is being torn down (Dead); the client should rediscover the coordinator."""

    code = ErrorCode.coordinator_not_available


class NotCoordinatorError(OnceStreamError):
    """This broker does not (or no longer) own the group's __consumer_offsets partition."""

    code = ErrorCode.not_coordinator


class NotLeaderOrFollowerError(OnceStreamError):
    """Cluster mode: this broker does not own the share-partition (another leads its topic-partition)."""

    code = ErrorCode.not_leader_or_follower


class CoordinatorLoadInProgressError(OnceStreamError):
    """The group's __consumer_offsets partition is still being loaded (COORDINATOR_LOAD_IN_PROGRESS)."""

    code = ErrorCode.coordinator_load_in_progress


class IllegalGenerationError(OnceStreamError):
    """The request carries a generation id other than the group's current one (ILLEGAL_GENERATION)."""

    code = ErrorCode.illegal_generation


class UnknownMemberIdError(OnceStreamError):
    """The member id is not (or no longer) a member of the group (UNKNOWN_MEMBER_ID)."""

    code = ErrorCode.unknown_member_id


class RebalanceInProgressError(OnceStreamError):
    """The group is rebalancing; the member must rejoin (REBALANCE_IN_PROGRESS)."""

    code = ErrorCode.rebalance_in_progress


class MemberIdRequiredError(OnceStreamError):
    """KIP-394: the first JoinGroup of a dynamic member gets an id and must rejoin with it."""

    code = ErrorCode.member_id_required


class FencedInstanceIdError(OnceStreamError):
    """KIP-345: another member now owns this group.instance.id (FENCED_INSTANCE_ID)."""

    code = ErrorCode.fenced_instance_id


class InconsistentGroupProtocolError(OnceStreamError):
    """The member's protocol type or protocols do not fit the group's (INCONSISTENT_GROUP_PROTOCOL)."""

    code = ErrorCode.inconsistent_group_protocol


class GroupIdNotFoundError(OnceStreamError):
    """The group does not exist (GROUP_ID_NOT_FOUND)."""

    code = ErrorCode.group_id_not_found


class NonEmptyGroupError(OnceStreamError):
    """The group still has members, so it cannot be deleted (NON_EMPTY_GROUP)."""

    code = ErrorCode.non_empty_group


class UnstableOffsetCommitError(OnceStreamError):
    """A transactional offset commit for the partition is still pending (UNSTABLE_OFFSET_COMMIT)."""

    code = ErrorCode.unstable_offset_commit


class InvalidSessionTimeoutError(OnceStreamError):
    """The session timeout is outside group.min/max.session.timeout.ms (INVALID_SESSION_TIMEOUT)."""

    code = ErrorCode.invalid_session_timeout


class GroupMaxSizeReachedError(OnceStreamError):
    """The group already has group.max.size members (GROUP_MAX_SIZE_REACHED)."""

    code = ErrorCode.group_max_size_reached


class GroupSubscribedToTopicError(OnceStreamError):
    """OffsetDelete of a topic the group is still subscribed to (GROUP_SUBSCRIBED_TO_TOPIC)."""

    code = ErrorCode.group_subscribed_to_topic


class FencedMemberEpochError(OnceStreamError):
    """KIP-848: the member's epoch is not one the coordinator accepts; it must rejoin with
    epoch 0 after giving up its partitions (FENCED_MEMBER_EPOCH)."""

    code = ErrorCode.fenced_member_epoch


class StaleMemberEpochError(OnceStreamError):
    """KIP-848: an offset request carries a member epoch that is not the member's current one
    (STALE_MEMBER_EPOCH)."""

    code = ErrorCode.stale_member_epoch


class UnsupportedAssignorError(OnceStreamError):
    """KIP-848: the member asked for a server assignor the broker does not have (UNSUPPORTED_ASSIGNOR)."""

    code = ErrorCode.unsupported_assignor


class UnreleasedInstanceIdError(OnceStreamError):
    """KIP-848: a static member joins with an instance id another live member still holds
    (UNRELEASED_INSTANCE_ID)."""

    code = ErrorCode.unreleased_instance_id


class OffsetMetadataTooLargeError(OnceStreamError):
    """The committed metadata string is longer than offset.metadata.max.bytes."""

    code = ErrorCode.offset_metadata_too_large


# --- topics and partitions (log manager) ---------------------------------------------------------


class UnknownTopicOrPartitionError(OnceStreamError):
    """The topic or partition does not exist on this broker (UNKNOWN_TOPIC_OR_PARTITION)."""

    code = ErrorCode.unknown_topic_or_partition


class TopicAlreadyExistsError(OnceStreamError):
    """CreateTopics named a topic that already exists (TOPIC_ALREADY_EXISTS)."""

    code = ErrorCode.topic_already_exists


class InvalidTopicError(OnceStreamError):
    """A topic name is illegal or collides with an existing one (INVALID_TOPIC_EXCEPTION)."""

    code = ErrorCode.invalid_topic_exception


class InvalidPartitionsError(OnceStreamError):
    """A partition count is not acceptable (INVALID_PARTITIONS)."""

    code = ErrorCode.invalid_partitions


# --- transaction coordinator (KIP-98, KIP-360, KIP-890, KIP-939) ---------------------------------


class InvalidRequestError(OnceStreamError):
    """The request is malformed in a way the schema cannot express (INVALID_REQUEST)."""

    code = ErrorCode.invalid_request


class ConcurrentTransactionsError(OnceStreamError):
    """A state change of this transactional id is in flight; retry (CONCURRENT_TRANSACTIONS)."""

    code = ErrorCode.concurrent_transactions


class InvalidTxnStateError(OnceStreamError):
    """The request does not fit the transaction's current state (INVALID_TXN_STATE)."""

    code = ErrorCode.invalid_txn_state


class ProducerFencedError(OnceStreamError):
    """A newer producer (higher epoch) owns this transactional id (PRODUCER_FENCED)."""

    code = ErrorCode.producer_fenced


class InvalidProducerIdMappingError(OnceStreamError):
    """The producer id is not the transactional id's (INVALID_PRODUCER_ID_MAPPING)."""

    code = ErrorCode.invalid_producer_id_mapping


class InvalidTransactionTimeoutError(OnceStreamError):
    """transaction.timeout.ms not in (0, transaction.max.timeout.ms] (INVALID_TRANSACTION_TIMEOUT)."""

    code = ErrorCode.invalid_transaction_timeout


class TransactionalIdNotFoundError(OnceStreamError):
    """DescribeTransactions named an unknown (or expired) transactional id."""

    code = ErrorCode.transactional_id_not_found


class TransactionalIdAuthorizationFailedError(OnceStreamError):
    """Also KIP-939's answer to enable2Pc when transaction.two.phase.commit.enable is false."""

    code = ErrorCode.transactional_id_authorization_failed


class InvalidRegularExpressionError(OnceStreamError):
    """A ListTransactions transactional id pattern does not compile (INVALID_REGULAR_EXPRESSION)."""

    code = ErrorCode.invalid_regular_expression


# --- invariants -----------------------------------------------------------------------------------


class CoordinatorInvariantError(OnceStreamError):
    """A coordinator invariant that guards data does not hold: a bug, never a client's mistake.

    Raised instead of ``assert`` (which ``python -O`` strips) wherever going on would persist or
    serve wrong state. Coordinators let it propagate rather than turn it into an ordinary answer;
    at the edge it is UNKNOWN_SERVER_ERROR.
    """

    code = ErrorCode.unknown_server_error


# --- authorization ----------------------------------------------------------------------------------


class TopicAuthorizationFailedError(OnceStreamError):
    """The connection's principal lacks the operation on the topic (an ACL decision)."""

    code = ErrorCode.topic_authorization_failed


# --- tiered storage: the log's side (tier-log) ------------------------------------------------------


class OffsetMovedToTieredStorageError(OnceStreamError):
    """A read asked for an offset the log still serves but no longer holds on local disk
    (log start <= offset < local log start): the remote reader must serve it. Internal, never on
    the wire: the fetch path catches it (Kafka's OffsetMovedToTieredStorageException). Should
    it ever leak it answers UNKNOWN_SERVER_ERROR (the inherited code), which a consumer retries,
    never OFFSET_OUT_OF_RANGE, which would make it reset its position."""

    def __init__(self, offset: int, local_log_start_offset: int) -> None:
        super().__init__(
            f"offset {offset} is below the local log start {local_log_start_offset}: it is in tiered storage"
        )
        self.offset = offset
        self.local_log_start_offset = local_log_start_offset
