"""Every install command the README and docs/ show gives a working program (issue 24 point 7).

The commands are read from README.md and docs/*.md (``pip install [-e] '.[extras]'`` or
``'oncestream[extras]'``), so a command added to the docs is tested too. Each one runs in a fresh
venv on a copy of this source tree (the project is not on a package index: ``oncestream[...]`` is
installed from the copy with the same extras; a copy, so that an editable install does not write
into the work tree), with no PYTHONPATH: what runs is what pip installed. Then:

- every install: ``oncestream --help``;
- an install with ``sql``: a broker and a SQL server from the venv, the server ready and answering
  the venv's shell, then its Spark session up (its whole start-up import chain: PySpark, pyarrow,
  pandas, rocksdict, hypercorn...; Spark starts once the server listens); its log says nothing
  about missing two-phase commit;
- with ``spark``: the connector and its Arrow batches import (``oncestream.spark``);
- with ``state``: a RocksDB state store opens (``oncestream.state``).

The default suite runs the README's SQL-server command and the installs without Spark (seconds);
the other documented commands install Spark again in other combinations and are marked slow (one
to two minutes each).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.ports import free_tcp_port
from tests.support.ready_processes import start_ready, stop

pytestmark = [pytest.mark.interop]

ROOT = Path(__file__).resolve().parents[2]
INSTALL = re.compile(r"pip install (-e )?'?(\.|oncestream)\[([a-z,]+)\]'?")
INSTALL_TIMEOUT_S = 900.0
COMMAND_TIMEOUT_S = 120.0
SPARK_START_TIMEOUT_S = 180.0
# The command the README's SQL-server section gives by hand: the one run in the default suite.
README_SQL_COMMAND = ("-e ", ".", "sql")
_COPY_IGNORE = shutil.ignore_patterns(".git", ".venv", "data", "build", "dist", "*.egg-info", "__pycache__",
                                      ".pytest_cache", ".mypy_cache", ".ruff_cache", "bench")


# A store written, committed, reopened and read: rocksdict is there and works.
STATE_STORE_CHECK = """
import sys
from oncestream.state.store import StateStore
store = StateStore(sys.argv[1])
store.put(b"k", b"v")
store.commit()
store.close()
store = StateStore(sys.argv[1])
assert store.get(b"k") == b"v", store.get(b"k")
store.close()
"""


def documented_commands() -> list[tuple[str, str, str]]:
    """(editable flag, target, extras) of every install command in README.md and docs/*.md."""
    found: dict[tuple[str, str, str], None] = {}
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for match in INSTALL.finditer(doc.read_text()):
            editable, target, extras = match.groups()
            found[(editable or "", target, ",".join(sorted(extras.split(","))))] = None
    return list(found)


def _param(command: tuple[str, str, str]) -> object:
    editable, target, extras = command
    # Spark's wheel makes an install take one to two minutes: the default run installs it once.
    fast = command == README_SQL_COMMAND or not {"spark", "sql"} & set(extras.split(","))
    marks = [] if fast else [pytest.mark.slow]
    return pytest.param(command, id=f"{editable.strip() or 'pip'}-{target}[{extras}]", marks=marks)


def test_the_readme_sql_command_is_documented() -> None:
    """The default run's case is still what the README says (else it would test nothing shown)."""
    assert README_SQL_COMMAND in documented_commands(), documented_commands()


def _run(argv: list[str], env: dict[str, str], timeout_s: float = COMMAND_TIMEOUT_S, **kw: object) -> str:
    done = subprocess.run(argv, capture_output=True, env=env, timeout=timeout_s, **kw)  # type: ignore[call-overload]
    out = done.stdout.decode() + done.stderr.decode()
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{out[-6000:]}"
    return out


def _check_sql_server(bin_dir: Path, env: dict[str, str], work: Path) -> None:
    broker_port, sql_port = free_tcp_port(), free_tcp_port()
    broker = start_ready([str(bin_dir / "oncestream"), "broker", "--data-dir", str(work / "broker"), "--listen",
                     f"127.0.0.1:{broker_port}", "--config", "transaction.two.phase.commit.enable=true"],
                    work / "broker.ready", work / "broker.log", env)
    try:
        server = start_ready([str(bin_dir / "oncestream"), "sql-server", "--bootstrap-server", f"127.0.0.1:{broker_port}",
                         "--listen", f"127.0.0.1:{sql_port}", "--service-id", "install_", "--state-dir",
                         str(work / "sql")], work / "sql.ready", work / "sql.log", env)
        try:
            out = _run([str(bin_dir / "oncestream"), "sql", "--server", f"http://127.0.0.1:{sql_port}",
                        "-e", "SHOW STREAMS;"], env)
            assert "Stream Name" in out, out
            # Spark starts once the server listens: its import chain is proven when it is up.
            deadline = time.monotonic() + SPARK_START_TIMEOUT_S
            while "Spark session ready" not in (work / "sql.log").read_text():
                assert server.poll() is None, (work / "sql.log").read_text()[-4000:]
                assert time.monotonic() < deadline, (work / "sql.log").read_text()[-4000:]
                time.sleep(0.2)
        finally:
            stop(server)
        log = (work / "sql.log").read_text()
        assert "persistent queries cannot run" not in log, log[-4000:]
    finally:
        stop(broker)


@pytest.mark.parametrize("command", [_param(c) for c in documented_commands()])
def test_documented_install_gives_a_working_program(command: tuple[str, str, str], tmp_path: Path) -> None:
    editable, _target, extras = command
    source = tmp_path / "oncestream"
    shutil.copytree(ROOT, source, ignore=_COPY_IGNORE, symlinks=True)
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    _run([sys.executable, "-m", "venv", str(venv)], env)
    bin_dir = venv / "bin"
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYSPARK_PYTHON"] = str(bin_dir / "python")
    # --no-compile: no bytecode for PySpark's thousands of modules (what gets installed is the same).
    pip = [str(bin_dir / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile"]
    _run(pip + ([editable.strip()] if editable else []) + [f"{source}[{extras}]"], env, INSTALL_TIMEOUT_S,
         cwd=tmp_path)
    located = _run([str(bin_dir / "python"), "-c", "import oncestream; print(oncestream.__file__)"], env, cwd=tmp_path)
    assert str(ROOT) not in located, f"the venv imports the work tree, not the install: {located}"
    _run([str(bin_dir / "oncestream"), "--help"], env, cwd=tmp_path)
    wanted = set(extras.split(","))
    if "spark" in wanted:
        _run([str(bin_dir / "python"), "-c", "import pyarrow, pyspark, oncestream.spark, oncestream.spark.sink"],
             env, cwd=tmp_path)
    if "state" in wanted:
        _run([str(bin_dir / "python"), "-c", STATE_STORE_CHECK, str(tmp_path / "store")], env, cwd=tmp_path)
    if "sql" in wanted:
        _run([str(bin_dir / "oncestream"), "sql-server", "--help"], env, cwd=tmp_path)
        _check_sql_server(bin_dir, env, tmp_path)
