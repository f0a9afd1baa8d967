"""Client-facing errors, shaped like confluent-kafka's ``KafkaError`` / ``KafkaException``.

A ``KafkaError`` is a value: a code (Kafka's protocol error codes, plus librdkafka's negative
codes for conditions that happen inside the client), a message and three classification flags.
``KafkaException`` carries one as ``args[0]``, as confluent-kafka does, so code written for
confluent-kafka (``exc.args[0].code()``, ``err.fatal()``, ``err.txn_requires_abort()``) works
unchanged. It is the only class named ``KafkaError`` in oncestream: the broker's exceptions that
carry an error code derive from ``oncestream.errors.OnceStreamError`` (see that module for why).

Classification follows Kafka's TransactionManager and KIP-588/KIP-360:

- fatal: the producer can never make progress again and must be closed (fenced by a newer
  instance, not authorized, or an unexpected state);
- txn_requires_abort: the current transaction is doomed, ``abort_transaction()`` recovers;
- retriable: the same call may succeed if repeated (the client already retried internally until
  its timeout).
"""

from __future__ import annotations

import builtins

from kio.schema.errors import ErrorCode

# librdkafka's local (negative) error codes, same numbers as confluent_kafka.KafkaError.
_BAD_MSG = -199
_BAD_COMPRESSION = -198
_FAIL = -196
_TRANSPORT = -195
_MSG_TIMED_OUT = -192
_PARTITION_EOF = -191
_UNKNOWN_PARTITION = -190
_UNKNOWN_TOPIC = -188
_ALL_BROKERS_DOWN = -187
_INVALID_ARG = -186
_TIMED_OUT = -185
_QUEUE_FULL = -184
_PREV_IN_PROGRESS = -177
_STATE = -172
_NOT_IMPLEMENTED = -170
_NO_OFFSET = -168
_UNSUPPORTED_FEATURE = -165
_PURGE_QUEUE = -152
_PURGE_INFLIGHT = -151
_FATAL = -150
_MAX_POLL_EXCEEDED = -147
_NOT_CONFIGURED = -145
_FENCED = -144
_ASSIGNMENT_LOST = -142
_AUTO_OFFSET_RESET = -140

_LOCAL_NAMES = {
    value: name for name, value in globals().items() if name.startswith("_") and isinstance(value, int)
}

# Broker error codes that make a transactional producer unusable (Kafka: ProducerFencedException,
# TransactionalIdAuthorizationFailedException, InvalidProducerEpochException from the
# coordinator, UnsupportedVersion/ForMessageFormat, ClusterAuthorizationFailed).
_FATAL_CODES = frozenset(
    {
        ErrorCode.producer_fenced,
        ErrorCode.transactional_id_authorization_failed,
        ErrorCode.cluster_authorization_failed,
        ErrorCode.invalid_producer_id_mapping,
        ErrorCode.unsupported_for_message_format,
        ErrorCode.unsupported_version,
    }
)

# Local conditions that librdkafka also reports as retriable.
_LOCAL_RETRIABLE = frozenset({_TRANSPORT, _TIMED_OUT, _MSG_TIMED_OUT, _ALL_BROKERS_DOWN, _QUEUE_FULL})


def error_name(code: int) -> str:
    """Upper-case name of a code: ``NOT_COORDINATOR``, ``_MSG_TIMED_OUT``."""
    if code in _LOCAL_NAMES:
        return _LOCAL_NAMES[code]
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"ERR_{code}"


def is_retriable_code(code: int) -> bool:
    """Whether a (broker or local) error code is retriable by Kafka's classification."""
    if code in _LOCAL_RETRIABLE:
        return True
    try:
        return bool(ErrorCode(code).retriable)
    except ValueError:
        return False


