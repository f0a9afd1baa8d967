"""MetadataStore (cluster/pg/store.py) against a real PostgreSQL: URL parsing, start-up errors,
whole-transaction retries of real serialization failures and killed backends, and the commit whose
outcome is unknown (a proxy drops the connection right after COMMIT reached the server)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import psycopg
import pytest

from oncestream.broker_process import free_tcp_port
from oncestream.cluster.pg.errors import (
    BadMetadataStoreUrlError,
    CommitOutcomeUnknownError,
    MetadataStoreError,
    MetadataStoreUnavailableError,
)
from oncestream.cluster.pg.schema import SchemaStep
from oncestream.cluster.pg.store import Conn, MetadataStore, MetadataStoreConfig, parse_metadata_store_url

_COUNTER = (SchemaStep("t_counter", "CREATE TABLE counter (id int PRIMARY KEY, n int NOT NULL);"
                                    "INSERT INTO counter VALUES (1, 0)"),)


def test_url_parsing():
    url = parse_metadata_store_url("postgresql://alice:s%40cret@db.example:5433/meta?sslmode=require")
    assert (url.user, url.password, url.host, url.port, url.dbname) == ("alice", "s@cret", "db.example", 5433, "meta")
    assert url.params == {"sslmode": "require"}
    assert "s@cret" not in url.describe()
    no_password = parse_metadata_store_url("postgresql://bob@127.0.0.1:5432/db")
    assert no_password.password is None
    assert "password" not in no_password.conninfo(5000)


@pytest.mark.parametrize(("bad", "why"), [
    ("mysql://u@h:1/d", "scheme"),
    ("postgresql://h:1/d", "no user"),
    ("postgresql://u@h/d", "no port"),
    ("postgresql://u@h:1/", "no single database"),
    ("postgresql://u@h:1/a/b", "no single database"),
    ("postgresql://u@h:notaport/d", "malformed"),
])
def test_bad_urls_are_refused_with_the_reason(bad, why):
    with pytest.raises(BadMetadataStoreUrlError, match=why):
        parse_metadata_store_url(bad)


def test_unreachable_at_start_is_a_typed_error_within_the_bound():
    port = free_tcp_port("127.0.0.1")  # nothing listens there
    config = MetadataStoreConfig(start_timeout_ms=1_500, connect_timeout_ms=2_000)
    started = time.monotonic()
    with pytest.raises(MetadataStoreUnavailableError, match="did not answer within 1500 ms"):
        asyncio.run(MetadataStore.open(f"postgresql://postgres@127.0.0.1:{port}/x", config))
    assert time.monotonic() - started < 30  # bounded (generous: the machine is loaded)


def test_a_missing_database_fails_at_once_not_after_the_wait(postgres):
    config = MetadataStoreConfig(start_timeout_ms=120_000)
    started = time.monotonic()
    with pytest.raises(MetadataStoreError, match="does not exist") as info:
        asyncio.run(MetadataStore.open(postgres.url("no_such_database"), config))
    assert not isinstance(info.value, MetadataStoreUnavailableError)
    assert time.monotonic() - started < 60  # did not wait out the two minutes


async def _open(url: str, **config: int) -> MetadataStore:
    return await MetadataStore.open(url, MetadataStoreConfig(**config), steps=_COUNTER)


async def _count(conn: Conn) -> int:
    cursor = await conn.execute("SELECT n FROM counter WHERE id = 1")
    row = await cursor.fetchone()
    assert row is not None
    return int(row[0])


def test_transaction_commits_or_rolls_back_whole(pg_database):
    async def main() -> None:
        store = await _open(pg_database)
        try:
            async with store.transaction() as conn:
                await conn.execute("UPDATE counter SET n = n + 1")
            async def failing_block() -> None:
                async with store.transaction() as conn:
                    await conn.execute("UPDATE counter SET n = n + 10")
                    _ = 1 / 0

            with pytest.raises(ZeroDivisionError):
                await failing_block()
            with pytest.raises(MetadataStoreError, match="UndefinedTable"):
                await store.run(lambda conn: conn.execute("SELECT * FROM no_such_table"))
            assert await store.run(_count) == 1
        finally:
            await store.close()

    asyncio.run(main())


def test_real_serialization_failures_are_retried_whole(pg_database):
    """Two SERIALIZABLE read-modify-writes of one row: PostgreSQL aborts one with 40001; run()
    retries it whole, so both increments land."""
    attempts: list[int] = []

    async def main() -> int:
        store = await _open(pg_database, pool_max_size=4)
        both_read = asyncio.Barrier(2)
        try:
            async def increment(conn: Conn) -> None:
                attempts.append(1)
                await conn.execute("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
                n = await _count(conn)
                if len(attempts) <= 2:
                    await asyncio.wait_for(both_read.wait(), 30)  # both read before either writes
                await conn.execute("UPDATE counter SET n = %s WHERE id = 1", (n + 1,))

            await asyncio.gather(store.run(increment), store.run(increment))
            return await store.run(_count)
        finally:
            await store.close()

    assert asyncio.run(main()) == 2
    assert len(attempts) >= 3  # one of the first two failed and ran again


def test_a_backend_killed_mid_transaction_is_retried(pg_database):
    attempts: list[int] = []

    async def main() -> int:
        store = await _open(pg_database)
        try:
            async def step(conn: Conn) -> None:
                attempts.append(1)
                await conn.execute("UPDATE counter SET n = n + 1")
                if len(attempts) == 1:
                    await conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
            await store.run(step)
            return await store.run(_count)
        finally:
            await store.close()

    assert asyncio.run(main()) == 1  # the killed attempt's update did not count
    assert len(attempts) == 2


def test_a_transaction_idle_past_the_configured_bound_is_ended_and_retried(pg_database):
    """A process paused inside a transaction holds the rows it locked at most
    ``idle_in_transaction_timeout_ms``: PostgreSQL ends the session (25P03), the transaction did not
    commit, and ``run`` runs it again; meanwhile another session can take the lock."""
    attempts: list[int] = []

    async def main() -> tuple[int, bool]:
        store = await _open(pg_database, idle_in_transaction_timeout_ms=300)
        try:
            async def step(conn: Conn) -> None:
                attempts.append(1)
                await conn.execute("UPDATE counter SET n = n + 1")  # locks the row
                if len(attempts) == 1:
                    time.sleep(1.5)  # noqa: ASYNC251  (the whole process stalls, as SIGSTOP would)
                    await conn.execute("SELECT 1")
            await store.run(step)
            async with await psycopg.AsyncConnection.connect(store.conninfo, autocommit=True) as other:
                await other.execute("SET lock_timeout = '5s'")
                await other.execute("UPDATE counter SET n = n")  # the row is free again
            return await store.run(_count), True
        finally:
            await store.close()

    assert asyncio.run(main()) == (1, True)  # the ended attempt's update did not count
    assert len(attempts) == 2


class _CommitDroppingProxy:
    """A TCP proxy to PostgreSQL that, once armed, forwards a COMMIT to the server, waits for the
    server to act on it, then cuts both connections before the answer reaches the client."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.armed = False
        self.cut = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", self.target_port)

        cutting = False

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, upstream: bool) -> None:
            nonlocal cutting
            try:
                while data := await src.read(65536):
                    if cutting:
                        return  # the server's answer to COMMIT never reaches the client
                    if upstream and self.armed and b"COMMIT" in data:
                        self.armed, cutting = False, True
                        self.cut += 1
                        dst.write(data)
                        await dst.drain()
                        await asyncio.sleep(0.5)  # the server commits and answers into the void
                        client_w.transport.abort()
                        server_w.transport.abort()
                        return
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pump(client_r, server_w, True), pump(server_r, client_w, False),
                             return_exceptions=True)


