"""Consumer-group coordination of oncestream against Tansu, side by side, with librdkafka.

Two figures, in alternating rounds (ours, tansu, ours, tansu, ...), each round on a freshly
started broker and a fresh topic, the same client code for both brokers:

(a) time to Stable: a fresh group, two librdkafka consumers created beforehand, both subscribe at
    the same instant; the clock runs from the subscribe() calls until both consumers hold a
    non-empty assignment that together covers the topic's 4 partitions exactly once (the moment
    the last assign callback completing that split runs). Several groups per round; the round's
    figure is their median.
(b) OffsetCommit throughput: one consumer that has joined a group (so commits carry its member
    id and generation) commits an increasing offset synchronously (commit(asynchronous=False))
    N times; commits per second over the whole loop. The final committed offset is checked.

Our broker runs with group.initial.rebalance.delay.ms=0 (Kafka's default 3000 ms would dominate
(a)); Tansu has no such setting and runs with its defaults. Consumers use the range assignor
(eager), session.timeout.ms=10000 and heartbeat.interval.ms=100: with librdkafka's default
3000 ms heartbeat, (a) would mostly measure how long the first member takes to hear about the
second one, not the broker.

    .venv/bin/python bench/groups.py                    # 5 rounds per broker
    .venv/bin/python bench/groups.py --brokers ours     # harness check against ours only
    .venv/bin/python bench/groups.py --write-docs       # also write the section of docs/benchmarks.md

This is a benchmark command, not a test.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka import libversion as librdkafka_version
from confluent_kafka.admin import AdminClient, NewTopic

from machine import machine_description
from oncestream.broker_process import ManagedBroker, OnceStreamBroker, TansuBroker, tansu_executable

REPO_ROOT = Path(__file__).resolve().parent.parent

DOCS_PATH = REPO_ROOT / "docs" / "benchmarks.md"
DOCS_HEADING = "## Consumer groups: time to Stable and OffsetCommit throughput (librdkafka)"
PARTITIONS = 4
OUR_CONFIG = {"group.initial.rebalance.delay.ms": "0"}
CONSUMER_CONF = {
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "partition.assignment.strategy": "range",
    "session.timeout.ms": 10_000,
    "heartbeat.interval.ms": 100,
}
STABLE_TIMEOUT_S = 60.0
POLL_S = 0.005


# ----------------------------------------------------------------------------------------------
# Brokers


def start_broker(name: str, work_dir: Path) -> ManagedBroker:
    """A fresh broker: ours (data dir under ``work_dir``) or Tansu (memory storage)."""
    base = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=work_dir))
    broker: ManagedBroker
    if name == "ours":
        broker = OnceStreamBroker(data_dir=base / "data", config=OUR_CONFIG, log_dir=base / "logs")
    elif name == "tansu":
        broker = TansuBroker(log_dir=base / "logs")
    else:
        raise ValueError(f"unknown broker {name!r}")
    return broker.start()


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """CreateTopics, then wait until Metadata shows every partition with a leader."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                        operation_timeout=30)[topic].result(timeout=60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        meta = admin.list_topics(topic, timeout=10).topics.get(topic)
        if meta is not None and meta.error is None and len(meta.partitions) == partitions:
            return
        time.sleep(0.05)
    raise RuntimeError(f"topic {topic} not visible with {partitions} partitions")


# ----------------------------------------------------------------------------------------------
# (a) time to Stable


class _Member:
    """A consumer whose assign/revoke callbacks record the time and the partitions."""

    def __init__(self, bootstrap: str, group_id: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group_id,
                                  **CONSUMER_CONF})
        self.lock = threading.Lock()
        self.assignment: frozenset[int] = frozenset()
        self.assigned_at = 0.0

    def on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        now = time.perf_counter()
        with self.lock:
            self.assignment = frozenset(tp.partition for tp in partitions)
            self.assigned_at = now

    def on_revoke(self, _consumer: Consumer, _partitions: list[TopicPartition]) -> None:
        with self.lock:
            self.assignment = frozenset()


