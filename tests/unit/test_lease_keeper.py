"""LeaseKeeper without PostgreSQL: loads what a round holds, reloads on a new epoch, hands off
surplus, and unloads everything once no round succeeded for a session timeout."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from oncestream.cluster.leases.coordinator_leases import Lease, LeaseRound
from oncestream.cluster.leases.lease_keeper import LeaseKeeper

ME = uuid.uuid4()


class FakeLeases:
    """Answers rounds from a scripted table; ``down`` makes every call fail like PostgreSQL away."""

    def __init__(self) -> None:
        self.held: dict[str, int] = {}
        self.surplus: frozenset[str] = frozenset()
        self.released: list[frozenset[str] | None] = []
        self.down = False

    async def acquire(self, me: Any, resources: Any) -> LeaseRound:
        if self.down:
            raise OSError("PostgreSQL is unreachable")
        held = {r: Lease(r, e, 1, ME) for r, e in self.held.items()}
        return LeaseRound(held, self.surplus, {r: 1 for r in held}, (1, 2))

    async def release(self, me: Any, resources: Any = None) -> None:
        self.released.append(None if resources is None else frozenset(resources))
        for r in list(self.held) if resources is None else resources:
            self.held.pop(r, None)


class Partitions:
    topic_name = "__consumer_offsets"
    num_partitions = 3

    def __init__(self) -> None:
        self.events: list[tuple[str, int, int]] = []

    async def load_partition(self, partition: int, lease: Lease) -> None:
        self.events.append(("load", partition, lease.epoch))

    def unload_partition(self, partition: int) -> None:
        self.events.append(("unload", partition, 0))


class Me:
    node_id = 1
    incarnation = ME


def test_rounds_load_reload_and_hand_off() -> None:
    async def main() -> None:
        leases, parts = FakeLeases(), Partitions()
        keeper = LeaseKeeper(leases, Me(), [parts], interval_ms=10, session_timeout_ms=1000)  # type: ignore[arg-type]
        leases.held = {"__consumer_offsets/0": 1, "__consumer_offsets/1": 1}
        await keeper.run_round()
        assert parts.events == [("load", 0, 1), ("load", 1, 1)]
        leases.held["__consumer_offsets/1"] = 3  # lost and taken back between rounds
        await keeper.run_round()
        assert parts.events[2:] == [("unload", 1, 0), ("load", 1, 3)]
        leases.surplus = frozenset({"__consumer_offsets/0"})  # a broker joined and prefers it
        await keeper.run_round()
        assert parts.events[4:] == [("unload", 0, 0)]
        assert leases.released == [frozenset({"__consumer_offsets/0"})]
        assert set(keeper.loaded) == {"__consumer_offsets/1"}
        assert keeper.coordinator_node("__consumer_offsets", 1) == 1

    asyncio.run(main())


def test_a_keeper_cut_off_from_postgresql_unloads_after_a_session_timeout() -> None:
    async def main() -> None:
        leases, parts = FakeLeases(), Partitions()
        now = [0]
        keeper = LeaseKeeper(leases, Me(), [parts], interval_ms=10, session_timeout_ms=1000,  # type: ignore[arg-type]
                             mono_ms=lambda: now[0])
        leases.held = {"__consumer_offsets/2": 1}
        await keeper.run_round()  # the last good round, at monotonic 0
        leases.down = True
        runner = asyncio.get_running_loop().create_task(keeper.run())
        try:
            async with asyncio.timeout(10):
                now[0] = 999  # not yet a session timeout since the last good round: still served
                for _ in range(5):
                    keeper.wake()
                    await asyncio.sleep(0.02)
                assert set(keeper.loaded) == {"__consumer_offsets/2"}
                now[0] = 1000
                while keeper.loaded:
                    keeper.wake()
                    await asyncio.sleep(0.01)
        finally:
            runner.cancel()
        assert parts.events[-1] == ("unload", 2, 0)

    asyncio.run(main())
