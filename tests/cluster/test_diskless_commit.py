"""The diskless commit transaction against a real PostgreSQL: dense offsets under concurrent
commits of several brokers, the idempotent producer's rules on stored state (KIP-98/KIP-360),
per-partition errors, the object's state, and commits whose outcome is unknown."""

from __future__ import annotations

import asyncio
import json

import psycopg
import pytest
from kio.schema.errors import ErrorCode

from oncestream.cluster.diskless.commit import (
    AppendOutcome,
    ObjectNotUploadingError,
    commit_uploaded,
    read_back_commit,
    record_uploading,
)
from oncestream.cluster.diskless.produce_object import build_produce_object, new_object_key, validate_append
from oncestream.cluster.pg.store import Conn, MetadataStore
from oncestream.log.config import LogConfig
from tests.cluster.diskless_support import (
    NOW_MS,
    assert_dense,
    batch_offsets,
    commit_records,
    create_topic,
    fetch_all,
    high_watermark,
    open_store,
    run_with_store,
)
from tests.unit._batches import ATTR_TRANSACTIONAL, idempotent_batch, make_batch


def test_offsets_are_assigned_densely_per_partition_with_rows_and_a_notification(pg_database):
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 2)
        listener = store.listen("oncestream_appends")
        first_payload = asyncio.ensure_future(anext(listener))
        await asyncio.sleep(0.5)  # LISTEN is in place
        outcomes = await commit_records(store, [
            (topic, 0, make_batch(3)), (topic, 1, make_batch(2)), (topic, 0, make_batch(5)),
        ])
        assert [(o.error, o.base_offset, o.last_offset) for o in outcomes] == [
            (ErrorCode.none, 0, 2), (ErrorCode.none, 0, 1), (ErrorCode.none, 3, 7)]
        assert await batch_offsets(store, topic, 0) == [(0, 2), (3, 7)]
        assert await high_watermark(store, topic, 0) == 8
        assert await high_watermark(store, topic, 1) == 2
        payload = await asyncio.wait_for(first_payload, 30)
        assert sorted(payload.split(",")) == [f"{topic}:0", f"{topic}:1"]
        [(state,)] = await fetch_all(store, "SELECT state FROM objects")
        assert state == "live"
        await listener.aclose()

    run_with_store(pg_database, main)


def test_concurrent_commits_of_several_brokers_keep_offsets_dense(pg_database):
    """Invariant 2: four 'brokers' (their own pools) commit objects touching the same partitions
    in different orders at once; every partition's offsets stay dense and ordered."""
    async def main() -> None:
        stores = [await open_store(pg_database) for _ in range(4)]
        try:
            topic = await create_topic(stores[0], 3)

            async def broker(index: int) -> list[AppendOutcome]:
                results: list[AppendOutcome] = []
                for round_ in range(8):
                    order = [(index + round_ + k) % 3 for k in range(3)]
                    results += await commit_records(stores[index], [(topic, p, make_batch(1 + p)) for p in order])
                return results

            everything = [o for batch in await asyncio.gather(*(broker(i) for i in range(4))) for o in batch]
            assert all(o.error == ErrorCode.none for o in everything)
            for partition in range(3):
                offsets = await batch_offsets(stores[0], topic, partition)
                assert len(offsets) == 32
                assert_dense(offsets, await high_watermark(stores[0], topic, partition))
            answered = sorted((o.base_offset, o.last_offset) for o in everything if o.last_offset - o.base_offset == 2)
            assert answered == await batch_offsets(stores[0], topic, 2)  # each answer is its row
        finally:
            for store in stores:
                await store.close()

    asyncio.run(main())


def test_a_retried_batch_from_another_object_is_answered_with_its_first_offsets(pg_database):
    """Invariant 3: the duplicate gets no row; an object of nothing but duplicates is garbage."""
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 1)
        batch = idempotent_batch(42, 0, 0, count=3)
        _, first = await commit_records(store, [(topic, 0, make_batch(2)), (topic, 0, batch)])
        assert (first.base_offset, first.last_offset, first.duplicate) == (2, 4, False)
        [again] = await commit_records(store, [(topic, 0, batch)])
        assert (again.error, again.base_offset, again.last_offset, again.duplicate) == (ErrorCode.none, 2, 4, True)
        assert await batch_offsets(store, topic, 0) == [(0, 1), (2, 4)]
        states = await fetch_all(store, "SELECT state, delete_after IS NOT NULL FROM objects ORDER BY created_at")
        assert states == [("live", False), ("deleting", True)]
        [(recent,)] = await fetch_all(store, "SELECT recent_batches FROM producer_states")
        assert recent == [[0, 2, 2, 4, 1_000]]

    run_with_store(pg_database, main)