def time_to_stable(bootstrap: str, topic: str) -> float:
    """Seconds from both subscribe() calls to a complete split between the two members."""
    group_id = f"bench-stable-{uuid.uuid4().hex[:8]}"
    members = [_Member(bootstrap, group_id) for _ in range(2)]
    stop = threading.Event()
    start_gate = threading.Barrier(3)

    def run(member: _Member) -> None:
        start_gate.wait()
        member.consumer.subscribe([topic], on_assign=member.on_assign, on_revoke=member.on_revoke)
        while not stop.is_set():
            member.consumer.poll(POLL_S)

    threads = [threading.Thread(target=run, args=(m,), daemon=True) for m in members]
    for thread in threads:
        thread.start()
    started = time.perf_counter()
    start_gate.wait()
    try:
        deadline = time.monotonic() + STABLE_TIMEOUT_S
        while True:
            snapshot = []
            for m in members:
                with m.lock:
                    snapshot.append((m.assignment, m.assigned_at))
            a, b = snapshot[0][0], snapshot[1][0]
            if a and b and not (a & b) and (a | b) == set(range(PARTITIONS)):
                return max(at for _, at in snapshot) - started
            if time.monotonic() > deadline:
                raise RuntimeError(f"group never became Stable: {snapshot}")
            time.sleep(0.001)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
        for m in members:
            m.consumer.close()


def lone_join(bootstrap: str, topic: str) -> float:
    """Seconds from subscribe() to the assignment of a single consumer in a fresh group: what
    the broker adds to a group's first join when nobody else is coming."""
    member = _Member(bootstrap, f"bench-lone-{uuid.uuid4().hex[:8]}")
    try:
        started = time.perf_counter()
        member.consumer.subscribe([topic], on_assign=member.on_assign, on_revoke=member.on_revoke)
        deadline = time.monotonic() + STABLE_TIMEOUT_S
        while not member.assignment:
            if time.monotonic() > deadline:
                raise RuntimeError("a lone consumer never got an assignment")
            member.consumer.poll(POLL_S)
        return member.assigned_at - started
    finally:
        member.consumer.close()


# ----------------------------------------------------------------------------------------------
# (b) OffsetCommit throughput


def commit_throughput(bootstrap: str, topic: str, commits: int) -> float:
    """Synchronous commits per second from one joined consumer."""
    group_id = f"bench-commit-{uuid.uuid4().hex[:8]}"
    member = _Member(bootstrap, group_id)
    consumer = member.consumer
    try:
        consumer.subscribe([topic], on_assign=member.on_assign, on_revoke=member.on_revoke)
        deadline = time.monotonic() + STABLE_TIMEOUT_S
        while not member.assignment:
            if time.monotonic() > deadline:
                raise RuntimeError("the committing consumer never got an assignment")
            consumer.poll(0.05)
        partition = min(member.assignment)
        started = time.perf_counter()
        for offset in range(1, commits + 1):
            result = consumer.commit(offsets=[TopicPartition(topic, partition, offset)],
                                     asynchronous=False)
            if result is not None and result[0].error is not None:
                raise RuntimeError(f"commit {offset} failed: {result[0].error}")
        elapsed = time.perf_counter() - started
        [committed] = consumer.committed([TopicPartition(topic, partition)], timeout=30)
        if committed.offset != commits:
            raise RuntimeError(f"committed offset {committed.offset}, expected {commits}")
        return commits / elapsed
    finally:
        consumer.close()


# ----------------------------------------------------------------------------------------------
# Rounds and report


@dataclass
class RoundResult:
    """One broker's figures in one round."""

    broker: str
    round_no: int
    lone_join_s: float
    stable_s: list[float]
    commits_per_s: float

    @property
    def stable_median_s(self) -> float:
        """Median time to Stable over this round's groups."""
        return statistics.median(self.stable_s)


def run_round(name: str, round_no: int, args: argparse.Namespace, work_dir: Path) -> RoundResult:
    """Start a fresh broker, measure (a) then (b), stop it."""
    broker = start_broker(name, work_dir)
    try:
        topic = f"bench-groups-{uuid.uuid4().hex[:8]}"
        create_topic(broker.bootstrap, topic, PARTITIONS)
        lone = lone_join(broker.bootstrap, topic)
        stable = [time_to_stable(broker.bootstrap, topic) for _ in range(args.groups)]
        rate = commit_throughput(broker.bootstrap, topic, args.commits)
    finally:
        broker.stop()
    return RoundResult(name, round_no, lone, stable, rate)




