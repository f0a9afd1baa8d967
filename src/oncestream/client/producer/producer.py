"""``Producer``: confluent-kafka's producer API, with KIP-939 ``prepare_transaction`` /
``complete_transaction`` on top.

Threads: the caller's thread encodes each record straight into its partition's open batch
(accumulator.py) and runs delivery callbacks in ``poll``/``flush``; one background thread runs
the asyncio loop with the sender (sender.py), the metadata/connection pool (cluster.py) and the
transaction coordinator conversations (transactions.py). ``produce`` wakes the loop only when a
batch becomes sendable or needs a linger timer, not per record.
"""

from __future__ import annotations

import concurrent.futures
import random
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from time import time as _time
from typing import Any

from kio.schema.errors import ErrorCode

from oncestream.client.common.cluster import Cluster
from oncestream.client.common.config import resolve
from oncestream.client.common.errors import (
    _INVALID_ARG,
    _NOT_CONFIGURED,
    _STATE,
    _TIMED_OUT,
    _UNKNOWN_PARTITION,
    _UNKNOWN_TOPIC,
    BrokerResponseError,
    ConnectionLostError,
    KafkaError,
    KafkaException,
    QueueFullError,
    RequestTimedOutError,
)
from oncestream.client.common.io_thread import IoThread
from oncestream.client.common.message import ConsumerGroupMetadata, TopicPartition
from oncestream.client.producer.accumulator import BufferExhaustedError, RecordAccumulator, RecordTooLargeError
from oncestream.client.producer.delivery import DeliveryReports
from oncestream.client.producer.partitioner import key_partitioner, null_key_partition
from oncestream.client.producer.prepared_txn import PreparedTxnState
from oncestream.client.producer.record_batch_builder import encode_headers
from oncestream.client.producer.sender import Sender
from oncestream.client.producer.transactions import TransactionManager
from oncestream.client.producer.txn_state import TxnState

_S = TxnState
HeadersArg = list[tuple[str, Any]] | Mapping[str, Any] | None


def _to_bytes(value: Any, what: str) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{what} must be bytes, str or None, not {type(value).__name__}")


def _normalize_headers(headers: HeadersArg) -> list[tuple[str, bytes | None]]:
    items = headers.items() if isinstance(headers, Mapping) else headers
    out = []
    for hkey, hvalue in items:  # type: ignore[union-attr]
        out.append((str(hkey), _to_bytes(hvalue, "header value")))
    return out


