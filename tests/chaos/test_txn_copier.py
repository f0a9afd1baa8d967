"""Exactly-once consume-transform-produce across SIGKILLs of the copier and of the broker
(KIP-98 + KIP-447).

A copier process (``python -m tests.support.txn copier``: a read_committed consumer group member
with auto-commit off and a librdkafka transactional producer that sends its consumer positions
with send_offsets_to_transaction in every transaction) copies topic ``in`` to ``out``, partition
to partition. The test SIGKILLs the copier and the broker in turn at random points while it
works, restarting each (the broker on the same port and data dir). At the end ``out``, read with
read_committed, must equal ``in`` exactly: no duplicate, nothing lost, same per-partition order.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.support.clients import confluent_produce, create_topic, unique_topic
from tests.support.consumer_protocol import CONSUMER_PROTOCOL_BROKER_CONFIG
from tests.support.records import keyed_records
from tests.support.txn import (
    COPIER_STALLED_EXIT,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    SENDING_OFFSETS_PHASE,
    TXN_BROKER_CONFIG,
    committed_offsets,
    copier_phase_path,
    high_watermarks,
    read_to_end,
    wait_until,
)

pytestmark = pytest.mark.chaos

PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent
PARTITIONS = 3
RECORDS = 3000
MAX_BATCH = 25
PAUSE_MS = 40
# What is SIGKILLed in turn: the default run kills each twice; the slow one soaks longer.
KILL_ROUNDS = ("copier", "broker", "copier", "broker")
SOAK_KILL_ROUNDS = ("copier", "broker", "copier", "broker", "broker", "copier", "copier", "broker")
SEED = 20261122
PROGRESS_TIMEOUT_S = 90.0
FINISH_TIMEOUT_S = 180.0


class Copier:
    """Supervises the copier subprocess: start, SIGKILL, restart; counts its commits."""

    def __init__(self, bootstrap: str, workdir: Path, input_topic: str, output_topic: str, group: str,
                 extra_args: tuple[str, ...] = ()) -> None:
        self.argv = [
            sys.executable, "-m", "tests.support.txn", "copier",
            "--bootstrap", bootstrap,
            "--transactional-id", f"copier-{uuid.uuid4().hex[:8]}",
            "--group", group,
            "--input", input_topic,
            "--output", output_topic,
            "--progress", str(workdir / "progress.log"),
            "--max-batch", str(MAX_BATCH),
            "--pause-ms", str(PAUSE_MS),
            *extra_args,
        ]
        self.bootstrap, self.input_topic, self.output_topic = bootstrap, input_topic, output_topic
        self.progress_path = workdir / "progress.log"
        self.progress_path.touch()
        self.workdir = workdir
        self.process: subprocess.Popen | None = None
        self.starts = 0
        self.exits: list[int] = []  # exit codes of runs that ended on their own (fatal errors)

    def start(self) -> None:
        self.starts += 1
        with open(self.workdir / f"copier-{self.starts}.stderr", "wb") as stderr:
            self.process = subprocess.Popen(
                self.argv, cwd=PROJECT_ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=stderr, start_new_session=True,
            )

    def keep_running(self) -> None:
        """Restart the copier if it exited by itself (a fatal error such as being fenced: the
        producer can only be replaced); fail if it exited because it stalled."""
        assert self.process is not None
        code = self.process.poll()
        if code is not None:
            assert code != COPIER_STALLED_EXIT, (
                f"the copier stalled (a transactional call got no answer within its timeout); see "
                f"{self.workdir}/copier-{self.starts}.stderr")
            self.exits.append(code)
            assert len(self.exits) < 20, f"copier keeps dying: {self.exits}; see {self.workdir}"
            self.start()

    def kill(self) -> None:
        """SIGKILL the running copier (mid-transaction, most likely)."""
        assert self.process is not None
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        """Kill the copier if it still runs (end of test, or a failure)."""
        if self.process is not None and self.process.poll() is None:
            self.kill()

    def phase(self) -> str:
        """The transactional call the running copier waits in, if it says (tests/support/txn.py
        SENDING_OFFSETS_PHASE), else ""."""
        path = copier_phase_path(self.progress_path)
        return path.read_text() if path.exists() else ""

    def wait_for_phase(self, phase: str, timeout_s: float) -> None:
        """Wait until the running copier says it waits in ``phase`` (polled every millisecond:
        the call lasts a few round trips)."""
        deadline = time.monotonic() + timeout_s
        while self.phase() != phase:
            assert time.monotonic() < deadline, f"the copier never entered {phase}; see {self.workdir}"
            self.keep_running()
            time.sleep(0.001)

    def copied(self) -> int:
        """Records in transactions the copier saw commit (all incarnations)."""
        return sum(int(line) for line in self.progress_path.read_text().split())

    def wait_for_copied(self, count: int, timeout_s: float) -> None:
        """Wait until ``count`` records were copied in committed transactions."""
        deadline = time.monotonic() + timeout_s
        while self.copied() < count:
            assert time.monotonic() < deadline, (
                f"copier made no progress ({self.copied()} copied, wanted {count}); see {self.workdir}"
            )
            self.keep_running()
            time.sleep(0.05)


@pytest.mark.parametrize("rounds", [
    pytest.param(KILL_ROUNDS, id="4-kills"),
    # The default run covers the guarantee with the 4-kills case (each process killed twice).
    pytest.param(SOAK_KILL_ROUNDS, id="8-kills", marks=pytest.mark.slow),
])
def test_exactly_once_copier_survives_sigkills_of_copier_and_broker(broker_factory, tmp_path, rounds):
    """KIP-447 exactly-once copy under repeated SIGKILLs of both the copier and the broker.
    The 8-kills case is marked slow; the 4-kills case covers the guarantee in the default run."""
    rng = random.Random(SEED)
    broker = broker_factory(config=dict(TXN_BROKER_CONFIG))
    bootstrap = broker.bootstrap
    group = f"copier-group-{uuid.uuid4().hex[:8]}"
    input_topic, output_topic, input_ends = copy_topics(bootstrap, "copy")
    copier = Copier(bootstrap, tmp_path, input_topic, output_topic, group)
    try:
        copier.start()
        kill_rounds(copier, broker, rounds, rng, group, input_ends)
        wait_for_every_offset(copier, group, input_ends)
    finally:
        copier.stop()
    assert_copied_exactly_once(copier)


def kill_rounds(copier: Copier, broker, rounds: tuple[str, ...], rng: random.Random, group: str,
                input_ends: dict[int, int]) -> None:
    """SIGKILL the copier or the broker per round (restarting it), most of them mid-copy."""
    kills_mid_stream = 0
    for round_number, target in enumerate(rounds, start=1):
        # Kills are spread over the copy: the i-th once about i/(rounds+1) of the input was
        # copied, then at a random moment (most likely inside a transaction).
        copier.wait_for_copied(RECORDS * round_number // (len(rounds) + 1), PROGRESS_TIMEOUT_S)
        time.sleep(rng.uniform(0.0, 0.2))
        if committed_offsets(copier.bootstrap, group, copier.input_topic, PARTITIONS) != input_ends:
            kills_mid_stream += 1
        if target == "copier":
            # A copier kill must cut an open transaction short: wait until the copier waits in
            # send_offsets_to_transaction, its records flushed into the log but not committed
            # (on a loaded machine a kill at a random moment often fell between transactions).
            copier.wait_for_phase(SENDING_OFFSETS_PHASE, PROGRESS_TIMEOUT_S)
            copier.kill()
            copier.start()
        else:
            broker.kill()
            time.sleep(rng.uniform(0.0, 1.0))
            broker.start()
            copier.keep_running()
    assert kills_mid_stream >= len(rounds) // 2, "most kills must land while copying is under way"


def copy_topics(bootstrap: str, tag: str) -> tuple[str, str, dict[int, int]]:
    """The copier's input topic (RECORDS keyed records) and empty output topic, and the input's
    end offsets."""
    input_topic = unique_topic(f"{tag}-in")
    output_topic = unique_topic(f"{tag}-out")
    create_topic(bootstrap, input_topic, partitions=PARTITIONS)
    create_topic(bootstrap, output_topic, partitions=PARTITIONS)
    confluent_produce(bootstrap, input_topic, keyed_records(RECORDS, 40, tag=tag, seed=SEED))
    input_ends = high_watermarks(bootstrap, input_topic, PARTITIONS)
    assert sum(input_ends.values()) == RECORDS
    return input_topic, output_topic, input_ends


def wait_for_every_offset(copier: Copier, group: str, input_ends: dict[int, int]) -> None:
    """Keep the copier running until the group committed the end of every input partition."""

    def done() -> bool:
        copier.keep_running()
        return committed_offsets(copier.bootstrap, group, copier.input_topic, PARTITIONS) == input_ends

    wait_until(done, FINISH_TIMEOUT_S, f"the copier to commit every input offset (see {copier.workdir})",
               interval_s=0.5)


def assert_copied_exactly_once(copier: Copier) -> None:
    """``out`` read with read_committed equals ``in``, partition by partition, in order."""
    bootstrap = copier.bootstrap
    source = read_to_end(bootstrap, copier.input_topic, PARTITIONS, isolation=READ_UNCOMMITTED)
    copied = read_to_end(bootstrap, copier.output_topic, PARTITIONS, isolation=READ_COMMITTED)
    written = read_to_end(bootstrap, copier.output_topic, PARTITIONS, isolation=READ_UNCOMMITTED)
    # The kills must have cut transactions short: their records are in the log, aborted.
    assert sum(map(len, written.values())) > RECORDS, "no kill landed inside an open transaction"
    for p in range(PARTITIONS):
        want = [(r.key, r.value) for r in source[p]]
        got = [(r.key, r.value) for r in copied[p]]
        duplicates = len(got) - len(set(got))
        missing = len(set(want) - set(got))
        assert got == want, (
            f"partition {p}: out != in ({len(got)} vs {len(want)} records, {duplicates} duplicates, "
            f"{missing} missing); copier starts {copier.starts}, self-exits {copier.exits}"
        )


# KIP-848 consumer groups with short sessions: a SIGKILLed copier's partitions go to its successor
# once the dead member's session (6 s) ends, so each copier kill costs that wait.
KIP848_COPIER_BROKER_CONFIG = {**TXN_BROKER_CONFIG, **CONSUMER_PROTOCOL_BROKER_CONFIG}
KIP848_SOAK_KILL_ROUNDS = ("copier", "broker", "copier", "copier", "broker")


@pytest.mark.parametrize(("client", "rounds"), [
    # Each process killed twice, as the classic copier's default case.
    pytest.param("confluent", KILL_ROUNDS, id="confluent"),
    # The default run shows the guarantee with librdkafka's clients; ours soak with the slow runs
    # (our consumer's KIP-848 membership is checked by tests/interop/test_consumer_protocol_our_client.py).
    pytest.param("oncestream", KIP848_SOAK_KILL_ROUNDS, id="oncestream", marks=pytest.mark.slow),
])
def test_exactly_once_copier_on_the_consumer_protocol_survives_sigkills(broker_factory, tmp_path, client, rounds):
    """KIP-447 on KIP-848: a consumer with group.protocol=consumer (librdkafka's, and ours) and a
    transactional producer of the same client copy exactly once while the copier and the broker
    are SIGKILLed mid-transaction; the offsets go into each transaction with the consumer's group
    metadata, member id and member epoch included, and the group (members, epochs, assignments)
    comes back with the broker. ``rounds``: the default case kills the copier and the broker twice
    each, the slow one (our clients) three copier kills and two broker kills."""
    rng = random.Random(SEED + 848)
    broker = broker_factory(config=dict(KIP848_COPIER_BROKER_CONFIG))
    bootstrap = broker.bootstrap
    group = f"copier848-{uuid.uuid4().hex[:8]}"
    input_topic, output_topic, input_ends = copy_topics(bootstrap, "copy848")
    copier = Copier(bootstrap, tmp_path, input_topic, output_topic, group,
                    extra_args=("--client", client, "--group-protocol", "consumer"))
    try:
        copier.start()
        kill_rounds(copier, broker, rounds, rng, group, input_ends)
        wait_for_every_offset(copier, group, input_ends)
    finally:
        copier.stop()
    assert_copied_exactly_once(copier)
