"""Exactly-once consume-transform-produce on a three-broker cluster through SIGKILLs of the broker
that owns the copier's transaction coordinator and of the broker that owns its group coordinator.

The copier is tests/chaos/test_txn_copier.py's (``python -m tests.support.txn copier``: librdkafka
read_committed consumer in a classic group, transactional producer with
send_offsets_to_transaction), bootstrapped from all three brokers. Each round reads from
PostgreSQL which broker holds the lease of the copier's ``__transaction_state`` partition (or of
its group's ``__consumer_offsets`` partition), SIGKILLs it mid-copy and restarts it; another
broker takes the lease over (after the session timeout), loads the coordinator's state from
PostgreSQL and finishes or aborts what was in flight. At the end the output topic read with
read_committed equals the input exactly: nothing lost, nothing twice, same order per partition.
The default run kills each coordinator's broker once (short input); the ``slow`` one soaks longer.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from oncestream.coordinator.group.partitioning import partition_for
from tests.chaos.test_txn_copier import Copier
from tests.support.clients import confluent_produce, create_topic, unique_topic
from tests.support.cluster import Cluster, cluster_factory  # noqa: F401  (fixture)
from tests.support.records import keyed_records
from tests.support.txn import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    committed_offsets,
    high_watermarks,
    read_to_end,
    wait_until,
)

pytestmark = pytest.mark.chaos

PARTITIONS = 3
COORDINATOR_PARTITIONS = 10  # offsets.topic.num.partitions and transaction.state.log.num.partitions (defaults)
SEED = 20261129
CONFIG = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "diskless.append.commit.interval.ms": "50",  # shorter transactions: more of them per second
}
PROGRESS_TIMEOUT_S = 90.0
FINISH_TIMEOUT_S = 180.0
# librdkafka 2.16 sometimes never resumes a transaction whose transaction and group coordinator
# were both on the SIGKILLed broker (tests/support/txn.py copier_main describes the same stall on
# one broker: send_offsets_to_transaction waits on a stale coordinator handle): the coordinator
# then aborts it at its timeout and the copier sits idle. A copier without a commit for this long
# is SIGKILLed and restarted (one more kill, so the guarantee is checked all the same); the
# restarts are counted in the failure message.
STALL_S = 20.0


def wait_for_copied(copier: Copier, count: int, timeout_s: float, stalls: list[int]) -> None:
    """``copier.wait_for_copied`` restarting a stalled copier (see STALL_S)."""
    deadline = time.monotonic() + timeout_s
    last, last_change = copier.copied(), time.monotonic()
    while (copied := copier.copied()) < count:
        assert time.monotonic() < deadline, f"copier made no progress ({copied} copied, wanted {count})"
        if copied != last:
            last, last_change = copied, time.monotonic()
        elif time.monotonic() - last_change > STALL_S:
            stalls.append(copied)
            copier.kill()
            copier.start()
            last_change = time.monotonic()
        copier.keep_running()
        time.sleep(0.05)


def lease_owner(cluster: Cluster, resource: str) -> int | None:
    """The node id holding ``resource``'s coordinator lease while its broker lease is alive."""
    with psycopg.connect(cluster.metadata_store, connect_timeout=10) as conn:
        row = conn.execute(
            "SELECT l.owner_node_id FROM coordinator_leases l JOIN brokers b"
            " ON b.node_id = l.owner_node_id AND b.incarnation = l.owner_incarnation"
            " WHERE l.resource = %s AND b.lease_expires_at > clock_timestamp()", (resource,)).fetchone()
    return None if row is None else int(row[0])


def _copy_topics(bootstrap: str, records: int) -> tuple[str, str, dict[int, int]]:
    input_topic, output_topic = unique_topic("ccopy-in"), unique_topic("ccopy-out")
    create_topic(bootstrap, input_topic, partitions=PARTITIONS)
    create_topic(bootstrap, output_topic, partitions=PARTITIONS)
    confluent_produce(bootstrap, input_topic, keyed_records(records, 40, tag="ccopy", seed=SEED))
    ends = high_watermarks(bootstrap, input_topic, PARTITIONS)
    assert sum(ends.values()) == records
    return input_topic, output_topic, ends


