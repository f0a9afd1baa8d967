"""A broker process with one extra background loop that never ends, for the shutdown-bound tests.

``python -m tests.support.stuck_broker --data-dir DIR --listen HOST:PORT [--config k=v ...]`` runs
``oncestream.broker.server.run_broker`` exactly as ``oncestream broker`` does, and hands it (through
its ``background`` seam) a loop that swallows every cancellation: the bug a shutdown must survive.
Nothing in the shipped code knows about it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from oncestream.broker.server import run_broker
from oncestream.broker.state import BrokerState


async def loop_that_loses_every_cancellation(_state: BrokerState) -> None:
    """Sleeps forever; a cancellation only starts the next sleep."""
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            logging.getLogger("stuck-loop").info("cancelled, and carrying on")
            continue


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--listen", required=True)
    parser.add_argument("--config", action="append", default=[])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    host, _, port = args.listen.rpartition(":")
    props = dict(item.split("=", 1) for item in args.config)
    return run_broker(Path(args.data_dir), host, int(port), props, background=[loop_that_loses_every_cancellation])


if __name__ == "__main__":
    sys.exit(main())
