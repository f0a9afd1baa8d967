"""The README's SQL quickstart, run as written (issue 24 point 7), by a given ``oncestream`` program.

The commands and the SQL are read from README.md itself, so a test using this breaks when the
README drifts: the ``sh`` block's broker and SQL-server commands are started as they stand, with
only their places changed (free ports for 9092 and 8088, temporary directories for ./data, the
program under test for ``.venv/bin/oncestream``, a ``--ready-file`` added to know when each
listens), and the ``sql`` block is piped into the shell, ``oncestream sql --server URL``, the
README's third command. The push query at the end must print alice's row (views 1) and end.

Two callers: tests/interop/test_install_commands.py runs it with the program that the README's
install command put in a fresh venv (the default run: install, then quickstart, as a reader
would), tests/interop/sql/test_readme_quickstart.py with the work tree's (slow run).
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path

from tests.support.ports import free_tcp_port
from tests.support.ready_processes import start_ready, stop

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## SQL server:"
PROGRAM = ".venv/bin/oncestream"
SHELL_TIMEOUT_S = 480.0


def readme_blocks(language: str) -> list[str]:
    """The fenced ``language`` blocks of the README's SQL-server section, in order."""
    text = (ROOT / "README.md").read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    section = text[start:end if end >= 0 else len(text)]
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.DOTALL)


def shell_commands(block: str) -> list[list[str]]:
    """The block's commands as argument lists (continuation lines joined, a trailing ``&`` dropped)."""
    joined = re.sub(r"\\\n\s*", " ", block)
    commands = []
    for line in joined.splitlines():
        words = shlex.split(line)
        if words and words[-1] == "&":
            words.pop()
        if words:
            commands.append(words)
    return commands


def run_readme_quickstart(program: list[str], env: dict[str, str], work: Path,
                          while_serving: Callable[[str, Path], None] | None = None) -> None:
    """Run the quickstart with ``program`` (the argv that stands for ``.venv/bin/oncestream``)
    under ``env``, in the directory ``work``; assert the shell printed alice's row and the server
    did not refuse its broker. ``while_serving(sql_url, server_log)``, if given, runs after the
    shell, with the broker and the server still up."""
    sh_blocks, sql_blocks = readme_blocks("sh"), readme_blocks("sql")
    assert len(sh_blocks) == 1, (sh_blocks, sql_blocks)
    assert len(sql_blocks) == 1, (sh_blocks, sql_blocks)
    commands = shell_commands(sh_blocks[0])
    assert [c[:2] for c in commands] == [[PROGRAM, "broker"], [PROGRAM, "sql-server"], [PROGRAM, "sql"]], commands

    broker_port, sql_port = free_tcp_port(), free_tcp_port()
    places = {"127.0.0.1:9092": f"127.0.0.1:{broker_port}", "http://127.0.0.1:8088": f"http://127.0.0.1:{sql_port}",
              "127.0.0.1:8088": f"127.0.0.1:{sql_port}", "./data/broker": str(work / "broker"),
              "./data/sql": str(work / "sql")}

    def local(words: list[str]) -> list[str]:
        return [*program, *(places.get(word, word) for word in words[1:])]

    processes: list[subprocess.Popen[bytes]] = []
    logs = {name: work / f"{name}.log" for name in ("broker", "sql-server")}

    def start(words: list[str], name: str) -> None:
        processes.append(start_ready(local(words), work / f"{name}.ready", logs[name], env))

    try:
        start(commands[0], "broker")
        start(commands[1], "sql-server")
        try:
            shell = subprocess.run(local(commands[2]), input=sql_blocks[0].encode(), capture_output=True, env=env,
                                   timeout=SHELL_TIMEOUT_S)
        except subprocess.TimeoutExpired as waited:
            printed = (waited.stdout or b"").decode()
            raise AssertionError(f"the README's statements did not end within {SHELL_TIMEOUT_S:.0f} s; the shell "
                                 f"printed:\n{printed}\n{logs['sql-server'].read_text()[-4000:]}") from None
        out, err = shell.stdout.decode(), shell.stderr.decode()
        server_log = logs["sql-server"].read_text()
        assert shell.returncode == 0, f"shell exit {shell.returncode}\n{out}\n{err}\n{server_log[-4000:]}"
        rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in out.splitlines()
                if line.startswith("|")]
        assert ["USER_ID", "VIEWS"] in rows, out
        assert ["alice", "1"] in rows, out
        assert "Limit Reached" in out, out
        # A broker started as the README says grants two-phase commit: no refusal at start.
        assert "persistent queries cannot run" not in server_log
        if while_serving is not None:
            while_serving(f"http://127.0.0.1:{sql_port}", logs["sql-server"])
    finally:
        for process in reversed(processes):
            stop(process)
