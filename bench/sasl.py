"""SASL authentication handshakes per second on one oncestream broker (issue 14 benchmark).

Each handshake is a new TCP connection: ApiVersions, SaslHandshake v1, then SaslAuthenticate
round trips (two for SCRAM), made by our blocking client (``client/common/connection.py``) from
``--threads`` threads. The client pre-computes nothing: every SCRAM login runs the client's
PBKDF2 too, so the end-to-end figure is bounded by both sides sharing the machine's cores; the
in-process figure is the broker's sans-io ``ScramServer`` alone (verification work per login).

    .venv/bin/python bench/sasl.py [--seconds 5] [--threads 4] [--iterations 4096]

This is a benchmark command, not a test.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from oncestream.broker.sasl.scram import SCRAM_SHA_512, ScramServer, make_credential
from oncestream.broker_process import OnceStreamBroker
from oncestream.client.common.connection import BrokerConnection
from oncestream.client.common.sasl import SaslCredentials, ScramClient
from tests.support.sasl import add_scram_users, sasl_broker_config


def end_to_end(bootstrap: str, creds: SaslCredentials | None, seconds: float, threads: int) -> float:
    host, port = bootstrap.rsplit(":", 1)
    counts = [0] * threads
    stop_at = time.monotonic() + seconds

    def run(i: int) -> None:
        while time.monotonic() < stop_at:
            BrokerConnection(host, int(port), sasl=creds).close()
            counts[i] += 1

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    start = time.monotonic()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return sum(counts) / (time.monotonic() - start)


def server_side_only(iterations: int, seconds: float) -> float:
    """Logins per second of the broker's SCRAM verification alone (client messages precomputed
    outside the timed part)."""
    cred = make_credential(SCRAM_SHA_512, "pw", iterations)
    done = 0
    spent_s = 0.0
    while spent_s < seconds:
        client = ScramClient("SCRAM-SHA-512", "u", "pw")
        server = ScramServer(SCRAM_SHA_512, lambda user, mech: cred)
        t = time.perf_counter()
        server_first = server.first(client.first())
        spent_s += time.perf_counter() - t
        final = client.final(server_first)
        t = time.perf_counter()
        server.final(final)
        spent_s += time.perf_counter() - t
        done += 1
    return done / spent_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--iterations", type=int, default=4096)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        data_dir.mkdir()
        add_scram_users(data_dir, {"bench": "bench-pw"}, iterations=args.iterations)
        broker = OnceStreamBroker(data_dir, config=sasl_broker_config())
        broker.start()
        try:
            for name, creds in [("SCRAM-SHA-512", SaslCredentials("SCRAM-SHA-512", "bench", "bench-pw")),
                                ("PLAIN", SaslCredentials("PLAIN", "alice", "alice-secret"))]:
                rate = end_to_end(broker.bootstrap, creds, args.seconds, args.threads)
                print(f"{name:14s} end to end ({args.threads} threads): {rate:8.0f} handshakes/s")
        finally:
            broker.stop()
    print(f"SCRAM-SHA-512  broker verification only, i={args.iterations}: "
          f"{server_side_only(args.iterations, args.seconds):8.0f} logins/s (one core)")


if __name__ == "__main__":
    main()
