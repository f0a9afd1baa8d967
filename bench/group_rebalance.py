"""A member joins a 3-member group while records flow: classic vs KIP-848 consumer protocol.

One broker (ours), one 8-partition topic, a producer writing one record to every partition every
``--interval-ms`` (10 ms by default), and librdkafka consumers (confluent-kafka) in threads of this
process. Three members are formed and consume steadily; then a fourth subscribes. Per protocol:

* **settle**: from the fourth member's ``subscribe()`` until the four members hold a disjoint split
  covering all 8 partitions, each non-empty (the moment the last assign callback completing it runs);
* **pause of the partitions that stayed**: for every partition owned by the same member before the
  join and after settling, the longest gap between two consecutive records that member received from
  it, from the last record before the join to 0.5 s after settling. The steady-state gap is the
  produce interval, so anything above it is time the partition was not fetched.

Protocols compared, alternated round by round on one broker process:

* ``classic-eager``: the classic protocol with the ``range`` assignor: every member revokes every
  partition at each rebalance (stop-the-world);
* ``classic-cooperative``: the classic protocol with ``cooperative-sticky`` (KIP-429): only moved
  partitions are revoked, but a rebalance takes two JoinGroup/SyncGroup rounds;
* ``consumer``: the KIP-848 protocol (``group.protocol=consumer``), server-side ``uniform`` assignor.

Timing is made comparable: classic members heartbeat every 100 ms (``heartbeat.interval.ms``), and
the broker's ``group.consumer.heartbeat.interval.ms`` is 100 ms as well (its minimum lowered to
match), since a KIP-848 member learns of a new target assignment at its next heartbeat as a
classic member learns of a rebalance; ``group.initial.rebalance.delay.ms=0``.

    .venv/bin/python bench/group_rebalance.py                  # 3 rounds per protocol
    .venv/bin/python bench/group_rebalance.py --write-docs     # also rewrite its docs section

This is a benchmark command, not a test.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import os
import platform
import shlex
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import confluent_kafka
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka import libversion as librdkafka_version

from groups import create_topic, write_docs_section
from machine import machine_description
from oncestream.broker_process import OnceStreamBroker

DOCS_HEADING = "## Consumer group protocols: a member joins while records flow (bench/group_rebalance.py)"
PARTITIONS = 8
HEARTBEAT_MS = 100
BROKER_CONFIG = {
    "group.initial.rebalance.delay.ms": "0",
    "group.consumer.heartbeat.interval.ms": str(HEARTBEAT_MS),
    "group.consumer.min.heartbeat.interval.ms": str(HEARTBEAT_MS),
    "group.consumer.session.timeout.ms": "10000",
    "group.consumer.min.session.timeout.ms": "10000",
}
CLASSIC_CONF = {"session.timeout.ms": 10_000, "heartbeat.interval.ms": HEARTBEAT_MS}
PROTOCOLS: dict[str, dict[str, object]] = {
    "classic-eager": {**CLASSIC_CONF, "partition.assignment.strategy": "range"},
    "classic-cooperative": {**CLASSIC_CONF, "partition.assignment.strategy": "cooperative-sticky"},
    "consumer": {"group.protocol": "consumer"},
}
SETTLE_TIMEOUT_S = 60.0
TAIL_S = 0.5


class Member:
    """One consumer in its own thread: its assignment (kept from the rebalance callbacks) and the
    receive time of every record, per partition."""

    def __init__(self, bootstrap: str, group_id: str, topic: str, protocol: str) -> None:
        self.topic = topic
        self.incremental = protocol != "classic-eager"
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group_id,
                                  "enable.auto.commit": False, "auto.offset.reset": "latest",
                                  **PROTOCOLS[protocol]})
        self.lock = threading.Lock()
        self.assignment: set[int] = set()
        self.assigned_at = 0.0
        self.received: dict[int, list[float]] = {p: [] for p in range(PARTITIONS)}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.subscribe_now = threading.Event()

    def _on_assign(self, _c: Consumer, partitions: list[TopicPartition]) -> None:
        now = time.perf_counter()
        with self.lock:
            if not self.incremental:
                self.assignment = set()
            self.assignment |= {tp.partition for tp in partitions}
            self.assigned_at = now

    def _on_revoke(self, _c: Consumer, partitions: list[TopicPartition]) -> None:
        with self.lock:
            if self.incremental:
                self.assignment -= {tp.partition for tp in partitions}
            else:
                self.assignment = set()

    def _run(self) -> None:
        self.subscribe_now.wait()
        self.consumer.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_revoke)
        while not self.stop.is_set():
            msg = self.consumer.poll(0.005)
            if msg is not None and msg.error() is None:
                partition = msg.partition()
                if partition is not None:
                    self.received[partition].append(time.perf_counter())

    def start(self) -> float:
        """Start the thread and subscribe now; returns the subscribe time."""
        self.thread.start()
        at = time.perf_counter()
        self.subscribe_now.set()
        return at

    def snapshot(self) -> tuple[frozenset[int], float]:
        """The current assignment and when the last assign callback ran."""
        with self.lock:
            return frozenset(self.assignment), self.assigned_at

    def close(self) -> None:
        """Stop polling and leave the group."""
        self.stop.set()
        self.thread.join(30)
        self.consumer.close()


def wait_split(members: list[Member], what: str) -> float:
    """The time the members first hold a disjoint, complete split, each member non-empty."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        snaps = [m.snapshot() for m in members]
        parts = [s[0] for s in snaps]
        union: set[int] = set().union(*parts)
        if all(parts) and sum(len(p) for p in parts) == PARTITIONS and union == set(range(PARTITIONS)):
            return max(at for _, at in snaps)
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: no complete split after {SETTLE_TIMEOUT_S} s: {parts}")
        time.sleep(0.001)