def test_a_connection_lost_after_commit_is_outcome_unknown_and_read_back_resolves_it(postgres, pg_database):
    dbname = pg_database.rsplit("/", 1)[1]

    async def main() -> None:
        proxy = _CommitDroppingProxy(postgres.port)
        await proxy.start()
        store = await _open(f"postgresql://postgres@127.0.0.1:{proxy.port}/{dbname}", retry_timeout_ms=20_000)
        try:
            async def step(conn: Conn) -> str:
                await conn.execute("UPDATE counter SET n = n + 1")
                return "done"

            proxy.armed = True
            with pytest.raises(CommitOutcomeUnknownError, match="may or may not have committed"):
                await store.run(step)
            assert proxy.cut == 1
            assert await store.run(_count) == 1  # it had committed: a blind retry would make it 2

            async def read_back(conn: Conn) -> str | None:
                return "done" if await _count(conn) == 2 else None

            proxy.armed = True
            assert await store.run(step, read_back=read_back) == "done"
            assert proxy.cut == 2
            assert await store.run(_count) == 2  # resolved by reading back, not applied twice

            async def read_back_failing(conn: Conn) -> str | None:
                raise psycopg.OperationalError("the read-back lost its connection too")

            proxy.armed = True
            with pytest.raises(CommitOutcomeUnknownError, match="may or may not have committed"):
                await store.run(step, read_back=read_back_failing, retry_timeout_ms=500)
            assert proxy.cut == 3
            assert await store.run(_count) == 3  # it had committed: "unavailable" would have lied
        finally:
            await store.close()
            await proxy.stop()

    asyncio.run(main())


