"""The cost of TLS and SASL: produce and consume MB/s over SSL / SASL_SSL / SASL_PLAINTEXT vs
PLAINTEXT, with librdkafka.

One broker with four listeners (PLAINTEXT, SSL, SASL_SSL and SASL_PLAINTEXT on 127.0.0.1, port
0; PEM keystore made by tests/support/certs.py, EC P-256 key, TLS 1.3 as negotiated by default;
SASL with ``--sasl-mechanism``, PLAIN or a SCRAM user bootstrapped in the data dir); for each
protocol of ``--protocols`` in turn (for ``--rounds``) a fresh topic, then produce
``--mb`` MB of 1 KiB records (acks=all, idempotent, linger.ms=5, batch.size=1 MiB) and consume
them back from offset 0 (every offset checked once). Broker and client share this machine.

    .venv/bin/python bench/tls.py               # 1 round, 100 MB per protocol, PLAINTEXT vs SSL
    .venv/bin/python bench/tls.py --mb 200 --rounds 2
    .venv/bin/python bench/tls.py --protocols PLAINTEXT,SASL_SSL --sasl-mechanism SCRAM-SHA-512

A benchmark command, not a test: it checks only that every record arrived exactly once.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import uuid
from pathlib import Path

from confluent_kafka import libversion as librdkafka_version
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from oncestream.broker.sasl.credentials import ScramCredentialStore
from oncestream.broker.sasl.scram import MECHANISMS, make_credential
from oncestream.broker_process import OnceStreamBroker
from tests.support.certs import make_pki

sys.path.insert(0, str(Path(__file__).resolve().parent))
from produce_consume import consume, produce  # the same client loops as the broker benchmark

MB = 1_000_000
VALUE_BYTES = 1024
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL", "SASL_PLAINTEXT")
SASL_USER, SASL_PASSWORD = "bench", "bench-secret"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=100, help="MB produced and consumed per protocol and round")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--protocols", default="PLAINTEXT,SSL",
                        help=f"comma-separated, PLAINTEXT first (the baseline); of {', '.join(PROTOCOLS)}")
    parser.add_argument("--sasl-mechanism", default="SCRAM-SHA-256", choices=["PLAIN", *MECHANISMS])
    args = parser.parse_args(argv)
    protocols = [p.strip().upper() for p in args.protocols.split(",") if p.strip()]
    if not protocols or protocols[0] != "PLAINTEXT" or not set(protocols) <= set(PROTOCOLS):
        parser.error(f"--protocols must start with PLAINTEXT and name only {', '.join(PROTOCOLS)}")
    count = args.mb * MB // VALUE_BYTES
    results: dict[str, dict[str, list[float]]] = {p: {"produce": [], "consume": []} for p in protocols}
    with tempfile.TemporaryDirectory(prefix="bench-tls-") as tmp:
        work = Path(tmp)
        pki = make_pki(work / "pki")
        (work / "data").mkdir()
        if args.sasl_mechanism in MECHANISMS:  # what `oncestream users add --data-dir` writes
            ScramCredentialStore.open(work / "data").apply(
                [(SASL_USER, args.sasl_mechanism, make_credential(MECHANISMS[args.sasl_mechanism], SASL_PASSWORD))], [])
        broker = OnceStreamBroker(work / "data", config={
            "listeners": ",".join(f"{p}://127.0.0.1:0" for p in PROTOCOLS),
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
            "sasl.enabled.mechanisms": args.sasl_mechanism,
            "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
                                f'user_{SASL_USER}="{SASL_PASSWORD}";',
        })
        broker.start()
        try:
            tls = {"ssl.ca.location": str(pki.ca)}
            sasl = {"sasl.mechanism": args.sasl_mechanism, "sasl.username": SASL_USER, "sasl.password": SASL_PASSWORD}
            security = {"PLAINTEXT": {}, "SSL": tls, "SASL_SSL": {**tls, **sasl}, "SASL_PLAINTEXT": sasl}
            confs = {p: {"bootstrap.servers": broker.listener_bootstrap(p), "security.protocol": p, **security[p]}
                     for p in protocols}
            admin = AdminClient(confs["PLAINTEXT"])
            for round_no in range(args.rounds):
                for protocol, conf in confs.items():
                    topic = f"bench-tls-{protocol.lower()}-{uuid.uuid4().hex[:8]}"
                    for name in (topic, f"{topic}-warmup"):  # warm-up: see produce_consume.produce
                        admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
                    produced = produce(conf, topic, count, b"x" * VALUE_BYTES, f"{topic}-warmup").mb_per_s
                    consumed = consume(conf, topic, count, VALUE_BYTES).mb_per_s
                    results[protocol]["produce"].append(produced)
                    results[protocol]["consume"].append(consumed)
                    print(f"round {round_no + 1} {protocol:14s} produce {produced:7.1f} MB/s  "
                          f"consume {consumed:7.1f} MB/s", flush=True)
            del admin  # librdkafka's admin has no close(): drop it before the broker goes away
        finally:
            broker.stop()
    sasl_note = f", SASL {args.sasl_mechanism}" if any(p.startswith("SASL_") for p in protocols) else ""
    print(f"\nlibrdkafka {librdkafka_version()[0]}, {args.mb} MB of {VALUE_BYTES}-byte records per run, "
          f"{args.rounds} round(s){sasl_note}, median:")
    for direction in ("produce", "consume"):
        plain = statistics.median(results["PLAINTEXT"][direction])
        line = f"  {direction:8s} PLAINTEXT {plain:7.1f} MB/s"
        for protocol in protocols[1:]:
            secured = statistics.median(results[protocol][direction])
            line += f"   {protocol} {secured:7.1f} MB/s ({secured / plain:4.2f}x)"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