def _run(cluster_factory: Callable[..., Cluster], tmp_path: Path, records: int, rounds: tuple[str, ...]) -> None:
    rng = random.Random(SEED)
    cluster = cluster_factory(3, CONFIG)
    group = f"ccopy-{uuid.uuid4().hex[:8]}"
    input_topic, output_topic, input_ends = _copy_topics(cluster.brokers[0].bootstrap, records)
    copier = Copier(cluster.bootstrap, tmp_path, input_topic, output_topic, group,
                    extra_args=("--max-batch", "50"))
    transactional_id = copier.argv[copier.argv.index("--transactional-id") + 1]
    resources = {
        "txn": f"__transaction_state/{partition_for(transactional_id, COORDINATOR_PARTITIONS)}",
        "group": f"__consumer_offsets/{partition_for(group, COORDINATOR_PARTITIONS)}",
    }
    killed: list[tuple[str, int]] = []
    stalls: list[int] = []
    try:
        copier.start()
        for number, target in enumerate(rounds, start=1):
            wait_for_copied(copier, records * number // (len(rounds) + 1), PROGRESS_TIMEOUT_S, stalls)
            resource = resources[target]
            wait_until(lambda: lease_owner(cluster, resource) is not None,  # noqa: B023 - called within this round
                       PROGRESS_TIMEOUT_S, f"an owner of {resource}", interval_s=0.2)
            time.sleep(rng.uniform(0.0, 0.3))
            owner = lease_owner(cluster, resource)
            if owner is None:  # expired in between: wait for the next one
                wait_until(lambda: lease_owner(cluster, resource) is not None,  # noqa: B023
                           PROGRESS_TIMEOUT_S, f"an owner of {resource}", interval_s=0.2)
                owner = lease_owner(cluster, resource)
            assert owner is not None
            victim = cluster.broker(owner)
            victim.kill()
            killed.append((target, victim.node_id))
            copier.keep_running()
            victim.start()  # same port; ready once its previous life's lease expired and it registered
        wait_for_copied(copier, records, FINISH_TIMEOUT_S, stalls)

        def done() -> bool:
            copier.keep_running()
            return committed_offsets(cluster.brokers[0].bootstrap, group, input_topic, PARTITIONS) == input_ends

        wait_until(done, FINISH_TIMEOUT_S, f"the copier to commit every input offset (see {tmp_path})", interval_s=0.5)
    finally:
        copier.stop()
    assert [target for target, _ in killed] == list(rounds)
    bootstrap = cluster.brokers[1].bootstrap
    source = read_to_end(bootstrap, input_topic, PARTITIONS, isolation=READ_UNCOMMITTED)
    copied = read_to_end(bootstrap, output_topic, PARTITIONS, isolation=READ_COMMITTED)
    for p in range(PARTITIONS):
        want = [(r.key, r.value) for r in source[p]]
        got = [(r.key, r.value) for r in copied[p]]
        assert got == want, (
            f"partition {p}: out != in ({len(got)} vs {len(want)} records, {len(got) - len(set(got))} duplicates, "
            f"{len(set(want) - set(got))} missing); kills {killed}, copier starts {copier.starts}, "
            f"self-exits {copier.exits}, stall restarts at {stalls}")


def test_copier_survives_sigkills_of_its_coordinators_brokers(cluster_factory: Callable[..., Cluster],
                                                               tmp_path: Path) -> None:
    _run(cluster_factory, tmp_path, 600, ("txn", "group"))


@pytest.mark.slow
def test_copier_soaks_sigkills_of_its_coordinators_brokers(cluster_factory: Callable[..., Cluster],
                                                            tmp_path: Path) -> None:
    _run(cluster_factory, tmp_path, 3000, ("txn", "group", "txn", "txn", "group", "group"))
