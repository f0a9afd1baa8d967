"""The ``oncestream schema-registry`` subcommand's options. Light on purpose: the ``oncestream``
command imports it at start, and the server's modules (fastavro, jsonschema, protobuf, hypercorn)
are imported only when the subcommand runs (``server_main``)."""

from __future__ import annotations

import argparse
from typing import Any

from oncestream.cli_common import CliError

DEFAULT_LISTEN = "127.0.0.1:8081"


def register(sub: Any) -> None:
    """Add ``schema-registry`` to the ``oncestream`` command's subparsers."""
    p = sub.add_parser("schema-registry", help="run a Schema Registry (Confluent's REST API) on the brokers")
    p.add_argument("--bootstrap-server", required=True, help="Kafka bootstrap HOST:PORT[,HOST:PORT...]")
    p.add_argument("--listen", default=None,
                   help=f"HOST:PORT of the REST API (default {DEFAULT_LISTEN}; port 0: any free port); "
                        "or --config listeners=https://HOST:PORT")
    p.add_argument("--command-config", default=None, metavar="FILE", help="Kafka client properties file")
    p.add_argument("--config", action="append", metavar="KEY=VALUE",
                   help="a registry setting or Kafka client property (docs/schema-registry.md)")
    p.add_argument("--ready-file", default=None, metavar="PATH", help='write {"url": ...} here once serving')
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    try:
        from oncestream.schema_registry.server_main import run
    except ModuleNotFoundError as exc:
        raise CliError(f"schema-registry needs the Python package {exc.name!r}: "
                       "pip install 'oncestream[schema-registry]'") from None
    return run(args, default_listen=DEFAULT_LISTEN)