def test_only_the_last_five_batches_are_remembered(pg_database):
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 1)
        for seq in range(6):
            [out] = await commit_records(store, [(topic, 0, idempotent_batch(5, 0, seq))])
            assert out.base_offset == seq
        [(recent,)] = await fetch_all(store, "SELECT recent_batches FROM producer_states")
        assert [item[0] for item in json.loads(json.dumps(recent))] == [1, 2, 3, 4, 5]
        [old] = await commit_records(store, [(topic, 0, idempotent_batch(5, 0, 0))])
        assert old.error == ErrorCode.out_of_order_sequence_number  # forgotten, as in Kafka
        [recent_dup] = await commit_records(store, [(topic, 0, idempotent_batch(5, 0, 1))])
        assert (recent_dup.duplicate, recent_dup.base_offset) == (True, 1)

    run_with_store(pg_database, main)


def test_producer_errors_are_per_partition_and_do_not_fail_the_others(pg_database):
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 2)
        gone = await create_topic(store, 1)
        await commit_records(store, [(topic, 0, idempotent_batch(9, 3, 0, count=2))])
        await store.run(lambda conn: conn.execute("DELETE FROM topics WHERE topic_id = %s", (gone,)))
        outcomes = await commit_records(store, [
            (topic, 0, idempotent_batch(9, 2, 2)),  # an older epoch: fenced zombie
            (topic, 0, idempotent_batch(9, 3, 5)),  # a gap in the sequence
            (topic, 0, idempotent_batch(77, 0, 4)),  # unknown producer, not at sequence 0
            (topic, 0, idempotent_batch(9, 4, 1)),  # a new epoch must start at 0
            (gone, 0, make_batch(1)),
            (topic, 1, make_batch(1)),  # unaffected
            (topic, 0, idempotent_batch(9, 3, 2)),  # the correct next batch
        ])
        assert [o.error for o in outcomes] == [
            ErrorCode.invalid_producer_epoch, ErrorCode.out_of_order_sequence_number,
            ErrorCode.unknown_producer_id, ErrorCode.out_of_order_sequence_number,
            ErrorCode.unknown_topic_or_partition, ErrorCode.none, ErrorCode.none]
        assert all(o.error_message for o in outcomes[:5])
        assert (outcomes[6].base_offset, outcomes[6].last_offset) == (2, 2)
        assert await batch_offsets(store, topic, 0) == [(0, 1), (2, 2)]
        [bumped] = await commit_records(store, [(topic, 0, idempotent_batch(9, 4, 0))])
        assert bumped.error == ErrorCode.none  # epoch bump at sequence 0 (KIP-360)
        [zombie] = await commit_records(store, [(topic, 0, idempotent_batch(9, 3, 3))])
        assert zombie.error == ErrorCode.invalid_producer_epoch

    run_with_store(pg_database, main)


def test_a_transactional_batch_opens_the_transaction_once(pg_database):
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 1)
        await commit_records(store, [(topic, 0, make_batch(2))])
        txn = [(topic, 0, idempotent_batch(11, 0, s, attributes=ATTR_TRANSACTIONAL)) for s in (0, 1)]
        await commit_records(store, txn[:1])
        await commit_records(store, txn[1:])
        rows = await fetch_all(store, "SELECT txn_first_offset FROM producer_states WHERE producer_id = 11")
        assert rows == [(2,)]
        [plain] = await commit_records(store, [(topic, 0, idempotent_batch(11, 0, 2))])
        assert plain.error == ErrorCode.invalid_txn_state  # a transaction is open
        txn_rows = await fetch_all(store, "SELECT is_transactional FROM batches ORDER BY base_offset")
        assert txn_rows == [(False,), (True,), (True,)]

    run_with_store(pg_database, main)


