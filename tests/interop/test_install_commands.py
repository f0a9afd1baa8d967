"""Every install command the README and docs/ show gives a working program (issue 24 point 7).

The commands are read from README.md and docs/*.md (``pip install [-e] '.[extras]'`` or
``'oncestream[extras]'``), so a command added to the docs is tested too. Each one runs in a fresh
venv on a copy of this source tree (the project is not on a package index: ``oncestream[...]`` is
installed from the copy with the same extras; a copy, so that an editable install does not write
into the work tree), with no PYTHONPATH: what runs is what pip installed. Then:

- every install: ``oncestream --help``;
- an install with ``sql``: the README's SQL quickstart with the venv's program
  (tests.support.readme_quickstart: a broker and a SQL server as the README starts them, its
  statements piped into the venv's shell, the push query printing the README's row), then the
  venv's shell answering SHOW STREAMS and the server's Spark session up (its whole start-up import
  chain: PySpark, pyarrow, pandas, rocksdict, hypercorn...); its log says nothing about missing
  two-phase commit;
- with ``spark``: the connector and its Arrow batches import (``oncestream.spark``);
- with ``state``: a RocksDB state store opens (``oncestream.state``).

The default suite runs the README's SQL-server command (then its quickstart: the default run's one
README quickstart) and the installs without Spark (seconds);
the other documented commands install Spark again in other combinations and are marked slow (one
to two minutes each). The selected commands install side by side (``installs``), each into its
own venv on its own copy: pip mostly waits on the package index (an install spends a few CPU
seconds of its tens of seconds), so the waits overlap; each test then checks its own venv.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.readme_quickstart import run_readme_quickstart

ROOT = Path(__file__).resolve().parents[2]
INSTALL = re.compile(r"pip install (-e )?'?(\.|oncestream)\[([a-z,-]+)\]'?")
INSTALL_TIMEOUT_S = 900.0
COMMAND_TIMEOUT_S = 120.0
# A test waits for its install (the installs run side by side, so the first test may wait for all)
# and then runs its checks (the SQL quickstart: a broker, a node and its Spark session).
TEST_TIMEOUT_S = INSTALL_TIMEOUT_S + 5 * COMMAND_TIMEOUT_S
pytestmark = [pytest.mark.interop, pytest.mark.timeout(TEST_TIMEOUT_S)]
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
    """The README's SQL quickstart with the venv's ``oncestream`` (tests.support.readme_quickstart:
    a broker and a SQL server started as the README says, its statements piped into the shell, the
    push query printing alice's row, no refusal of two-phase commit in the server's log); then,
    with both still up, the venv's shell answers SHOW STREAMS and the server's Spark session is up
    (its whole start-up import chain: it ran the quickstart's queries)."""

    def serving(sql_url: str, server_log: Path) -> None:
        out = _run([str(bin_dir / "oncestream"), "sql", "--server", sql_url, "-e", "SHOW STREAMS;"], env)
        assert "Stream Name" in out, out
        assert "Spark session ready" in server_log.read_text(), server_log.read_text()[-4000:]

    run_readme_quickstart([str(bin_dir / "oncestream")], env, work, while_serving=serving)


@dataclass(frozen=True)
class Install:
    """A documented command run in a fresh venv: its ``bin`` dir, the environment to run it with
    (no PYTHONPATH, the venv first on PATH) and the directory holding the source copy and venv."""

    bin_dir: Path
    env: dict[str, str]
    work: Path


def _install(command: tuple[str, str, str], work: Path) -> Install:
    """Copy the tree into ``work``, make a fresh venv there and run ``command`` in it."""
    editable, _target, extras = command
    source = work / "oncestream"
    shutil.copytree(ROOT, source, ignore=_COPY_IGNORE, symlinks=True)
    venv = work / "venv"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    _run([sys.executable, "-m", "venv", str(venv)], env)
    bin_dir = venv / "bin"
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYSPARK_PYTHON"] = str(bin_dir / "python")
    # pip's default bytecode compilation stays on, as a user's install has it: without it every
    # module is compiled on its first import, and Spark's streaming-source worker (started by the
    # JVM, which waits a fixed 10 s for it to connect back) then timed out under CI's load with
    # "Python worker failed to connect back".
    pip = [str(bin_dir / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    _run(pip + ([editable.strip()] if editable else []) + [f"{source}[{extras}]"], env, INSTALL_TIMEOUT_S, cwd=work)
    return Install(bin_dir, env, work)


@pytest.fixture(scope="module")
def installs(request: pytest.FixtureRequest,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[tuple[str, str, str], Future[Install]]]:
    """The commands of this session's selected ``test_documented_install_gives_a_working_program``
    cases, installed side by side (a thread each; a failed install fails its own test only)."""
    commands = _selected_commands(request)
    with ThreadPoolExecutor(max_workers=max(1, len(commands)), thread_name_prefix="install") as pool:
        yield {command: pool.submit(_install, command, tmp_path_factory.mktemp("install")) for command in commands}


def _selected_commands(request: pytest.FixtureRequest) -> list[tuple[str, str, str]]:
    """The ``command`` parameters of this module's selected tests, in order."""
    found: dict[tuple[str, str, str], None] = {}
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        if item.path == request.path and callspec is not None and "command" in callspec.params:
            found[callspec.params["command"]] = None
    return list(found)


@pytest.mark.parametrize("command", [_param(c) for c in documented_commands()])
def test_documented_install_gives_a_working_program(
        command: tuple[str, str, str], installs: dict[tuple[str, str, str], Future[Install]]) -> None:
    _editable, _target, extras = command
    install = installs[command].result(INSTALL_TIMEOUT_S)
    bin_dir, env, work = install.bin_dir, install.env, install.work
    located = _run([str(bin_dir / "python"), "-c", "import oncestream; print(oncestream.__file__)"], env, cwd=work)
    assert str(ROOT) not in located, f"the venv imports the work tree, not the install: {located}"
    _run([str(bin_dir / "oncestream"), "--help"], env, cwd=work)
    wanted = set(extras.split(","))
    if "spark" in wanted:
        _run([str(bin_dir / "python"), "-c", "import pyarrow, pyspark, oncestream.spark, oncestream.spark.sink"],
             env, cwd=work)
    if "state" in wanted:
        _run([str(bin_dir / "python"), "-c", STATE_STORE_CHECK, str(work / "store")], env, cwd=work)
    if "schema-registry" in wanted:  # the server's whole import chain (it needs a broker to start)
        _run([str(bin_dir / "python"), "-c", "import oncestream.schema_registry.server_main"], env, cwd=work)
        _run([str(bin_dir / "oncestream"), "schema-registry", "--help"], env, cwd=work)
    if "console" in wanted:
        _check_console(bin_dir, env, work)
    if "sql" in wanted:
        _run([str(bin_dir / "oncestream"), "sql-server", "--help"], env, cwd=work)
        _check_sql_server(bin_dir, env, work)


def _check_console(bin_dir: Path, env: dict[str, str], work: Path) -> None:
    """The venv's ``oncestream console`` starts (every page module imported: the app collects
    them) and serves its login page; it needs no broker until someone logs in."""
    users, ready = work / "console-users", work / "console-ready.json"
    users.write_text("")
    console = subprocess.Popen([str(bin_dir / "oncestream"), "console", "--bootstrap-server", "127.0.0.1:9",
                                "--users-file", str(users), "--listen", "127.0.0.1:0", "--ready-file", str(ready)],
                               env=env, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + COMMAND_TIMEOUT_S
        while not ready.exists():
            assert console.poll() is None, (console.stdout.read() if console.stdout else b"").decode()[-4000:]
            assert time.monotonic() < deadline, "the console never wrote its ready file"
            time.sleep(0.1)
        url = json.loads(ready.read_text())["url"]
        with urllib.request.urlopen(f"{url}/login", timeout=COMMAND_TIMEOUT_S) as response:
            assert response.status == 200
            assert b"csrf_token" in response.read()
    finally:
        console.terminate()
        console.wait(COMMAND_TIMEOUT_S)
