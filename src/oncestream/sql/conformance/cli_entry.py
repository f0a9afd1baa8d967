"""The ``oncestream sql-conformance`` sub-command's options, kept apart from the runner
(command.py) so that building the ``oncestream`` command line imports neither the SQL parser
(sqlglot) nor the engine: ``oncestream broker`` must start in an install without the ``sql``
extra. The runner is imported when the sub-command runs."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    """Add ``sql-conformance`` to the ``oncestream`` command (cli.py)."""
    p = sub.add_parser("sql-conformance", help="run ksqlDB's query-validation tests through the SQL engine",
                       description="Run ksqlDB's query-validation tests (QTT) through this SQL engine and print, "
                                   "per file and in total, how many cases pass, fail or are out of scope "
                                   "(docs/sql-conformance.md).")
    add_arguments(p)
    p.set_defaults(func=_run)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The sub-command's options."""
    p.add_argument("path", help="a ksqlDB checkout, its query-validation-tests directory, or one QTT file")
    p.add_argument("--files", default="*.json",
                   help="glob of the file names to run, several separated by commas (default *.json)")
    p.add_argument("--cases", default=None, help="regular expression the case names must match")
    p.add_argument("--jobs", type=int, default=1, help="cases run side by side (default 1)")
    p.add_argument("--json", dest="json_out", default=None, help="write every result and the totals here")
    p.add_argument("--bootstrap-server", default=None,
                   help="a broker with transaction.two.phase.commit.enable=true (default: start one)")
    p.add_argument("--schema-registry-url", default=None,
                   help="a Schema Registry for the AVRO/PROTOBUF/JSON_SR cases (default: start one on the broker)")
    p.add_argument("--spark-master", default="local[2]", help="Spark master (default local[2])")
    p.add_argument("--budget-s", type=float, default=None, help="start no case after this many seconds")
    p.add_argument("--interleave", action="store_true",
                   help="run the files' cases round-robin (with --budget-s: a sample of every file)")
    p.add_argument("--resume", action="store_true",
                   help="keep the results the --json file holds and run only the other cases "
                        "(a run in parts; each result records its engine revision)")
    p.add_argument("--verbose", action="store_true", help="print every case's result and every failure")


def _run(args: argparse.Namespace) -> int:
    from oncestream.sql.conformance.command import cmd_sql_conformance  # the engine: imported on use

    return cmd_sql_conformance(args)
