"""``python -m tests.support.sql_node_with_faults --crash-step STEP -- sql-server ...``: a SQL
server node built through its Python entry (``sql.server_main.run``) with a write-step observer
injected that SIGKILLs the node the first time a statement's write reaches STEP
(``command_topic.WRITE_STEPS``); the part after ``--`` is the ordinary ``oncestream`` command
line. ``tests.support.sql_servers.SqlServerProcess.start(crash_step=...)`` starts a node this way.
"""

from __future__ import annotations

import argparse
import sys

from oncestream.sql.server.command_topic import WRITE_STEPS
from oncestream.sql.server.server_main import add_arguments, run
from tests.support.faults import SigkillAtStep, split_launcher_argv


def main(argv: list[str] | None = None) -> int:
    own, rest = split_launcher_argv(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m tests.support.sql_node_with_faults")
    parser.add_argument("--crash-step", required=True, choices=WRITE_STEPS)
    faults = parser.parse_args(own)
    if not rest or rest[0] != "sql-server":
        raise SystemExit("the command line after -- must be `sql-server ...`")
    node_parser = argparse.ArgumentParser(prog="oncestream sql-server")
    add_arguments(node_parser)
    return run(node_parser.parse_args(rest[1:]),
               write_steps=SigkillAtStep(faults.crash_step, WRITE_STEPS, what="SQL node write"))


if __name__ == "__main__":
    sys.exit(main())
