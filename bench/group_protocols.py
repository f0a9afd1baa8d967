"""The cost of one rebalance under the two group protocols, with oncestream's own Consumer on our
broker: ``classic`` (JoinGroup/SyncGroup, the eager range assignor) against ``consumer``
(KIP-848: coordinator-side assignment, incremental reconciliation).

A group of ``--members`` consumers shares a ``--partitions``-partition topic and has settled (its
members together own every partition exactly once, each owning some). Then one more member
subscribes, and two figures are taken from the members' own rebalance callbacks:

(a) time to settle: from the new member's subscribe() until the group has settled again with the
    new member owning partitions (the callback completing that split);
(b) pause of kept partitions: for the partitions a member owned before and still owns after, the
    longest time one of them was not assigned to it (revoked until assigned again; 0 if never
    revoked). Under the eager classic protocol every partition is revoked at each rebalance;
    under KIP-848 a kept partition is never revoked.

Both protocols heartbeat every 250 ms (classic: heartbeat.interval.ms; consumer:
group.consumer.heartbeat.interval.ms), so the figures compare the protocols, not heartbeat
settings; group.initial.rebalance.delay.ms=0. Rounds alternate (classic, consumer, classic, ...),
each with a fresh topic and group on one broker; medians over the rounds are printed.

    .venv/bin/python bench/group_protocols.py                 # 3 rounds per protocol
    .venv/bin/python bench/group_protocols.py --rounds 5 --members 4 --partitions 8

This is a benchmark command, not a test.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from machine import machine_description
from oncestream.broker_process import OnceStreamBroker
from oncestream.client import Consumer

BROKER_CONFIG = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "group.consumer.heartbeat.interval.ms": "250",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.session.timeout.ms": "10000",
    "group.consumer.min.session.timeout.ms": "1000",
}
CLASSIC_CONF = {"partition.assignment.strategy": "range", "session.timeout.ms": 10_000, "heartbeat.interval.ms": 250}
SETTLE_TIMEOUT_S = 60.0
POLL_S = 0.01


class Member:
    """One consumer polling on its thread; its callbacks log (monotonic time, kind, partitions)."""

    def __init__(self, bootstrap: str, group: str, topic: str, protocol: str) -> None:
        conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
                                "enable.auto.commit": False, "auto.offset.reset": "earliest"}
        if protocol == "classic":
            conf.update(CLASSIC_CONF)
        self.conf, self.topic = conf, topic
        self.lock = threading.Lock()
        self.owned: set[int] = set()
        self.events: list[tuple[float, str, frozenset[int]]] = []
        self.subscribed_at = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _callback(self, kind: str) -> Any:
        def callback(_consumer: Any, partitions: list[Any]) -> None:
            changed = frozenset(tp.partition for tp in partitions)
            with self.lock:
                self.events.append((time.monotonic(), kind, changed))
                self.owned = self.owned | changed if kind == "assign" else self.owned - changed
        return callback

    def _run(self) -> None:
        consumer = Consumer(self.conf)
        self.subscribed_at = time.monotonic()
        consumer.subscribe([self.topic], on_assign=self._callback("assign"), on_revoke=self._callback("revoke"),
                           on_lost=self._callback("revoke"))
        try:
            while not self._stop.is_set():
                consumer.poll(POLL_S)
        finally:
            consumer.close()

    def start(self) -> Member:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def join(self) -> None:
        self._thread.join(30)

    def snapshot(self) -> set[int]:
        with self.lock:
            return set(self.owned)


def settled(members: list[Member], partitions: int) -> bool:
    owned = [m.snapshot() for m in members]
    return all(owned) and sorted(p for o in owned for p in o) == list(range(partitions))


def wait_settled(members: list[Member], partitions: int) -> float:
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while not settled(members, partitions):
        if time.monotonic() > deadline:
            raise RuntimeError(f"group did not settle: {[sorted(m.snapshot()) for m in members]}")
        time.sleep(0.005)
    return max(t for m in members for t, kind, _ in m.events if kind == "assign")


def kept_pause_s(member: Member, since: float, before: set[int], after: set[int]) -> float:
    """The longest time a partition the member kept was not assigned to it after ``since``."""
    longest = 0.0
    for partition in before & after:
        revoked_at = None
        for at, kind, changed in member.events:
            if at < since or partition not in changed:
                continue
            if kind == "revoke":
                revoked_at = at
            elif revoked_at is not None:
                longest = max(longest, at - revoked_at)
                revoked_at = None
    return longest


def one_round(bootstrap: str, protocol: str, members: int, partitions: int) -> tuple[float, float]:
    topic = f"bench-protocols-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)]).values():
        future.result(30)
    group = f"bench-{protocol}-{uuid.uuid4().hex[:8]}"
    group_members = [Member(bootstrap, group, topic, protocol).start() for _ in range(members)]
    joiner: Member | None = None
    try:
        wait_settled(group_members, partitions)
        time.sleep(1.0)  # let the last heartbeats of the first settling pass
        before = [m.snapshot() for m in group_members]
        joiner = Member(bootstrap, group, topic, protocol).start()
        everyone = [*group_members, joiner]
        while not joiner.subscribed_at:
            time.sleep(0.001)
        settled_at = wait_settled(everyone, partitions)
        time.sleep(0.5)
        pause = max(kept_pause_s(m, joiner.subscribed_at, b, m.snapshot()) for m, b in zip(group_members, before))
        return settled_at - joiner.subscribed_at, pause
    finally:
        everyone = group_members + ([joiner] if joiner is not None else [])
        for m in everyone:
            m.stop()
        for m in everyone:
            m.join()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--partitions", type=int, default=8)
    args = parser.parse_args(argv)
    results: dict[str, list[tuple[float, float]]] = {"classic": [], "consumer": []}
    with tempfile.TemporaryDirectory(prefix="bench-protocols-") as work:
        broker = OnceStreamBroker(data_dir=Path(work) / "data", config=BROKER_CONFIG, log_dir=Path(work) / "logs")
        broker.start()
        try:
            for round_no in range(args.rounds):
                for protocol in ("classic", "consumer"):
                    settle_s, pause_s = one_round(broker.bootstrap, protocol, args.members, args.partitions)
                    results[protocol].append((settle_s, pause_s))
                    print(f"round {round_no + 1} {protocol:8}: settled in {settle_s * 1000:7.1f} ms, "
                          f"kept partitions paused up to {pause_s * 1000:7.1f} ms", flush=True)
        finally:
            broker.stop()
    print()
    print(f"{args.members} members + 1 joining, {args.partitions} partitions, {args.rounds} rounds; "
          f"{machine_description()}")
    print("| protocol | time to settle (median) | longest pause of a kept partition (median) |")
    print("|---|---|---|")
    for protocol, rows in results.items():
        print(f"| {protocol} | {statistics.median(r[0] for r in rows) * 1000:.0f} ms | "
              f"{statistics.median(r[1] for r in rows) * 1000:.0f} ms |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
