"""ShareConsumer's I/O glue against a scripted share broker (tests/support/scripted_share_broker.py):
the requests it sends (session epochs, piggy-backed acknowledgements, ShareAcknowledge on commit
and close, the leave heartbeat) and what the application sees. Interop with a real broker is in
tests/interop/test_share_consumer_interop.py."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from kio.schema.errors import ErrorCode

from oncestream.client import AcknowledgeType, IllegalStateException, KafkaException, ShareConsumer, TopicPartition
from tests.support.scripted_share_broker import (
    ACKNOWLEDGED,
    ARCHIVED,
    AVAILABLE,
    ScriptedShareBroker,
    running,
)

HEARTBEAT, SHARE_FETCH, SHARE_ACKNOWLEDGE = 76, 78, 79
WAIT_S = 20.0


def _consumer(bootstrap: str, **conf: object) -> ShareConsumer:
    return ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "g", **conf})


def _subscribed_with_callback(bootstrap: str, results: list[tuple[dict, object]], **conf: object) -> ShareConsumer:
    """A consumer subscribed to ``t`` whose acknowledgement commit callback appends to ``results``."""
    consumer = _consumer(bootstrap, **conf)
    consumer.set_acknowledgement_commit_callback(lambda offsets, exc: results.append((offsets, exc)))
    consumer.subscribe(["t"])
    return consumer


def _poll_until(consumer: ShareConsumer, count: int) -> list:
    got: list = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < count and time.monotonic() < deadline:
        got.extend(m for m in consumer.poll(0.5) if m.error() is None)
    assert len(got) == count, f"{len(got)} of {count} records within {WAIT_S} s"
    return got


def _eventually(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def _fetch_acks(request: object) -> list[tuple[int, int, tuple[int, ...]]]:
    return [(b.first_offset, b.last_offset, tuple(b.acknowledge_types))
            for t in request.topics for p in t.partitions for b in p.acknowledgement_batches]  # type: ignore[attr-defined]


def test_implicit_mode_accepts_on_the_next_poll_and_closes_the_session() -> None:
    broker = ScriptedShareBroker([b"a", b"b", b"c"])
    with running(broker) as bootstrap:
        consumer = _consumer(bootstrap)
        consumer.subscribe(["t"])
        got = _poll_until(consumer, 3)
        assert [(m.offset(), m.value(), m.delivery_count()) for m in got] == [(0, b"a", 1), (1, b"b", 1), (2, b"c", 1)]
        consumer.poll(1.0)  # accepts the three; they ride on the next ShareFetch
        _eventually(lambda: broker.states() == [ACKNOWLEDGED] * 3)
        consumer.close()
        fetches = broker.requests(SHARE_FETCH)
        assert fetches[0].share_session_epoch == 0
        assert _fetch_acks(fetches[0]) == []  # an opening request carries no acknowledgement
        assert [f.share_session_epoch for f in fetches] == list(range(len(fetches)))
        assert any(_fetch_acks(f) == [(0, 2, (1,))] for f in fetches)
        closing = broker.requests(SHARE_ACKNOWLEDGE)[-1]
        assert closing.share_session_epoch == -1
        heartbeats = broker.requests(HEARTBEAT)
        assert heartbeats[0].member_epoch == 0
        assert heartbeats[0].subscribed_topic_names == ("t",)
        assert heartbeats[-1].member_epoch == -1
        assert {h.member_id for h in heartbeats} == {consumer.memberid()}


def test_explicit_mode_accept_release_reject() -> None:
    broker = ScriptedShareBroker([b"a", b"b", b"c"])
    with running(broker) as bootstrap:
        consumer = _consumer(bootstrap, **{"share.acknowledgement.mode": "explicit"})
        consumer.subscribe(["t"])
        first, second, _third = _poll_until(consumer, 3)
        with pytest.raises(IllegalStateException, match="not acknowledged"):
            consumer.poll(0.1)
        consumer.acknowledge(first)
        consumer.acknowledge(second, AcknowledgeType.RELEASE)
        consumer.acknowledge_offset("t", 0, 2, AcknowledgeType.REJECT)
        assert consumer.commit_sync(10) == {TopicPartition("t", 0): None}
        assert broker.states() == [ACKNOWLEDGED, AVAILABLE, ARCHIVED]
        assert consumer.commit_sync(10) == {}  # nothing pending
        with pytest.raises(IllegalStateException):
            consumer.acknowledge(first)  # already sent
        again = _poll_until(consumer, 1)
        assert [(m.offset(), m.delivery_count()) for m in again] == [(1, 2)]
        consumer.acknowledge(again[0])
        consumer.close()
        assert broker.states() == [ACKNOWLEDGED, ACKNOWLEDGED, ARCHIVED]


def test_acknowledge_needs_explicit_mode() -> None:
    broker = ScriptedShareBroker([b"a"])
    with running(broker) as bootstrap:
        consumer = _consumer(bootstrap)
        consumer.subscribe(["t"])
        (message,) = _poll_until(consumer, 1)
        with pytest.raises(IllegalStateException, match="explicit"):
            consumer.acknowledge(message)
        consumer.close()
        assert broker.states() == [ACKNOWLEDGED]  # close accepts the last poll's records


def test_close_releases_what_was_not_acknowledged() -> None:
    broker = ScriptedShareBroker([b"a", b"b", b"c"])
    with running(broker) as bootstrap:
        consumer = _consumer(bootstrap, **{"share.acknowledgement.mode": "explicit", "max.poll.records": 2})
        consumer.subscribe(["t"])
        first, _second = _poll_until(consumer, 2)
        consumer.acknowledge(first)
        consumer.close()
        assert broker.states() == [ACKNOWLEDGED, AVAILABLE, AVAILABLE]
        closing = broker.requests(SHARE_ACKNOWLEDGE)[-1]
        assert closing.share_session_epoch == -1
        sent = {o: (t[0] if len(t) == 1 else t[o - first])
                for first, last, t in _fetch_acks(closing) for o in range(first, last + 1)}
        # ACCEPT 0, RELEASE the unacknowledged 1 (and 2 if it was fetched ahead meanwhile)
        assert {o: k for o, k in sent.items() if o < 2} == {0: 1, 1: 2}


def test_commit_async_reports_to_the_callback_on_the_application_thread() -> None:
    broker = ScriptedShareBroker([b"a", b"b"])
    results: list[tuple[dict, object]] = []
    with running(broker) as bootstrap:
        consumer = _subscribed_with_callback(bootstrap, results)
        _poll_until(consumer, 2)
        consumer.commit_async()
        _eventually(lambda: broker.states() == [ACKNOWLEDGED] * 2)
        assert consumer.commit_sync(10) == {}  # serves the callback of the async commit
        consumer.close()
    assert results == [({TopicPartition("t", 0): {0, 1}}, None)]


def test_a_lost_session_reopens_without_acknowledgements_and_reports_them_failed() -> None:
    broker = ScriptedShareBroker([b"a", b"b"])
    results: list[tuple[dict, object]] = []
    with running(broker) as bootstrap:
        consumer = _subscribed_with_callback(bootstrap, results, **{"max.poll.records": 1})
        _poll_until(consumer, 1)
        broker.fail_next_fetch_with = int(ErrorCode.share_session_not_found)
        _poll_until(consumer, 1)
        deadline = time.monotonic() + WAIT_S
        while not any(exc is not None for _, exc in results):  # poll serves the callbacks
            assert time.monotonic() < deadline, "the failed acknowledgement was never reported"
            consumer.poll(0.1)
        consumer.close()
    fetches = broker.requests(SHARE_FETCH)
    lost = next(i for i, f in enumerate(fetches) if _fetch_acks(f))
    assert fetches[lost + 1].share_session_epoch == 0
    assert _fetch_acks(fetches[lost + 1]) == []
    failed = [(offsets, exc) for offsets, exc in results if exc is not None]
    assert failed
    assert isinstance(failed[0][1], KafkaException)
    assert failed[0][1].args[0].code() == int(ErrorCode.share_session_not_found)


def test_group_id_is_required() -> None:
    with pytest.raises(ValueError, match=r"group\.id"):
        ShareConsumer({"bootstrap.servers": "127.0.0.1:1"})


def test_poll_needs_a_subscription() -> None:
    broker = ScriptedShareBroker([])
    with running(broker) as bootstrap:
        consumer = _consumer(bootstrap)
        with pytest.raises(IllegalStateException, match="subscription"):
            consumer.poll(0.1)
        consumer.close()
        with pytest.raises(IllegalStateException, match="closed"):
            consumer.subscribe(["t"])


def test_unsubscribe_gives_back_leaves_and_subscribe_joins_again() -> None:
    broker = ScriptedShareBroker([b"a", b"b", b"c"])
    with running(broker) as bootstrap:
        consumer = _consumer(bootstrap, **{"max.poll.records": 2})
        consumer.subscribe(["t"])
        assert [m.offset() for m in _poll_until(consumer, 2)] == [0, 1]
        consumer.unsubscribe()  # implicit mode: accepts the two, releases what was fetched ahead
        assert consumer.subscription() == []
        assert broker.states() == [ACKNOWLEDGED, ACKNOWLEDGED, AVAILABLE]
        assert broker.requests(HEARTBEAT)[-1].member_epoch == -1
        consumer.subscribe(["t"])
        assert [(m.offset(), m.value()) for m in _poll_until(consumer, 1)] == [(2, b"c")]
        consumer.close()
        assert broker.states() == [ACKNOWLEDGED] * 3
        assert broker.requests(HEARTBEAT)[-1].member_epoch == -1
        member_ids = {h.member_id for h in broker.requests(HEARTBEAT)}
        assert member_ids == {consumer.memberid()}  # one member id for the consumer's lifetime


def test_a_broker_without_share_groups_is_a_fatal_error_in_poll() -> None:
    broker = ScriptedShareBroker([b"a"])
    broker.versions = {k: v for k, v in broker.versions.items() if k not in (76, 78, 79)}
    with running(broker) as bootstrap:
        consumer = _consumer(bootstrap)
        consumer.subscribe(["t"])
        with pytest.raises(KafkaException) as caught:
            _poll_for(consumer, WAIT_S)
        assert caught.value.args[0].code() == int(ErrorCode.unsupported_version)
        assert caught.value.args[0].fatal()
        consumer.close()


def _poll_for(consumer: ShareConsumer, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        consumer.poll(0.2)


def test_commit_sync_that_times_out_still_finishes_and_the_session_goes_on() -> None:
    broker = ScriptedShareBroker([b"a", b"b"], acknowledge_delay_s=1.0)
    results: list[tuple[dict, object]] = []
    with running(broker) as bootstrap:
        consumer = _subscribed_with_callback(bootstrap, results, **{"max.poll.records": 1})
        _poll_until(consumer, 1)
        with pytest.raises(KafkaException) as caught:
            consumer.commit_sync(0.1)
        assert caught.value.args[0].code() == -185  # _TIMED_OUT
        _eventually(lambda: broker.states()[0] == ACKNOWLEDGED)  # the commit went on without us
        broker.acknowledge_delay_s = 0.0
        assert [m.offset() for m in _poll_until(consumer, 1)] == [1]  # the session is still usable
        assert consumer.commit_sync(10) == {TopicPartition("t", 0): None}
        consumer.close()
    assert ({TopicPartition("t", 0): {0}}, None) in results


def test_records_given_back_unseen_on_a_rejoin_are_not_reported_as_acknowledged() -> None:
    """The group forgets the member (as a broker restarted under it does) while records fetched
    ahead wait in the buffer: the consumer joins again and gives them back (RELEASE), and the next
    ShareFetch acquires them again. The application never had them, so the acknowledgement commit
    callback must not report them; otherwise it reads a record as acknowledged and then gets it."""
    broker = ScriptedShareBroker([b"a", b"b", b"c", b"d"])
    results: list[tuple[dict, object]] = []
    with running(broker) as bootstrap:
        consumer = _subscribed_with_callback(bootstrap, results, **{"max.poll.records": 2})
        assert [m.offset() for m in _poll_until(consumer, 2)] == [0, 1]
        _eventually(lambda: broker.states()[2:] == ["acquired"] * 2)  # fetched ahead, not handed out
        broker.forget_members = True
        _eventually(lambda: any(_fetch_acks(f) == [(2, 3, (2,))] for f in broker.requests(SHARE_FETCH)))
        confirmed: set[int] = set()
        delivered_after: list[tuple[int, set[int]]] = []
        deadline = time.monotonic() + WAIT_S
        while not delivered_after:
            assert time.monotonic() < deadline, "the records given back never came again"
            batch = [m for m in consumer.poll(0.5) if m.error() is None]
            for offsets, exc in results:
                if exc is None:
                    confirmed |= offsets.get(TopicPartition("t", 0), set())
            delivered_after.extend((m.offset(), set(confirmed)) for m in batch)
        consumer.close()
    assert [offset for offset, _ in delivered_after] == [2, 3]
    for offset, acknowledged in delivered_after:
        assert offset not in acknowledged, f"offset {offset} was reported acknowledged before it was delivered"
