"""ProducePipeline: a connection's pipelined Produce requests answered in arrival order."""

from __future__ import annotations

import asyncio

import pytest

from oncestream.broker.produce_pipelining import PipelinedResult, ProducePipeline, current_produce_turn


def _result(tag: bytes) -> PipelinedResult:
    return PipelinedResult(tag, None, 0.0, None)


class _Recorder:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.released: list[int] = []
        self.idle_calls = 0

    async def write(self, result: PipelinedResult) -> None:
        assert isinstance(result.response, bytes)
        self.written.append(result.response)

    def pipeline(self, max_in_flight: int = 5) -> ProducePipeline:
        return ProducePipeline(self.write, self.released.append, max_in_flight=max_in_flight,
                               on_idle=self._idle)

    def _idle(self) -> None:
        self.idle_calls += 1


def test_responses_are_written_in_arrival_order_when_later_requests_finish_first():
    async def main() -> _Recorder:
        rec = _Recorder()
        pipeline = rec.pipeline()
        gates = [asyncio.Event() for _ in range(4)]

        async def handle(i: int) -> PipelinedResult:
            await gates[i].wait()
            return _result(b"r%d" % i)

        for i in range(4):
            await pipeline.submit(handle(i), 10 + i)
        for i in (3, 1, 2):  # later requests finish first: nothing may be written yet
            gates[i].set()
        await asyncio.sleep(0.01)
        assert rec.written == []
        assert pipeline.busy
        gates[0].set()
        await pipeline.wait_idle()
        assert not pipeline.busy
        return rec

    rec = asyncio.run(main())
    assert rec.written == [b"r0", b"r1", b"r2", b"r3"]
    assert rec.released == [10, 11, 12, 13]  # each frame's pool share given back after its answer
    assert rec.idle_calls == 1


def test_no_more_than_max_in_flight_are_handled_at_once():
    async def main() -> int:
        rec = _Recorder()
        pipeline = rec.pipeline(max_in_flight=2)
        running = 0
        most = 0
        release = asyncio.Event()

        async def handle(i: int) -> PipelinedResult:
            nonlocal running, most
            running += 1
            most = max(most, running)
            await release.wait()
            running -= 1
            return _result(b"%d" % i)

        async def submit_all() -> None:
            for i in range(5):
                await pipeline.submit(handle(i), 1)

        submitter = asyncio.ensure_future(submit_all())
        await asyncio.sleep(0.01)
        assert not submitter.done()  # the third submit waits for room
        release.set()
        await submitter
        await pipeline.wait_idle()
        assert rec.written == [b"0", b"1", b"2", b"3", b"4"]
        return most

    assert asyncio.run(main()) == 2


def test_a_failed_handler_ends_the_pipeline_and_close_gives_every_byte_back():
    async def main() -> _Recorder:
        rec = _Recorder()
        pipeline = rec.pipeline()
        never = asyncio.Event()

        async def fails() -> PipelinedResult:
            raise RuntimeError("handler bug")

        async def hangs() -> PipelinedResult:
            await never.wait()
            return _result(b"late")

        await pipeline.submit(fails(), 7)
        await pipeline.submit(hangs(), 9)
        with pytest.raises(RuntimeError, match="handler bug"):
            await pipeline.wait_idle()
        with pytest.raises(RuntimeError, match="handler bug"):
            await pipeline.submit(hangs(), 5)  # refused, its bytes given back at once
        await pipeline.close(drain_timeout_s=0.1)
        return rec

    rec = asyncio.run(main())
    assert rec.written == []
    assert sorted(rec.released) == [5, 7, 9]


def test_requests_enter_in_arrival_order_when_a_later_one_is_ready_first():
    """A handler awaits before it buffers (the topic cache refreshed from PostgreSQL, log
    configs): a later request ready first must still enter after the earlier one, as the
    idempotent producer's sequence numbers need (it otherwise got OUT_OF_ORDER_SEQUENCE_NUMBER
    for a batch answered right after its predecessor: a fatal error in librdkafka)."""
    async def main() -> list[int]:
        rec = _Recorder()
        pipeline = rec.pipeline()
        ready = [asyncio.Event() for _ in range(3)]
        entered: list[int] = []

        async def handle(i: int) -> PipelinedResult:
            await ready[i].wait()  # the handler's own awaits before it buffers
            turn = current_produce_turn()
            assert turn is not None
            await turn.wait()
            entered.append(i)
            turn.entered()
            return _result(b"r%d" % i)

        for i in range(3):
            await pipeline.submit(handle(i), 1)
        for i in (2, 1):  # the later requests are ready first
            ready[i].set()
        await asyncio.sleep(0.01)
        assert entered == []  # neither may overtake request 0
        ready[0].set()
        await pipeline.wait_idle()
        assert rec.written == [b"r0", b"r1", b"r2"]
        return entered

    assert asyncio.run(main()) == [0, 1, 2]


def test_a_request_that_buffers_nothing_lets_the_next_one_enter():
    async def main() -> list[str]:
        rec = _Recorder()
        pipeline = rec.pipeline()
        entered: list[str] = []

        async def refused() -> PipelinedResult:  # answered without entering (e.g. unknown topic)
            await asyncio.sleep(0)
            return _result(b"refused")

        async def accepted() -> PipelinedResult:
            turn = current_produce_turn()
            assert turn is not None
            await asyncio.wait_for(turn.wait(), 10)
            entered.append("accepted")
            turn.entered()
            return _result(b"accepted")

        await pipeline.submit(refused(), 1)
        await pipeline.submit(accepted(), 1)
        await pipeline.wait_idle()
        assert rec.written == [b"refused", b"accepted"]
        return entered

    assert asyncio.run(main()) == ["accepted"]
    assert current_produce_turn() is None  # outside a pipeline there is no turn


def test_close_lets_requests_in_flight_finish_their_appends_and_cancels_only_past_the_bound():
    """A closing connection's requests were read in full: they finish (an acks=0 producer that
    closes right after flushing loses nothing), and only one still running past the drain bound
    is cancelled. No answer is written any more."""
    async def main() -> tuple[_Recorder, list[str]]:
        rec = _Recorder()
        pipeline = rec.pipeline()
        events: list[str] = []
        release = asyncio.Event()

        async def appends_after_a_while() -> PipelinedResult:
            await asyncio.sleep(0.05)
            events.append("appended")
            return _result(b"late")

        async def never_ends() -> PipelinedResult:
            try:
                await release.wait()
            except asyncio.CancelledError:
                events.append("cancelled")
                raise
            return _result(b"never")

        await pipeline.submit(appends_after_a_while(), 10)
        await pipeline.submit(never_ends(), 11)
        await asyncio.sleep(0)
        await pipeline.close(drain_timeout_s=0.5)
        return rec, events

    rec, events = asyncio.run(main())
    assert events == ["appended", "cancelled"]
    assert rec.written == []
    assert sorted(rec.released) == [10, 11]
