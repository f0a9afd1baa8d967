"""The producer's sender against a scripted broker (no sockets): sequence assignment and wrap,
pipelining limits, in-order retries with unchanged sequences, and KIP-360 recovery (epoch bump
with the current producer id/epoch, then re-sequencing from 0)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from kio.schema.errors import ErrorCode

from oncestream.client.common.config import resolve
from oncestream.client.producer.accumulator import RecordAccumulator
from oncestream.client.producer.delivery import DeliveryReports
from oncestream.client.producer.sender import Sender
from oncestream.protocol.schemas import request_module

T = "t"


class FakeConnection:
    """Records produce requests; the test answers them through their futures."""

    def __init__(self) -> None:
        self.requests: list[tuple[asyncio.Future, list[Any]]] = []

    @property
    def in_flight(self) -> int:
        return sum(1 for f, _ in self.requests if not f.done())

    def version_for(self, api_key: int, max_version: int | None = None, min_version: int = 0) -> int:
        return 9

    def send_frame(self, api_key: int, version: int, parts: list[bytes], *, expect_response: bool = True):
        future = asyncio.get_running_loop().create_future()
        self.requests.append((future, parts))
        return future


class FakeCluster:
    """One broker (node 0) leading every partition; InitProducerId answers from a script."""

    def __init__(self) -> None:
        self.conn = FakeConnection()
        self.init_calls: list[Any] = []
        self.next_producer_id = 1000

    def leader_for(self, topic: str, partition: int) -> int:
        return 0

    def ready_connection(self, node: int) -> FakeConnection:
        return self.conn

    async def refresh(self, topics: Any = None) -> None:
        return None

    async def send(self, node: Any, api_key: int, make: Any, **kwargs: Any) -> Any:
        assert api_key == 22
        self.init_calls.append(make(request_module(22, 4), 4))
        self.next_producer_id += 1
        return SimpleNamespace(error_code=0, producer_id=self.next_producer_id, producer_epoch=0)


def _conf(**extra: Any) -> dict[str, Any]:
    conf = {"bootstrap.servers": "fake:9092", "linger.ms": 0, "retry.backoff.ms": 1,
            "retry.backoff.max.ms": 1, "batch.num.messages": 1}
    conf.update(extra)
    return resolve(conf, "producer")


def _batches_of(request_parts: list[Any], sender_log: list[Any], index: int) -> list[Any]:
    return sender_log[index]


class Harness:
    """Sender + accumulator + fake broker in one event loop."""

    def __init__(self, **conf: Any) -> None:
        self.cluster = FakeCluster()
        c = _conf(**conf)
        self.acc = RecordAccumulator(batch_size=c["batch.size"], batch_num_messages=c["batch.num.messages"],
                                     linger_ms=c["linger.ms"], buffer_memory=c["buffer.memory"])
        self.reports = DeliveryReports()
        self.sender = Sender(c, self.cluster, self.acc, self.reports, None)  # type: ignore[arg-type]
        self.sent: list[list[Any]] = []
        original = self.sender._send

        def spy(node: int, batches: list[Any], now: int) -> None:
            self.sent.append(list(batches))
            original(node, batches, now)

        self.sender._send = spy  # type: ignore[method-assign]
        self.results: list[tuple[Any, Any]] = []

    def produce(self, n: int, partition: int = 0) -> None:
        for i in range(n):
            self.acc.append(T, partition, 1, 1_700_000_000_000, None, b"v%d" % i,
                            None, (lambda err, msg: self.results.append((err, msg)), None), 5.0)
        self.sender.wakeup()

    async def settle(self) -> None:
        for _ in range(50):
            await asyncio.sleep(0)

    def answer(self, request_index: int, codes: dict[int, int], base_offset: int = 0) -> None:
        """Answer one produce request: partition -> error code (base offsets count up)."""
        future, _ = self.cluster.conn.requests[request_index]
        batches = self.sent[request_index]
        parts = [SimpleNamespace(index=b.partition, error_code=codes.get(b.partition, 0),
                                 base_offset=base_offset, log_append_time=None, error_message=None)
                 for b in batches]
        future.set_result(SimpleNamespace(responses=[SimpleNamespace(name=T, partition_responses=parts)]))

    def served(self) -> list[tuple[Any, Any]]:
        self.reports.serve(0)
        return self.results


def _run(coro: Any) -> None:
    asyncio.run(asyncio.wait_for(coro, 30))


def test_idempotent_producer_gets_an_id_then_numbers_batches_per_partition() -> None:
    async def scenario() -> None:
        h = Harness()
        h.sender.start()
        h.produce(3, partition=0)
        h.produce(2, partition=1)
        await h.settle()
        assert len(h.cluster.init_calls) == 1
        assert h.cluster.init_calls[0].producer_id == -1
        seqs = [(b.partition, b.base_sequence, b.producer_id) for req in h.sent for b in req]
        by_partition = {p: [s for q, s, _ in seqs if q == p] for p in (0, 1)}
        assert by_partition == {0: [0, 1, 2], 1: [0, 1]}
        assert {pid for _, _, pid in seqs} == {1001}
        await h.sender.close()

    _run(scenario())


def test_at_most_five_requests_in_flight_per_connection() -> None:
    async def scenario() -> None:
        h = Harness()
        h.sender.start()
        h.produce(8)
        await h.settle()
        assert len(h.sent) == 5  # the sixth waits for a response
        h.answer(0, {})
        await h.settle()
        assert len(h.sent) == 6
        await h.sender.close()

    _run(scenario())


def test_sequences_wrap_at_int32_max() -> None:
    async def scenario() -> None:
        h = Harness()
        h.sender.start()
        h.produce(1)
        await h.settle()
        h.answer(0, {})
        await h.settle()
        state = h.sender._parts[(T, 0)]
        state.next_sequence = 2**31 - 1
        state.last_acked = 2**31 - 2
        h.produce(2)
        await h.settle()
        assert [b.base_sequence for b in h.sent[1] + h.sent[2]] == [2**31 - 1, 0]
        await h.sender.close()

    _run(scenario())


def test_retries_resend_in_order_with_the_same_sequences() -> None:
    """Batch 0 fails with a retriable error and batches 1, 2 behind it get OUT_OF_ORDER: all
    three go out again, in sequence order, with unchanged sequences, only after all returned."""
    async def scenario() -> None:
        h = Harness()
        h.sender.start()
        h.produce(3)
        await h.settle()
        assert [b.base_sequence for req in h.sent for b in req] == [0, 1, 2]
        h.answer(0, {0: int(ErrorCode.not_leader_or_follower)})
        await h.settle()
        assert len(h.sent) == 3  # muted until every in-flight batch of the partition returned
        h.answer(1, {0: int(ErrorCode.out_of_order_sequence_number)})
        h.answer(2, {0: int(ErrorCode.out_of_order_sequence_number)})
        await h.settle()
        await asyncio.sleep(0.01)
        await h.settle()
        resent = [b.base_sequence for req in h.sent[3:] for b in req]
        assert resent == [0, 1, 2]
        assert len(h.cluster.init_calls) == 1  # no epoch bump for a retried predecessor
        for i in range(3, 6):
            h.answer(i, {}, base_offset=i - 3)
        await h.settle()
        results = h.served()
        assert [err for err, _ in results] == [None, None, None]
        assert [msg.offset() for _, msg in results] == [0, 1, 2]
        await h.sender.close()

    _run(scenario())


def test_unknown_producer_id_bumps_epoch_and_resequences_from_zero() -> None:
    """KIP-360: UNKNOWN_PRODUCER_ID for the first unacknowledged batch -> InitProducerId with the
    current producer id and epoch, then the batch goes out again under the new identity with
    sequence 0 (the idempotent producer is not failed)."""
    async def scenario() -> None:
        h = Harness()
        h.sender.start()
        h.produce(1)
        await h.settle()
        h.answer(0, {})
        await h.settle()
        h.produce(2)
        await h.settle()
        assert [b.base_sequence for b in h.sent[1] + h.sent[2]] == [1, 2]
        h.answer(1, {0: int(ErrorCode.unknown_producer_id)})
        h.answer(2, {0: int(ErrorCode.out_of_order_sequence_number)})
        await h.settle()
        await asyncio.sleep(0.01)
        await h.settle()
        assert len(h.cluster.init_calls) == 2
        bump = h.cluster.init_calls[1]
        assert (bump.producer_id, bump.producer_epoch) == (1001, 0)
        resent = [(b.producer_id, b.base_sequence) for req in h.sent[3:] for b in req]
        assert resent == [(1002, 0), (1002, 1)]
        await h.sender.close()

    _run(scenario())


def test_non_retriable_error_fails_the_batch_and_resyncs_sequences() -> None:
    """MESSAGE_TOO_LARGE fails that batch (delivery error); the gap it leaves in the sequence is
    closed by an epoch bump before later batches are sent again."""
    async def scenario() -> None:
        h = Harness()
        h.sender.start()
        h.produce(2)
        await h.settle()
        h.answer(0, {0: int(ErrorCode.message_too_large)})
        h.answer(1, {0: int(ErrorCode.out_of_order_sequence_number)})
        await h.settle()
        await asyncio.sleep(0.01)
        await h.settle()
        assert len(h.cluster.init_calls) == 2
        assert [(b.producer_id, b.base_sequence) for req in h.sent[2:] for b in req] == [(1002, 0)]
        h.answer(2, {})
        await h.settle()
        errors = [err for err, _ in h.served()]
        assert errors[0] is not None
        assert errors[0].code() == int(ErrorCode.message_too_large)
        assert errors[1] is None
        await h.sender.close()

    _run(scenario())


def test_lost_connection_retries_everything_in_flight() -> None:
    async def scenario() -> None:
        from oncestream.client.common.errors import ConnectionLostError

        h = Harness()
        h.sender.start()
        h.produce(2)
        await h.settle()
        for future, _ in h.cluster.conn.requests:
            future.set_exception(ConnectionLostError("broker died"))
        await h.settle()
        await asyncio.sleep(0.01)
        await h.settle()
        assert [b.base_sequence for req in h.sent[2:] for b in req] == [0, 1]
        assert len(h.cluster.init_calls) == 1
        await h.sender.close()

    _run(scenario())


class InjectedCrash(BaseException):
    """Escapes the sender's per-iteration ``except Exception``: the task itself dies."""


def test_a_crashed_sender_task_fails_queued_messages_with_a_fatal_error_and_close_returns() -> None:
    """A sender task that dies is not silently dropped: it is logged with its traceback, becomes
    the producer's fatal error, and every queued message's delivery callback gets that error."""

    async def scenario() -> None:
        h = Harness(**{"enable.idempotence": False})
        fatal: list[Any] = []
        h.sender.on_fatal.append(fatal.append)

        def crash(topic: str, partition: int) -> int:
            raise InjectedCrash("injected: the cluster view broke")

        h.cluster.leader_for = crash  # type: ignore[method-assign]
        h.sender.start()
        h.produce(2)
        await h.settle()
        assert h.sender.fatal_error is not None
        assert h.sender.fatal_error.fatal()
        assert "sender task crashed" in h.sender.fatal_error.str()
        assert "InjectedCrash" in h.sender.fatal_error.str()
        assert fatal == [h.sender.fatal_error]
        served = h.served()
        assert len(served) == 2
        assert all(err is h.sender.fatal_error for err, _ in served)
        await h.sender.close()  # the crash was reported already: close neither hangs nor raises

    _run(scenario())
