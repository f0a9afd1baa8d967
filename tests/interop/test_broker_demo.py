"""``python -m oncestream.demos.broker_crash`` end to end: the shipped exactly-once demo passes its own check.

The demo (src/oncestream/demos/broker_crash.py) starts our broker on a free port, streams sequence-numbered
records through an idempotent librdkafka producer (acks=all), SIGKILLs and restarts the broker
mid-stream, reads the topic back and prints a check: nothing lost, nothing duplicated, order and
acknowledged offsets kept; it exits 1 on any violation. This test runs it small (a few thousand
records, two crashes) so the demo users are told to run cannot rot unnoticed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

# It SIGKILLs the broker: a chaos test, wherever it lives.
pytestmark = [pytest.mark.interop, pytest.mark.chaos]

RECORDS = 3000
RESTARTS = 2
# A liveness bound on the whole run (a healthy run takes well under ten seconds); on expiry
# the demo and the broker it started are killed and the test fails with the output so far.
DEMO_TIMEOUT_S = 120


def _run_demo(data_dir: Path) -> tuple[int, str]:
    """Run the demo with small parameters in its own process group; (exit code, stdout+stderr).

    Its own session so that a timeout can kill the demo; the broker it started (in a session of
    its own, see ``oncestream.broker_process``) dies with it (``die_with_parent``).
    """
    argv = [
        sys.executable, "-m", "oncestream.demos.broker_crash",
        "--data-dir", str(data_dir),
        "--records", str(RECORDS),
        "--rate", "1000",  # a three-second stream: both crashes land mid-stream
        "--partitions", "2",
        "--restarts", str(RESTARTS),
        "--downtime-ms", "300",
    ]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=DEMO_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"the demo did not finish within {DEMO_TIMEOUT_S} s; output:\n{output.decode(errors='replace')}")
    return process.returncode, output.decode(errors="replace")


def _count(output: str, label: str) -> int:
    """The number on the demo's check line that starts with ``label`` (e.g. ``lost``)."""
    match = re.search(rf"^\s+{label}\s+(\d+)\b", output, re.MULTILINE)
    assert match, f"no '{label}' line in the demo's check:\n{output}"
    return int(match.group(1))


@pytest.mark.timeout(DEMO_TIMEOUT_S + 60)
def test_demo_keeps_exactly_once_through_broker_sigkills(tmp_path: Path) -> None:
    """Exactly-once through crashes (idempotent producer, KIP-98 sequence numbers, durable log):
    with the broker SIGKILLed twice mid-stream, every record is acknowledged, read back once, at
    its acknowledged offset and in order; the demo says so and exits 0."""
    code, output = _run_demo(tmp_path / "demo-data")
    assert code == 0, f"demo exited {code}:\n{output}"
    assert f"exactly-once check after {RESTARTS} SIGKILLs and {RESTARTS} restarts" in output, output
    assert (_count(output, "produced"), _count(output, "acknowledged"), _count(output, "read back")) == (
        RECORDS, RECORDS, RECORDS
    ), output
    assert (_count(output, "lost"), _count(output, "duplicated")) == (0, 0), output
    final_line = output.strip().splitlines()[-1]
    assert final_line.startswith("OK: no loss, no duplicates, order kept"), output
