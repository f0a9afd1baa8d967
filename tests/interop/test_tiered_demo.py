"""``python -m oncestream.demos.tiered_storage`` (``make demo-tiered``) end to end, small, so the
demo users are told to run cannot rot: SeaweedFS and a tiering broker started by the demo, 10x
local.retention.bytes produced, the broker SIGKILLed while segments are uploaded, restarted, every
offset read from 0 by librdkafka; the demo's own check must pass. The check itself (a pure
function) is tested on bad observations below.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from oncestream.demos.tiered_storage import Observed, check

pytestmark = [pytest.mark.interop, pytest.mark.chaos]

DEMO_TIMEOUT_S = 180  # a bound on a hang only (a run takes seconds)


def test_the_tiered_storage_demo_passes_its_own_check(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "oncestream.demos.tiered_storage", "--data-dir", str(tmp_path / "demo"),
            "--segment-kb", "32", "--local-retention-kb", "128", "--times", "10"]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        output_bytes, _ = process.communicate(timeout=DEMO_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output_bytes, _ = process.communicate()
        pytest.fail(f"the demo did not finish within {DEMO_TIMEOUT_S} s:\n{output_bytes.decode(errors='replace')}")
    output = output_bytes.decode(errors="replace")
    assert process.returncode == 0, output
    assert "SIGKILL the broker" in output
    assert "\nOK: every offset read once from 0" in output
    # the description printed after the restart: most offsets only in the bucket
    match = re.search(r"partition 0 .*offsets \[0, (\d+)\) local-log-start (\d+) .*remote-bytes (\d+)", output)
    assert match, output
    end, local_start, remote_bytes = (int(group) for group in match.groups())
    assert 0 < local_start < end, output
    assert remote_bytes >= local_start * 1024, output


def _observed(**changes: object) -> Observed:
    good = {"produced": 4, "acked": {i: i for i in range(4)}, "read": [(i, i) for i in range(4)],
            "local_log_start": 2, "remote_segments": 1, "local_log_bytes": 10, "local_bound_bytes": 100}
    return Observed(**{**good, **changes})  # type: ignore[arg-type]


def test_check_passes_a_good_run_and_names_each_broken_guarantee() -> None:
    assert check(_observed()).violations == []
    cases = {
        "lost 1 records": _observed(read=[(0, 0), (1, 1), (2, 2)]),
        "1 duplicated records": _observed(read=[(0, 0), (1, 1), (2, 2), (3, 3), (3, 3)]),
        "not at the offset": _observed(acked={0: 0, 1: 1, 2: 2, 3: 7}),
        "out of order": _observed(read=[(0, 0), (2, 2), (1, 1), (3, 3)]),
        "never wrote": _observed(read=[(0, 0), (1, 1), (2, 2), (3, 3), (4, None)]),
        "acknowledged 3 of 4": _observed(acked={0: 0, 1: 1, 2: 2}),
        "nothing tiered": _observed(local_log_start=0),
        "over 100": _observed(local_log_bytes=101),
    }
    for expected, seen in cases.items():
        violations = check(seen).violations
        assert any(expected in v for v in violations), (expected, violations)
        assert check(seen).exit_code == 1
