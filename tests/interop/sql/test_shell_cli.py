"""``oncestream sql`` as a process: ``-f`` exit codes, and Ctrl-C (SIGINT) during a push query
closes the query on the server and ends the command cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster_kind import IN_MEMORY_SQL_ENGINE, not_on_cluster
from tests.unit.sql.test_rest_support import RunningServer, running_server, wait_until

pytestmark = [pytest.mark.interop, not_on_cluster(IN_MEMORY_SQL_ENGINE)]

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with running_server() as srv:
        yield srv


def shell_command(server: RunningServer, *argv: str) -> list[str]:
    return [sys.executable, "-m", "oncestream.cli", "sql", "--server", server.url, *argv]


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), e.get("PYTHONPATH", "")])
    return e


def test_file_with_an_error_exits_1_and_prints_the_message(server: RunningServer, tmp_path: Path) -> None:
    script = tmp_path / "s.sql"
    script.write_text("SHOW STREAMS;\nFAIL on purpose;\nSHOW STREAMS;\n", encoding="utf-8")
    done = subprocess.run(shell_command(server, "-f", str(script)), capture_output=True, text=True, env=env(),
                          timeout=120)
    assert done.returncode == 1
    assert done.stderr == "Cannot do on purpose\n"
    assert done.stdout.count("Stream Name") == 1
    ok = subprocess.run(shell_command(server, "-e", "SHOW STREAMS;"), capture_output=True, text=True, env=env(),
                        timeout=120)
    assert (ok.returncode, ok.stderr) == (0, "")


def test_ctrl_c_stops_a_push_query_and_closes_it_on_the_server(server: RunningServer) -> None:
    before = len(server.engine.queries)
    # Ctrl-C as at a terminal: SIGINT at its default disposition. A shell script's background job
    # (make test runs the interop suites with `&`) starts with SIGINT ignored, which the shell
    # would inherit and Python then keeps (no KeyboardInterrupt): the CI runs of 12f45b5 and
    # 032c16c hung here.
    process = subprocess.Popen(shell_command(server, "-e", "SELECT * FROM S EMIT CHANGES;"), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env(),
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert process.stdout is not None
        header = [process.stdout.readline() for _ in range(3)]
        assert header[1].startswith("|ID ")
        assert wait_until(lambda: len(server.engine.queries) > before)
        query = server.engine.queries[list(server.engine.queries)[-1]]
        server.engine.publish("S", [42, "live"])
        assert process.stdout.readline().startswith("|42 ")
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert out == "Query terminated\n"
    assert wait_until(query.closed.is_set)


def test_statements_piped_into_stdin_run_as_a_script(server: RunningServer) -> None:
    done = subprocess.run(shell_command(server), input="SHOW STREAMS;\nFAIL piped;\n", capture_output=True, text=True,
                          env=env(), timeout=120)
    assert done.returncode == 1
    assert "Stream Name" in done.stdout
    assert done.stderr == "Cannot do piped\n"