def test_listen_yields_payloads_and_ends_when_the_store_closes(pg_database):
    async def main() -> list[str]:
        store = await _open(pg_database, listen_probe_interval_ms=600_000)
        got: list[str] = []
        try:
            listener = store.listen("oncestream_test")
            first = asyncio.ensure_future(anext(listener))
            for _ in range(100):  # bounded: until the LISTEN is in place, NOTIFYs are not seen
                await store.run(lambda conn: conn.execute("SELECT pg_notify('oncestream_test', 'a')"))
                done, _ = await asyncio.wait({first}, timeout=0.2)
                if done:
                    break
            got.append(first.result())
            await store.run(lambda conn: conn.execute("SELECT pg_notify('oncestream_test', 'b:1')"))
            while got[-1] != "b:1":
                got.append(await asyncio.wait_for(anext(listener), 30))
            waiting = asyncio.ensure_future(anext(listener))
            await asyncio.sleep(0.1)
        finally:
            await store.close()
        with pytest.raises(StopAsyncIteration):  # close() woke it (no probe for 600 s)
            await asyncio.wait_for(waiting, 30)
        return got

    got = asyncio.run(main())
    assert got[0] == "a"
    assert got[-1] == "b:1"


async def _until(predicate: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached within {timeout_s} s")
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_run_fails_retriably_while_postgres_is_down_and_resumes_after_restart(postgres_factory, how):
    """A loop of run() calls through a restart of PostgreSQL (fast stop, or SIGKILL of the
    postmaster): while it is down every call fails with MetadataStoreUnavailableError within its
    bound; after the restart calls succeed on the same MetadataStore; LISTEN reconnects and says so
    with an empty payload."""
    server = postgres_factory()
    dbname = f"restart_{how}"
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {dbname}")

    async def main() -> None:
        store = await _open(server.url(dbname), retry_timeout_ms=700, connect_timeout_ms=2_000)
        outcomes: list[str] = []
        stop_loop = asyncio.Event()

        async def increment(conn: Conn) -> None:
            await conn.execute("UPDATE counter SET n = n + 1")

        async def loop() -> None:
            while not stop_loop.is_set():
                try:
                    await store.run(increment)
                    outcomes.append("ok")
                except MetadataStoreUnavailableError:
                    outcomes.append("unavailable")
                await asyncio.sleep(0.02)

        listener = store.listen("oncestream_restart")
        listened = asyncio.ensure_future(anext(listener))
        try:
            looping = asyncio.ensure_future(loop())
            await _until(lambda: (outcomes.count("ok") >= 5), 30)
            await asyncio.to_thread(server.stop if how == "stop" else server.kill)
            ok_before = outcomes.count("ok")
            await _until(lambda: (outcomes.count("unavailable") >= 2), 60)
            await asyncio.to_thread(server.start)
            await _until(lambda: (outcomes.count("ok") >= ok_before + 5), 60)
            stop_loop.set()
            await asyncio.wait_for(looping, 30)
            # LISTEN reconnected: '' (anything may have changed), then payloads again.
            assert await asyncio.wait_for(listened, 60) == ""
            await store.run(lambda conn: conn.execute("SELECT pg_notify('oncestream_restart', 'after')"))
            assert await asyncio.wait_for(anext(listener), 30) == "after"
            # Every call counted as ok committed once; the unavailable ones did not (or did not
            # report), so the counter is at least the ok count and no more than all attempts.
            n = await store.run(_count)
            assert outcomes.count("ok") <= n <= len(outcomes)
        finally:
            await listener.aclose()
            await store.close()

    asyncio.run(main())
