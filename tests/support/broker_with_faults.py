"""``python -m tests.support.broker_with_faults [faults] -- broker --data-dir ... [--config ...]``:
our broker built through its Python entry (``cli.cmd_broker`` -> ``server.run_broker``) with
faults injected through its seams (broker/seams.py); the part after ``--`` is the ordinary
``oncestream`` command line. Faults:

- ``--txn-crash-point STEP`` (txn_service.TXN_STEPS: ``before-markers``, ``between-markers``,
  ``before-complete``): SIGKILL at that step of every committing transaction;
- ``--internal-append-fail-file PATH``: appends to __consumer_offsets and __transaction_state
  fail with StorageError while PATH exists;
- ``--stuck-background-loop``: one more background loop, which swallows every cancellation;
- ``--hang-fsync-file PATH``: the disk threads' fdatasync never returns once PATH exists;
- ``--hold-fsync-file PATH``: the disk threads' fdatasync waits while PATH exists.

``tests.support.brokers.BrokerProcess(faults=BrokerFaults(...))`` starts a broker this way.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from oncestream.broker.seams import BrokerSeams
from oncestream.broker.txn_service import TXN_STEPS
from oncestream.cli import CliError, build_parser, cmd_broker
from tests.support.faults import (
    FileSwitchedAppendFault,
    SigkillAtStep,
    fdatasync_hanging_when,
    fdatasync_held_while,
    loop_that_loses_every_cancellation,
    split_launcher_argv,
)


def main(argv: list[str] | None = None) -> int:
    own, rest = split_launcher_argv(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m tests.support.broker_with_faults")
    parser.add_argument("--txn-crash-point", choices=TXN_STEPS)
    parser.add_argument("--internal-append-fail-file")
    parser.add_argument("--stuck-background-loop", action="store_true")
    parser.add_argument("--hang-fsync-file", type=Path)
    parser.add_argument("--hold-fsync-file", type=Path)
    faults = parser.parse_args(own)
    args = build_parser().parse_args(rest)
    if args.func is not cmd_broker:
        raise SystemExit("the command line after -- must be `broker ...`")
    seams = BrokerSeams(
        txn_steps=(SigkillAtStep(faults.txn_crash_point, TXN_STEPS, what="transaction coordinator")
                   if faults.txn_crash_point else None),
        internal_appender=(FileSwitchedAppendFault(faults.internal_append_fail_file)
                           if faults.internal_append_fail_file else None),
        fdatasync=(fdatasync_hanging_when(faults.hang_fsync_file) if faults.hang_fsync_file
                   else fdatasync_held_while(faults.hold_fsync_file) if faults.hold_fsync_file else None),
        background_loops=(loop_that_loses_every_cancellation,) if faults.stuck_background_loop else (),
    )
    try:
        return cmd_broker(args, seams=seams)
    except CliError as exc:
        print(f"oncestream: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