def test_log_append_time_is_answered_and_stored(pg_database):
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 1)
        config = LogConfig(message_timestamp_type="LogAppendTime")
        [out] = await commit_records(store, [(topic, 0, make_batch(1))], config=config, now_ms=NOW_MS + 5)
        assert out.log_append_time_ms == NOW_MS + 5
        rows = await fetch_all(store, "SELECT timestamp_type, max_timestamp_ms, append_time_ms FROM batches")
        assert rows == [(1, NOW_MS + 5, NOW_MS + 5)]

    run_with_store(pg_database, main)


def _prepared(topic, key):
    obj = build_produce_object(key, [validate_append(topic, 0, make_batch(2), LogConfig())], NOW_MS)
    return obj


def test_an_object_no_longer_uploading_commits_nothing(pg_database):
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 1)
        key = new_object_key("t", NOW_MS)
        obj = _prepared(topic, key)
        await store.run(lambda conn: record_uploading(conn, key, len(obj.data), 1))
        # The garbage collector gave up on it first.
        await store.run(lambda conn: conn.execute("UPDATE objects SET state = 'deleting'"))
        with pytest.raises(ObjectNotUploadingError, match="not 'uploading'"):
            await store.run(lambda conn: commit_uploaded(conn, key, obj.appends))
        assert await batch_offsets(store, topic, 0) == []
        assert await high_watermark(store, topic, 0) == 0

    run_with_store(pg_database, main)


def test_a_backend_killed_before_commit_is_read_back_as_not_committed_and_retried(pg_database):
    """The connection dies after the commit's statements, before COMMIT: the store cannot know,
    reads back ('uploading': nothing happened), and commits again exactly once."""
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 1)
        key = new_object_key("t", NOW_MS)
        obj = _prepared(topic, key)
        await store.run(lambda conn: record_uploading(conn, key, len(obj.data), 1))
        attempts = []

        async def commit(conn: Conn) -> list[AppendOutcome]:
            outcomes = await commit_uploaded(conn, key, obj.appends)
            attempts.append(conn.info.backend_pid)
            if len(attempts) == 1:
                async with await psycopg.AsyncConnection.connect(pg_database, autocommit=True) as killer:
                    await killer.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
            return outcomes

        read_backs = []

        async def read_back(conn: Conn) -> list[AppendOutcome] | None:
            found = await read_back_commit(conn, key, obj.appends)
            read_backs.append(found)
            return found

        [out] = await store.run(commit, read_back=read_back)
        assert len(attempts) == 2
        assert (out.error, out.base_offset, out.last_offset) == (ErrorCode.none, 0, 1)
        assert await batch_offsets(store, topic, 0) == [(0, 1)]

    run_with_store(pg_database, main)


def test_a_commit_whose_answer_was_lost_is_resolved_by_reading_back(postgres, pg_database):
    """The COMMIT reached PostgreSQL but its answer did not reach the broker (a proxy cuts the
    connection): reading back finds the object 'live' and rebuilds the answers from the rows;
    offsets are assigned once, never twice."""
    from tests.cluster.test_metadata_store import _CommitDroppingProxy

    dbname = pg_database.rsplit("/", 1)[1]

    async def main() -> None:
        proxy = _CommitDroppingProxy(postgres.port)
        await proxy.start()
        store = await open_store(f"postgresql://postgres@127.0.0.1:{proxy.port}/{dbname}", retry_timeout_ms=20_000)
        try:
            topic = await create_topic(store, 2)
            await commit_records(store, [(topic, 0, make_batch(4))])
            key = new_object_key("t", NOW_MS)
            validated = [validate_append(topic, 0, idempotent_batch(3, 0, 0, count=2), LogConfig()),
                         validate_append(topic, 1, make_batch(1), LogConfig())]
            obj = build_produce_object(key, validated, NOW_MS)
            await store.run(lambda conn: record_uploading(conn, key, len(obj.data), 1))
            read_backs = []

            async def read_back(conn: Conn) -> list[AppendOutcome] | None:
                found = await read_back_commit(conn, key, obj.appends)
                read_backs.append(found)
                return found

            proxy.armed = True
            outcomes = await store.run(lambda conn: commit_uploaded(conn, key, obj.appends), read_back=read_back)
            assert proxy.cut == 1
            assert len(read_backs) == 1
            assert [(o.error, o.base_offset, o.last_offset) for o in outcomes] == [
                (ErrorCode.none, 4, 5), (ErrorCode.none, 0, 0)]
            assert await batch_offsets(store, topic, 0) == [(0, 3), (4, 5)]
        finally:
            await store.close()
            await proxy.stop()

    asyncio.run(main())