class KafkaError:
    """An error code with its message and classification (confluent-kafka's KafkaError API)."""

    __slots__ = ("_code", "_fatal", "_message", "_retriable", "_txn_requires_abort")

    # Class attributes mirror confluent_kafka.KafkaError's named codes for the local ones.
    _MSG_TIMED_OUT = _MSG_TIMED_OUT
    _PARTITION_EOF = _PARTITION_EOF
    _TRANSPORT = _TRANSPORT
    _TIMED_OUT = _TIMED_OUT
    _STATE = _STATE
    _FATAL = _FATAL
    _FENCED = _FENCED
    _QUEUE_FULL = _QUEUE_FULL
    _INVALID_ARG = _INVALID_ARG
    _UNKNOWN_TOPIC = _UNKNOWN_TOPIC
    _UNKNOWN_PARTITION = _UNKNOWN_PARTITION
    _NO_OFFSET = _NO_OFFSET
    _PURGE_QUEUE = _PURGE_QUEUE
    _PURGE_INFLIGHT = _PURGE_INFLIGHT
    _NOT_CONFIGURED = _NOT_CONFIGURED
    _ALL_BROKERS_DOWN = _ALL_BROKERS_DOWN
    _UNSUPPORTED_FEATURE = _UNSUPPORTED_FEATURE
    _AUTO_OFFSET_RESET = _AUTO_OFFSET_RESET
    _ASSIGNMENT_LOST = _ASSIGNMENT_LOST
    _MAX_POLL_EXCEEDED = _MAX_POLL_EXCEEDED
    _BAD_MSG = _BAD_MSG
    _FAIL = _FAIL
    NO_ERROR = 0

    def __init__(
        self,
        code: int,
        message: str | None = None,
        *,
        fatal: bool = False,
        retriable: bool | None = None,
        txn_requires_abort: bool = False,
    ) -> None:
        self._code = int(code)
        self._message = message or error_name(self._code)
        self._fatal = fatal
        self._retriable = is_retriable_code(self._code) if retriable is None else retriable
        self._txn_requires_abort = txn_requires_abort

    def code(self) -> int:
        """The numeric error code."""
        return self._code

    def name(self) -> str:
        """The symbolic name of the code."""
        return error_name(self._code)

    def str(self) -> str:
        """Human-readable description (confluent-kafka spells this ``str()``)."""
        return self._message

    def fatal(self) -> bool:
        """The client instance is unusable; close it and create a new one."""
        return self._fatal

    def retriable(self) -> bool:
        """Repeating the operation may succeed."""
        return self._retriable

    def txn_requires_abort(self) -> bool:
        """The current transaction must be aborted (``abort_transaction()``), then can be retried."""
        return self._txn_requires_abort

    def __str__(self) -> builtins.str:  # builtins: this class has a method named str
        return f"KafkaError{{code={self.name()},val={self._code},str=\"{self._message}\"}}"

    __repr__ = __str__

    def __eq__(self, other: object) -> bool:
        if isinstance(other, KafkaError):
            return self._code == other._code
        if isinstance(other, int):
            return self._code == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._code)


class KafkaException(Exception):
    """Raised by client calls; ``args[0]`` is the ``KafkaError``."""

    def __init__(self, error: KafkaError | int, message: str | None = None) -> None:
        if not isinstance(error, KafkaError):
            error = KafkaError(error, message)
        super().__init__(error)
        self._error = error

    @property
    def error(self) -> KafkaError:
        """The KafkaError this exception carries."""
        return self._error

    def __str__(self) -> str:
        return str(self.args[0])


class QueueFullError(BufferError, KafkaException):
    """``produce()`` could not get buffer space within ``max.block.ms`` (confluent-kafka raises
    BufferError; this is also a KafkaException with code _QUEUE_FULL)."""

    def __init__(self, message: str) -> None:
        KafkaException.__init__(self, KafkaError(_QUEUE_FULL, message, retriable=True))


def broker_error(code: int, message: str | None = None, *, transactional: bool = False,
                 from_coordinator: bool = False) -> KafkaError:
    """Classify a broker error code for a producer (or a plain request when not transactional).

    ``from_coordinator``: the error came from the transaction coordinator, where an
    INVALID_PRODUCER_EPOCH means this instance was fenced (fatal); on a produce response it only
    dooms the current transaction (KIP-588).
    """
    fatal = code in _FATAL_CODES or (from_coordinator and code == ErrorCode.invalid_producer_epoch)
    txn_abort = transactional and not fatal
    text = message or error_name(code)
    return KafkaError(code, text, fatal=fatal, txn_requires_abort=txn_abort,
                      retriable=False if fatal else None)


def local_error(code: int, message: str, *, fatal: bool = False, retriable: bool | None = None,
                txn_requires_abort: bool = False) -> KafkaError:
    """A client-side condition (negative code)."""
    return KafkaError(code, message, fatal=fatal, retriable=retriable,
                      txn_requires_abort=txn_requires_abort)


class BrokerResponseError(Exception):
    """Inside the client: a response carried an error code (converted at the API edge)."""

    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(message or error_name(code))
        self.code = int(code)

    @property
    def retriable(self) -> bool:
        """Kafka's retriable flag for this code."""
        return is_retriable_code(self.code)


class ConnectionLostError(Exception):
    """Inside the client: the connection closed or failed while requests were in flight."""

    code = _TRANSPORT
    retriable = True


class ClientInvariantError(RuntimeError):
    """Inside the client: a rule that keeps records correct (sequence numbers, batch ownership,
    producer identity) was about to be broken. Raised instead of ``assert``, which ``python -O``
    strips: going on would risk duplicated, reordered or misattributed records."""


class RequestTimedOutError(Exception):
    """Inside the client: no response within ``request.timeout.ms``."""

    code = _TIMED_OUT
    retriable = True