class Producer:
    """A Kafka producer configured with a dict of Kafka property names."""

    def __init__(self, conf: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        merged = dict(conf or {})
        merged.update(kwargs)
        self._conf = c = resolve(merged, "producer")
        transactional = c["transactional.id"] is not None
        if transactional and "enable.idempotence" in merged and not c["enable.idempotence"]:
            raise KafkaException(KafkaError(_INVALID_ARG, "transactional.id requires enable.idempotence=true"))
        if c["transaction.two.phase.commit.enable"] and not transactional:
            raise KafkaException(KafkaError(
                _INVALID_ARG, "transaction.two.phase.commit.enable requires transactional.id"))
        if c["enable.idempotence"] or transactional:
            if "acks" in merged and c["acks"] != -1:
                raise KafkaException(KafkaError(_INVALID_ARG, "idempotence requires acks=all"))
        try:
            self._key_partition = key_partitioner(c["partitioner"])
        except ValueError as exc:
            raise KafkaException(KafkaError(_INVALID_ARG, str(exc))) from None
        self._partitioner_name = c["partitioner"]
        self._null_key_sticky = self._key_partition is not None and null_key_partition(
            self._partitioner_name, self._key_partition, 1) is None
        # Set when the producer can no longer accept records (closed, or a fatal error).
        self._unusable: KafkaError | None = None
        self._max_block_s = c["max.block.ms"] / 1000
        self._default_callback: Callable[..., Any] | None = c["on_delivery"]
        self._error_cb = c["error_cb"]
        self._reported_fatal: KafkaError | None = None
        self._cluster = Cluster.from_config(c)
        self._acc = RecordAccumulator(
            batch_size=c["batch.size"],
            batch_num_messages=c["batch.num.messages"],
            linger_ms=c["linger.ms"],
            buffer_memory=c["buffer.memory"],
            max_request_size=c["max.request.size"],
        )
        self._reports = DeliveryReports()
        self._txn = TransactionManager(c, self._cluster) if transactional else None
        self._sender = Sender(c, self._cluster, self._acc, self._reports, self._txn)
        if self._txn is not None:
            self._txn.sender = self._sender
        self._sender.on_fatal.append(self._on_fatal)
        self._partition_counts: dict[str, int] = {}
        self._cluster.on_metadata.append(self._on_metadata)
        self._op_lock = threading.Lock()
        self._closed = False
        self._io = IoThread("oncestream-producer")
        self._io.run(self._start(), 10)

    async def _start(self) -> None:
        self._cluster.start()
        self._sender.start()

    def _on_fatal(self, error: KafkaError) -> None:
        self._unusable = error

    def _on_metadata(self) -> None:
        self._partition_counts = {
            name: len(info.leaders)
            for name, info in self._cluster.topics.items()
            if info.error == 0 and info.leaders
        }

    # --- producing ----------------------------------------------------------------------------

    def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = -1,
        on_delivery: Callable[..., Any] | None = None,
        timestamp: int = 0,
        headers: HeadersArg = None,
        callback: Callable[..., Any] | None = None,
        *,
        exact_timestamp: bool = False,
    ) -> None:
        """Queue one record. Blocks up to ``max.block.ms`` for buffer space (then raises
        QueueFullError, a BufferError) or for the topic's metadata on first use.

        ``timestamp`` is epoch ms; 0 means now, as in confluent-kafka. ``exact_timestamp=True``
        writes ``timestamp`` as given, 0 included (Java's ``ProducerRecord`` timestamp: a
        record at the epoch, as Kafka Streams' and ksqlDB's tests write them)."""
        txn = self._txn
        if txn is not None and txn.sm.state is not _S.IN_TRANSACTION:
            txn.sm.require(_S.IN_TRANSACTION, action="produce")
        if self._unusable is not None:
            raise KafkaException(self._unusable)
        if value is not None and value.__class__ is not bytes:
            value = _to_bytes(value, "value")
        if key is not None and key.__class__ is not bytes:
            key = _to_bytes(key, "key")
        count = self._partition_counts.get(topic)
        if count is None:
            count = self._await_topic(topic)
        if partition is None or partition < 0:
            if key is not None:
                key_partition = self._key_partition
                partition = key_partition(key, count) if key_partition is not None else random.randrange(count)
            else:
                partition = -1 if self._null_key_sticky else self._null_key_partition(count)
        elif partition >= count:
            raise KafkaException(KafkaError(_UNKNOWN_PARTITION, f"{topic} has no partition {partition}"))
        headers_list = None
        headers_encoded = None
        if headers:
            headers_list = _normalize_headers(headers)
            headers_encoded = encode_headers(headers_list)
        cb = on_delivery or callback or self._default_callback
        try:
            partition, wake = self._acc.append(
                topic, partition, count, timestamp if timestamp or exact_timestamp else int(_time() * 1000), key, value,
                headers_encoded, (cb, headers_list) if cb is not None else None, self._max_block_s,
            )
        except BufferExhaustedError as exc:
            raise QueueFullError(str(exc)) from None
        except RecordTooLargeError as exc:
            raise KafkaException(KafkaError(int(ErrorCode.message_too_large), str(exc))) from None
        if txn is not None and (topic, partition) not in txn.added:
            wake = txn.note_partition((topic, partition)) or wake
        if wake:
            self._io.call_soon(self._sender.wakeup)

    def _null_key_partition(self, count: int) -> int:
        """-1 (sticky, decided by the accumulator) for the ``*_random`` partitioners; the hash of
        the empty key for murmur2/consistent/fnv1a, random for ``random``."""
        if self._key_partition is None:
            return random.randrange(count)
        fixed = null_key_partition(self._partitioner_name, self._key_partition, count)
        return -1 if fixed is None else fixed

    def _await_topic(self, topic: str) -> int:
        """Block until the topic's partition count is known (up to max.block.ms)."""
        deadline = time.monotonic() + self._max_block_s
        last_error = 0
        while True:
            try:
                self._io.run(self._cluster.refresh([topic]), max(0.1, deadline - time.monotonic()))
            except (TimeoutError, ConnectionLostError, RequestTimedOutError, BrokerResponseError):
                pass
            count = self._partition_counts.get(topic)
            if count is not None:
                return count
            info = self._cluster.topics.get(topic)
            if info is not None:
                last_error = info.error
            if time.monotonic() >= deadline:
                raise KafkaException(KafkaError(
                    _UNKNOWN_TOPIC, f"topic {topic!r} not available within max.block.ms "
                    f"(last error code {last_error})"))
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))

    def poll(self, timeout: float | None = None) -> int:
        """Run delivery callbacks of finished records; wait up to ``timeout`` seconds for one
        (None or negative: wait indefinitely). Returns the number of callbacks run."""
        self._report_fatal()
        if timeout is not None and timeout < 0:
            timeout = None
        return self._reports.serve(timeout)

    def flush(self, timeout: float | None = None) -> int:
        """Send everything queued and wait for the acknowledgements (running callbacks);
        returns the number of records still outstanding (0 when all are done)."""
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        self._acc.begin_flush()
        self._io.call_soon(self._sender.wakeup)
        try:
            while True:
                self._reports.serve(0)
                if self._acc.all_done():
                    self._reports.serve(0)
                    return 0
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return self._acc.outstanding_records()
                with self._reports.cond:
                    if not self._acc.all_done() and not self._reports.pending():
                        self._reports.cond.wait(0.1 if remaining is None else min(remaining, 0.1))
        finally:
            self._acc.end_flush()

    def __len__(self) -> int:
        return self._acc.outstanding_records() + self._reports.pending_records()

    def _report_fatal(self) -> None:
        fatal = self._sender.fatal_error or (
            self._txn.sm.last_error if self._txn is not None and self._txn.sm.state is _S.FATAL_ERROR else None
        )
        if fatal is not None and fatal is not self._reported_fatal:
            self._reported_fatal = fatal
            if self._error_cb is not None:
                self._error_cb(fatal)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> dict[str, int]:
        """Topic name -> partition count, from a fresh Metadata request."""
        timeout_s = None if timeout is None or timeout < 0 else timeout
        if topic is None:
            self._io.run(self._cluster.refresh(all_topics=True), timeout_s)
        else:
            self._io.run(self._cluster.refresh([topic]), timeout_s)
        return dict(self._partition_counts)

    def close(self, timeout: float | None = None) -> int:
        """Flush (up to ``timeout``), then stop the background thread. Returns records left."""
        if self._closed:
            return 0
        left = self.flush(timeout)
        self._closed = True
        self._unusable = KafkaError(_STATE, "producer is closed")
        self._acc.close()
        self._io.shut_down(self._shutdown())
        return left

    async def _shutdown(self) -> None:
        await self._sender.close()
        await self._cluster.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- transactions -------------------------------------------------------------------------

    def _require_txn(self) -> TransactionManager:
        if self._txn is None:
            raise KafkaException(KafkaError(_NOT_CONFIGURED, "transactional.id is not configured"))
        return self._txn

    def _timeout_s(self, timeout: float | None) -> float:
        return self._max_block_s if timeout is None or timeout < 0 else timeout

    def _run_txn(self, coro: Coroutine[Any, Any, Any], timeout_s: float, what: str) -> Any:
        txn = self._require_txn()
        future = self._io.submit(coro)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise KafkaException(KafkaError(
                _TIMED_OUT, f"{what} did not complete within {timeout_s:.3f} s; call it again to retry",
                retriable=True)) from None
        except KafkaException as exc:
            error = exc.args[0]
            if error.fatal() or error.txn_requires_abort():
                txn.sm.fail(error)
            raise

    def init_transactions(self, timeout: float | None = None, keep_prepared_txn: bool = False) -> None:
        """Register the transactional.id with its coordinator (InitProducerId), fencing older
        instances. ``keep_prepared_txn`` (KIP-939): keep a prepared two-phase-commit transaction
        open instead of aborting it; the producer is then in the prepared state and
        ``complete_transaction`` decides its fate."""
        txn = self._require_txn()
        with self._op_lock:
            if txn.sm.state is not _S.INITIALIZING:
                txn.sm.transition(_S.INITIALIZING)
            self._run_txn(txn.init(bool(keep_prepared_txn)), self._timeout_s(timeout), "init_transactions")

    def begin_transaction(self) -> None:
        """Start a transaction (local: the coordinator hears of it with the first partition)."""
        txn = self._require_txn()
        if self._sender.fatal_error is not None:
            raise KafkaException(self._sender.fatal_error)
        txn.begin()

    def send_offsets_to_transaction(
        self,
        positions: list[TopicPartition],
        group_metadata: ConsumerGroupMetadata,
        timeout: float | None = None,
    ) -> None:
        """Commit consumer offsets (the next offsets to read) as part of the transaction
        (AddOffsetsToTxn + TxnOffsetCommit with the group's generation and member id, KIP-447)."""
        txn = self._require_txn()
        if group_metadata is None:
            raise KafkaException(KafkaError(_INVALID_ARG, "group_metadata is required"))
        for tp in positions:
            if tp.offset is None or tp.offset < 0:
                raise KafkaException(KafkaError(_INVALID_ARG, f"invalid offset in {tp}"))
        with self._op_lock:
            txn.sm.require(_S.IN_TRANSACTION, action="send_offsets_to_transaction")
            self._run_txn(txn.send_offsets(list(positions), group_metadata), self._timeout_s(timeout),
                          "send_offsets_to_transaction")

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Flush, then commit (EndTxn). A timeout is retriable: call again to resume."""
        txn = self._require_txn()
        timeout_s = self._timeout_s(timeout)
        deadline = time.monotonic() + timeout_s
        with self._op_lock:
            if txn.sm.state is not _S.COMMITTING_TRANSACTION:
                txn.sm.require(_S.IN_TRANSACTION, _S.PREPARED_TRANSACTION, action="commit_transaction")
                txn.sm.transition(_S.COMMITTING_TRANSACTION)
            left = self.flush(timeout_s)
            if left:
                raise KafkaException(KafkaError(
                    _TIMED_OUT, f"commit_transaction: {left} records still unacknowledged",
                    retriable=True))
            if txn.sm.state is not _S.COMMITTING_TRANSACTION:
                raise KafkaException(txn.sm.last_error or KafkaError(_STATE, "transaction failed"))
            self._run_txn(txn.end(True), max(0.0, deadline - time.monotonic()), "commit_transaction")

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Drop unsent records, wait for in-flight ones, abort (EndTxn). Retriable on timeout."""
        txn = self._require_txn()
        with self._op_lock:
            if txn.sm.state is not _S.ABORTING_TRANSACTION:
                txn.sm.transition(_S.ABORTING_TRANSACTION)
            self._run_txn(txn.end(False), self._timeout_s(timeout), "abort_transaction")
        self._reports.serve(0)

    def prepare_transaction(self, timeout: float | None = None) -> PreparedTxnState:
        """KIP-939 phase one: flush every record of the transaction and return its
        PreparedTxnState. Afterwards only commit_transaction, abort_transaction or
        complete_transaction are allowed; produce raises."""
        txn = self._require_txn()
        if not txn.two_phase_commit:
            raise KafkaException(KafkaError(
                _STATE, "prepare_transaction() requires transaction.two.phase.commit.enable=true"))
        with self._op_lock:
            txn.sm.require(_S.IN_TRANSACTION, action="prepare_transaction")
            left = self.flush(self._timeout_s(timeout))
            if left:
                raise KafkaException(KafkaError(
                    _TIMED_OUT, f"prepare_transaction: {left} records still unacknowledged",
                    retriable=True))
            self._io.run(txn.wait_add_partitions(), self._timeout_s(timeout))
            txn.sm.require(_S.IN_TRANSACTION, action="prepare_transaction")
            identity = self._sender.identity
            state = PreparedTxnState(identity.producer_id, identity.epoch)
            txn.sm.transition(_S.PREPARED_TRANSACTION)
            txn.prepared_state = state
            return state

    def complete_transaction(self, prepared_txn_state: PreparedTxnState | str | None,
                             timeout: float | None = None) -> bool:
        """KIP-939 phase two after a restart (or after prepare_transaction): commit when
        ``prepared_txn_state`` is the transaction this producer holds prepared, abort otherwise.
        Returns True if it committed."""
        txn = self._require_txn()
        txn.sm.require(_S.PREPARED_TRANSACTION, action="complete_transaction (no prepared transaction)")
        if not isinstance(prepared_txn_state, PreparedTxnState):
            prepared_txn_state = PreparedTxnState.from_string(prepared_txn_state)
        if txn.prepared_state is not None and prepared_txn_state == txn.prepared_state:
            self.commit_transaction(timeout)
            return True
        self.abort_transaction(timeout)
        return False

    def prepared_transaction_state(self) -> PreparedTxnState:
        """The prepared transaction this producer holds (empty state if none)."""
        txn = self._require_txn()
        if txn.sm.state is _S.PREPARED_TRANSACTION and txn.prepared_state is not None:
            return txn.prepared_state
        return PreparedTxnState()

    def transaction_state(self) -> str:
        """Name of the transactional state (for diagnostics)."""
        return self._require_txn().sm.state.value