class Flow:
    """One record to every partition every ``interval_s``, until stopped."""

    def __init__(self, bootstrap: str, topic: str, interval_s: float) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1})
        self.topic, self.interval_s = topic, interval_s
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        next_at = time.perf_counter()
        while not self.stop.is_set():
            for p in range(PARTITIONS):
                self.producer.produce(self.topic, b"x", partition=p)
            self.producer.poll(0)
            next_at += self.interval_s
            time.sleep(max(0.0, next_at - time.perf_counter()))
        self.producer.flush(30)

    def __enter__(self) -> Flow:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        self.thread.join(30)


@dataclass
class Outcome:
    """One protocol's figures in one round."""

    protocol: str
    round_no: int
    settle_s: float
    pauses_s: list[float] = field(default_factory=list)  # one per partition that stayed
    steady_gap_s: float = 0.0

    @property
    def max_pause_s(self) -> float:
        """The longest pause of any partition that stayed (0 when none stayed)."""
        return max(self.pauses_s, default=0.0)


def longest_gap(times: list[float], start: float, end: float) -> float:
    """The longest gap between consecutive receive times, counting from the last one before
    ``start`` (or ``start``) up to ``end`` (an open tail counts as a gap to ``end``)."""
    before = [t for t in times if t < start]
    inside = [t for t in times if start <= t <= end]
    points = ([before[-1]] if before else [start]) + inside
    gaps = [b - a for a, b in itertools.pairwise(points)]
    gaps.append(end - points[-1])
    return max(gaps)


def run_protocol(bootstrap: str, protocol: str, round_no: int, interval_s: float) -> Outcome:
    """Form a 3-member group on a fresh topic with records flowing, add a fourth, measure."""
    topic = f"bench-rebalance-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, PARTITIONS)
    group_id = f"bench-{protocol}-{uuid.uuid4().hex[:8]}"
    members = [Member(bootstrap, group_id, topic, protocol) for _ in range(4)]
    try:
        with Flow(bootstrap, topic, interval_s):
            for m in members[:3]:
                m.start()
            wait_split(members[:3], f"{protocol}: 3 members")
            time.sleep(1.0)  # steady consumption before the join
            before = {p: i for i, m in enumerate(members[:3]) for p in m.snapshot()[0]}
            joined_at = members[3].start()
            settled_at = wait_split(members, f"{protocol}: 4 members")
            time.sleep(TAIL_S + 0.2)
            after = {p: i for i, m in enumerate(members) for p in m.snapshot()[0]}
        kept = [p for p, owner in before.items() if after.get(p) == owner]
        pauses = [longest_gap(members[before[p]].received[p], joined_at, settled_at + TAIL_S) for p in kept]
        steady = []
        for m in members[:3]:
            for times in m.received.values():
                window = [t for t in times if joined_at - 0.8 <= t < joined_at]
                steady += [b - a for a, b in itertools.pairwise(window)]
        return Outcome(protocol, round_no, settled_at - joined_at, pauses,
                       statistics.median(steady) if steady else 0.0)
    finally:
        for m in members:
            m.close()


