"""A librdkafka ShareConsumer in a child process, for tests that SIGKILL a share-group member.

    python -m tests.support.share_member BOOTSTRAP GROUP TOPIC

Polls in explicit acknowledgement mode and never acknowledges: once it holds records it prints
one JSON line per record ({"offset": ..., "delivery_count": ...}), then ``HOLDING`` and sleeps
until it is killed, keeping its acquisition locks until they expire on the broker.
"""

from __future__ import annotations

import json
import sys
import time

from confluent_kafka import ShareConsumer

POLL_LIMIT_S = 60.0


def main(argv: list[str]) -> int:
    bootstrap, group_id, topic = argv
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group_id,
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([topic])
    deadline = time.monotonic() + POLL_LIMIT_S
    while time.monotonic() < deadline:
        messages = [m for m in consumer.poll(0.5) if m.error() is None]
        if messages:
            for m in messages:
                print(json.dumps({"offset": m.offset(), "delivery_count": m.delivery_count()}), flush=True)
            print("HOLDING", flush=True)
            time.sleep(3600)  # never acknowledge; the test kills this process
    print("NOTHING", flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