def client_version() -> str:
    """confluent-kafka's version string (``version()`` is a string or a (string, int) pair)."""
    found = confluent_kafka.version()
    return found[0] if isinstance(found, tuple) else str(found)


def tansu_version() -> str:
    """``tansu --version``."""
    try:
        out = subprocess.run([tansu_executable(), "--version"], capture_output=True, text=True,
                             timeout=10)
        return out.stdout.strip() or "tansu"
    except (OSError, subprocess.TimeoutExpired):
        return "tansu"


def markdown_section(results: list[RoundResult], args: argparse.Namespace, command: str,
                     load_before: tuple[float, float, float]) -> str:
    """The docs/benchmarks.md section: method, per-round table, medians, ratios."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        DOCS_HEADING,
        "",
        "```sh",
        ".venv/bin/python bench/groups.py --write-docs     # 5 rounds per broker; rewrites this section",
        ".venv/bin/python bench/groups.py --help           # options",
        "```",
        "",
        "**Method.** `bench/groups.py` alternates fresh brokers (ours, Tansu, ours, ...) with the same",
        "librdkafka code for both, on a 4-partition topic. *Time to Stable*: a fresh group, two",
        "consumers created beforehand, both `subscribe()` at the same instant; the clock stops at",
        "the assign callback that completes a disjoint split of the 4 partitions between them",
        f"(median of {args.groups} groups per round). *Lone join*: one consumer created and",
        "subscribed at once (so FindCoordinator and connecting are inside) in a fresh group, once",
        "per round: what the broker adds when nobody else is coming. *OffsetCommit throughput*: one consumer that has",
        f"joined a group commits an increasing offset synchronously {args.commits} times (one",
        "OffsetCommit round trip each, carrying its member id and generation); the final",
        "committed offset is checked. Consumers: range assignor, `session.timeout.ms=10000`,",
        "`heartbeat.interval.ms=100` (with the default 3000 ms the first member would mostly be",
        "waiting for its next heartbeat to hear about the second). Ours runs with",
        "`group.initial.rebalance.delay.ms=0`, otherwise default config, data dir in /tmp;",
        f"{tansu_version()} runs with `memory://` storage and its defaults (its `broker` command",
        "has no option for group timing). Client and brokers share the machine's 2 cores, and",
        "the machine is shared with other work: compare ratios within one run.",
        "",
        f"Command: `{command}`  ",
        f"Date: {now}  ",
        f"Machine: {machine_description()}  ",
        f"Load average (1/5/15 min) before: {' / '.join(f'{x:.2f}' for x in load_before)},"
        f" after: {' / '.join(f'{x:.2f}' for x in os.getloadavg())}  ",
        f"Clients: confluent-kafka {client_version()} (librdkafka {librdkafka_version()[0]}),"
        f" Python {platform.python_version()}",
        "",
        "| round | broker | lone join ms | time to Stable, median ms | min ms | max ms | commits/s |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        lines.append(
            f"| {r.round_no} | {r.broker} | {r.lone_join_s * 1000:.1f} | {r.stable_median_s * 1000:.1f} |"
            f" {min(r.stable_s) * 1000:.1f} | {max(r.stable_s) * 1000:.1f} |"
            f" {r.commits_per_s:.0f} |"
        )
    medians = summary(results)
    lines += ["", "| broker | median time to Stable ms | median commits/s |",
              "| --- | ---: | ---: |"]
    for name, (stable_s, rate) in medians.items():
        lines.append(f"| {name} | {stable_s * 1000:.1f} | {rate:.0f} |")
    if "ours" in medians and "tansu" in medians:
        stable_ratio = medians["ours"][0] / medians["tansu"][0]
        rate_ratio = medians["ours"][1] / medians["tansu"][1]
        lines += ["", f"Median ratio ours/Tansu: time to Stable **{stable_ratio:.2f}** (lower is"
                      f" better), commits/s **{rate_ratio:.2f}** (higher is better)"]
        lone = {name: statistics.median(r.lone_join_s for r in results if r.broker == name)
                for name in ("ours", "tansu")}
        lines += ["", f"Tansu's behaviour: a lone consumer waits a median {lone['tansu'] * 1000:.0f} ms"
                      f" for its first assignment (ours: {lone['ours'] * 1000:.0f} ms), so Tansu holds"
                      " the first JoinGroup of a group for a fixed delay, as Kafka does with"
                      " group.initial.rebalance.delay.ms (3000 ms by default), and that delay, not"
                      " the protocol work, is its time to Stable. With our delay at 0 a join phase"
                      " completes as soon as every known member has joined; when the second"
                      " consumer arrives after the first formed a generation alone, one rebalance"
                      " follows, which the first learns of at its next heartbeat (100 ms here)."]
    return "\n".join(lines) + "\n"


def summary(results: list[RoundResult]) -> dict[str, tuple[float, float]]:
    """broker -> (median time to Stable in s over all groups, median commits/s over rounds)."""
    out: dict[str, tuple[float, float]] = {}
    for name in dict.fromkeys(r.broker for r in results):
        mine = [r for r in results if r.broker == name]
        out[name] = (
            statistics.median(s for r in mine for s in r.stable_s),
            statistics.median(r.commits_per_s for r in mine),
        )
    return out


def write_docs_section(section: str, heading: str = DOCS_HEADING) -> None:
    """Replace the section under ``heading`` (this benchmark's by default) of docs/benchmarks.md,
    or append it; the rest of the file (other benchmarks' sections) is kept byte for byte."""
    text = DOCS_PATH.read_text() if DOCS_PATH.exists() else "# Benchmarks\n"
    start = text.find(heading)
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = text.find("\n## ", start + len(heading))
        tail = "" if end < 0 else text[end:]
        text = text[:start] + section + tail
    DOCS_PATH.write_text(text)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", default="ours,tansu",
                        help="comma-separated, alternated in this order each round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per broker (default: 5)")
    parser.add_argument("--groups", type=int, default=5,
                        help="groups formed per round for time to Stable (default: 5)")
    parser.add_argument("--commits", type=int, default=2000,
                        help="synchronous commits per round (default: 2000)")
    parser.add_argument("--write-docs", action="store_true",
                        help=f"write (or rewrite) the '{DOCS_HEADING[3:]}' section of docs/benchmarks.md")
    args = parser.parse_args(argv)
    args.broker_names = [b.strip() for b in args.brokers.split(",") if b.strip()]
    if any(name not in ("ours", "tansu") for name in args.broker_names):
        parser.error("--brokers takes ours and/or tansu")
    if min(args.rounds, args.groups, args.commits) < 1:
        parser.error("--rounds, --groups and --commits must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the alternating rounds, print per-round figures and medians, optionally write docs."""
    args = parse_args(argv)
    command = shlex.join([".venv/bin/python", "bench/groups.py",
                          *(sys.argv[1:] if argv is None else argv)])
    load_before = os.getloadavg()
    results: list[RoundResult] = []
    with tempfile.TemporaryDirectory(prefix="oncestream-bench-groups-") as work:
        for round_no in range(1, args.rounds + 1):
            for name in args.broker_names:
                r = run_round(name, round_no, args, Path(work))
                results.append(r)
                print(f"round {round_no} {name:5s}: lone join {r.lone_join_s * 1000:7.1f} ms,"
                      f" time to Stable median"
                      f" {r.stable_median_s * 1000:7.1f} ms (min {min(r.stable_s) * 1000:.1f},"
                      f" max {max(r.stable_s) * 1000:.1f})  commits {r.commits_per_s:7.0f}/s",
                      flush=True)
    medians = summary(results)
    print()
    for name, (stable_s, rate) in medians.items():
        print(f"{name:5s}: median time to Stable {stable_s * 1000:.1f} ms, median {rate:.0f} commits/s")
    if "ours" in medians and "tansu" in medians:
        print(f"median ratio ours/tansu: time to Stable {medians['ours'][0] / medians['tansu'][0]:.2f}"
              f" (lower is better), commits/s {medians['ours'][1] / medians['tansu'][1]:.2f}")
    section = markdown_section(results, args, command, load_before)
    if args.write_docs:
        write_docs_section(section)
        print(f"\nwrote the section to {DOCS_PATH}")
    else:
        print()
        print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