def markdown_section(results: list[Outcome], args: argparse.Namespace, command: str,
                     load_before: tuple[float, float, float]) -> str:
    """The docs/benchmarks.md section."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    version = confluent_kafka.version()
    lines = [
        DOCS_HEADING, "",
        "```sh", ".venv/bin/python bench/group_rebalance.py --write-docs", "```", "",
        "**Method** (module docstring of `bench/group_rebalance.py`): one broker of ours, an",
        f"{PARTITIONS}-partition topic with one record per partition every {args.interval_ms} ms, three",
        "librdkafka members consuming steadily, then a fourth subscribes. *Settle*: from its",
        "`subscribe()` to the assign callback completing a disjoint split of all partitions over four",
        "non-empty members. *Pause*: for each partition that kept its owner, the longest gap between",
        "two records the owner received, from the last one before the join to 0.5 s after settling;",
        "the steady gap is the produce interval. Heartbeats every 100 ms on both protocols.",
        "",
        f"Command: `{command}`  ",
        f"Date: {now}  ",
        f"Machine: {machine_description()}  ",
        f"Load average (1/5/15 min) before: {' / '.join(f'{x:.2f}' for x in load_before)},"
        f" after: {' / '.join(f'{x:.2f}' for x in os.getloadavg())}  ",
        f"Clients: confluent-kafka {version[0] if isinstance(version, tuple) else version}"
        f" (librdkafka {librdkafka_version()[0]}), Python {platform.python_version()}",
        "",
        "| round | protocol | settle ms | partitions that stayed | their longest pause ms | median pause ms | steady gap ms |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        median_pause = statistics.median(r.pauses_s) * 1000 if r.pauses_s else 0.0
        lines.append(f"| {r.round_no} | {r.protocol} | {r.settle_s * 1000:.0f} | {len(r.pauses_s)} |"
                     f" {r.max_pause_s * 1000:.0f} | {median_pause:.0f} | {r.steady_gap_s * 1000:.1f} |")
    lines += ["", "| protocol | median settle ms | median of the longest pause ms |", "| --- | ---: | ---: |"]
    for protocol in dict.fromkeys(r.protocol for r in results):
        mine = [r for r in results if r.protocol == protocol]
        lines.append(f"| {protocol} | {statistics.median(r.settle_s for r in mine) * 1000:.0f} |"
                     f" {statistics.median(r.max_pause_s for r in mine) * 1000:.0f} |")
    lines += ["", "Reading it: a pause equal to the steady gap means the partition was never stopped. Under",
              "`classic-eager` every member gives up every partition and waits in JoinGroup for the",
              "others, so even partitions that end with the same owner stop; `classic-cooperative`",
              "keeps them fetching but needs two rebalance rounds to move the others; under the",
              "KIP-848 `consumer` protocol the coordinator moves only what must move and the new",
              "member is served at its next heartbeats."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Alternate the protocols on one broker for ``--rounds`` rounds; print or write the section."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--protocols", default=",".join(PROTOCOLS))
    parser.add_argument("--interval-ms", type=int, default=10)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args(argv)
    protocols = [p.strip() for p in args.protocols.split(",") if p.strip()]
    unknown = [p for p in protocols if p not in PROTOCOLS]
    if unknown:
        parser.error(f"unknown protocols {unknown}; known: {list(PROTOCOLS)}")
    command = shlex.join([".venv/bin/python", "bench/group_rebalance.py", *(sys.argv[1:] if argv is None else argv)])
    load_before = os.getloadavg()
    results: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="oncestream-bench-rebalance-") as work:
        broker = OnceStreamBroker(data_dir=Path(work) / "data", config=BROKER_CONFIG,
                                  log_dir=Path(work) / "logs").start()
        try:
            for round_no in range(1, args.rounds + 1):
                for protocol in protocols:
                    r = run_protocol(broker.bootstrap, protocol, round_no, args.interval_ms / 1000)
                    results.append(r)
                    print(f"round {round_no} {protocol:20s} settle {r.settle_s * 1000:6.0f} ms,"
                          f" {len(r.pauses_s)} partitions stayed, longest pause {r.max_pause_s * 1000:6.0f} ms"
                          f" (steady gap {r.steady_gap_s * 1000:.1f} ms)", flush=True)
        finally:
            broker.stop()
    section = markdown_section(results, args, command, load_before)
    if args.write_docs:
        write_docs_section(section, DOCS_HEADING)
        print("wrote the section to docs/benchmarks.md")
    else:
        print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
