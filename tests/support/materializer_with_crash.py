"""``python -m tests.support.materializer_with_crash --crash-point POINT [--crash-at-commit N] --
--bootstrap-server ... --topic ... --state-dir ...``: the state-store materializer built through
its Python entry (``oncestream.state.materializer.main``) with a commit observer injected into its
store that SIGKILLs the process at POINT (``before-batch``: records applied, in the commit's
WriteBatch, no offsets in it yet; ``inside-batch``: half of the partitions' offsets in the batch;
``after-batch``: the batch durable, the commit not acknowledged) of commit number N (1-based,
default 1). The part after ``--`` is the materializer's ordinary command line.
"""

from __future__ import annotations

import argparse
import sys

from oncestream.state.materializer import main as materializer_main
from tests.support.faults import SigkillAtStep, split_launcher_argv

CRASH_POINTS = ("before-batch", "inside-batch", "after-batch")


def main(argv: list[str] | None = None) -> int:
    own, rest = split_launcher_argv(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m tests.support.materializer_with_crash")
    parser.add_argument("--crash-point", required=True, choices=CRASH_POINTS)
    parser.add_argument("--crash-at-commit", type=int, default=1)
    faults = parser.parse_args(own)
    # Every commit reaches every point once, so the N-th time a point is reached is commit N's.
    hook = SigkillAtStep(faults.crash_point, CRASH_POINTS, what="state store commit", at=faults.crash_at_commit)
    return materializer_main(rest, fault_hook=hook)


if __name__ == "__main__":
    sys.exit(main())
