"""One query-assignment member (the real ``oncestream.sql.server.assignment.QueryAssignment``, what every
SQL-server node runs) in a process of its own, so that a test can SIGKILL it like a crashed node
without starting a SQL server, Spark and all.

    python -m tests.support.assignment_member --bootstrap B --service-id S --url U \
        --queries Q1,Q2 --out FILE [--instance-id I] [--session-timeout-ms N]

The "queries" are names the member runs by recording them. Every assignment it receives is
appended to ``--out`` as one JSON line ``{"generation", "memberId", "mine", "pid"}`` (``null``
when the membership was lost). SIGTERM stops it cleanly (``QueryAssignment.stop``: LeaveGroup).
``MemberProcess`` starts one and reads its lines.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    from oncestream.sql.server.assignment import Assignment, QueryAssignment

    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--service-id", required=True)
    p.add_argument("--url", required=True)
    p.add_argument("--queries", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--instance-id", default=None)
    p.add_argument("--session-timeout-ms", type=int, default=60_000)
    args = p.parse_args(argv)
    queries = sorted(q for q in args.queries.split(",") if q)
    running: set[str] = set()
    lock = threading.Lock()
    out = Path(args.out)
    member: QueryAssignment

    def owned() -> list[str]:
        with lock:
            return sorted(running)

    def on_assignment(assignment: Assignment | None) -> None:
        with lock:
            running.clear()
            running.update(assignment.mine if assignment is not None else ())
        line = {"generation": None if assignment is None else assignment.generation,
                "memberId": None if assignment is None else assignment.member_id,
                "mine": None if assignment is None else sorted(assignment.mine), "pid": os.getpid()}
        with out.open("a") as f:
            f.write(json.dumps(line) + "\n")
        member.poke()

    member = QueryAssignment(
        service_id=args.service_id, url=args.url, client_conf={"bootstrap.servers": args.bootstrap},
        known_queries=lambda: (len(queries), list(queries)), owned=owned,
        wait_for_offset=lambda offset, timeout_s: True, on_assignment=on_assignment,
        session_timeout_ms=args.session_timeout_ms, heartbeat_interval_ms=300, instance_id=args.instance_id)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    member.start()
    stop.wait()
    member.stop()
    return 0


class MemberProcess:
    """A member process (``start`` again after ``kill``/``terminate``: a restart with the same
    instance id, appending to the same file)."""

    def __init__(self, *, bootstrap: str, service_id: str, url: str, queries: list[str], out: Path,
                 instance_id: str | None, session_timeout_ms: int) -> None:
        self.argv = [sys.executable, "-m", "tests.support.assignment_member", "--bootstrap", bootstrap,
                     "--service-id", service_id, "--url", url, "--queries", ",".join(queries), "--out", str(out),
                     "--session-timeout-ms", str(session_timeout_ms)]
        if instance_id is not None:
            self.argv += ["--instance-id", instance_id]
        self.out = out
        self.process: subprocess.Popen[bytes] | None = None
        self._log = out.with_suffix(".log")

    def start(self) -> MemberProcess:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")])
        with open(self._log, "ab") as log:
            self.process = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env=env, cwd=ROOT)
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def lines(self) -> list[dict[str, Any]]:
        """Every assignment recorded so far, oldest first."""
        if not self.out.exists():
            return []
        return [json.loads(line) for line in self.out.read_text().splitlines() if line.strip()]

    def of_this_run(self) -> list[dict[str, Any]]:
        """The assignments the current process received."""
        return [line for line in self.lines() if line["pid"] == self.pid]

    def latest(self) -> dict[str, Any] | None:
        mine = self.of_this_run()
        return mine[-1] if mine else None

    def kill(self) -> None:
        """SIGKILL (a crash: no LeaveGroup) and reap."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
        if self.process is not None:
            self.process.wait()

    def terminate(self, timeout_s: float = 30.0) -> int:
        """SIGTERM (a clean stop: LeaveGroup); returns the exit status."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout_s)

    def log_tail(self) -> str:
        return self._log.read_text(errors="replace")[-4000:] if self._log.exists() else ""


if __name__ == "__main__":
    sys.exit(main())
