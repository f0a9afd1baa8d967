"""The README's SQL quickstart, run as written (issue 24 point 7).

The commands and the SQL are read from README.md itself, so this test breaks when the README
drifts: the ``sh`` block's broker and SQL-server commands are started as they stand, with only
their places changed (free ports for 9092 and 8088, temporary directories for ./data, the
worktree's interpreter for ``.venv/bin/oncestream``, a ``--ready-file`` added to know when each
listens), and the ``sql`` block is piped into the shell, ``oncestream sql --server URL``, the
README's third command. The push query at the end must print alice's row (views 1) and end.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.ports import free_tcp_port
from tests.support.ready_processes import start_ready, stop

pytestmark = [pytest.mark.interop, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[3]
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


def test_readme_sql_quickstart_prints_the_row(tmp_path: Path) -> None:
    sh_blocks, sql_blocks = readme_blocks("sh"), readme_blocks("sql")
    assert len(sh_blocks) == 1, (sh_blocks, sql_blocks)
    assert len(sql_blocks) == 1, (sh_blocks, sql_blocks)
    commands = shell_commands(sh_blocks[0])
    assert [c[:2] for c in commands] == [[PROGRAM, "broker"], [PROGRAM, "sql-server"], [PROGRAM, "sql"]], commands

    broker_port, sql_port = free_tcp_port(), free_tcp_port()
    places = {"127.0.0.1:9092": f"127.0.0.1:{broker_port}", "http://127.0.0.1:8088": f"http://127.0.0.1:{sql_port}",
              "127.0.0.1:8088": f"127.0.0.1:{sql_port}", "./data/broker": str(tmp_path / "broker"),
              "./data/sql": str(tmp_path / "sql")}

    def local(words: list[str]) -> list[str]:
        out = [sys.executable, "-m", "oncestream.cli"]
        for word in words[1:]:
            out.append(places.get(word, word))
        return out

    env = dict(os.environ)
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")])
    processes: list[subprocess.Popen[bytes]] = []
    logs = {name: tmp_path / f"{name}.log" for name in ("broker", "sql-server")}

    def start(words: list[str], name: str) -> None:
        processes.append(start_ready(local(words), tmp_path / f"{name}.ready", logs[name], env))

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
    finally:
        for process in reversed(processes):
            stop(process)
