"""``oncestream client-metrics list|describe|alter|delete``: KIP-714 ClientMetrics subscriptions,
with the options of Kafka's ``kafka-client-metrics.sh``::

    oncestream client-metrics alter --name producers --metrics org.apache.kafka.producer. \\
        --interval 10000 --match client_software_name=confluent-kafka-python
    oncestream client-metrics describe [--name producers]
    oncestream client-metrics list
    oncestream client-metrics delete --name producers

``alter`` sets only what is given (``--metrics`` and ``--match`` are comma-separated lists;
``--metrics '*'`` for every metric); ``delete`` removes every config of the subscription, which
removes it.
"""

from __future__ import annotations

import argparse
from typing import Any

from oncestream.cli_client import admin_session, client_errors
from oncestream.cli_common import CliError


def register(sub: Any) -> None:
    """Add the ``client-metrics`` command to the top-level subparsers."""
    c = sub.add_parser("client-metrics", help="KIP-714 client metrics subscriptions (kafka-client-metrics' options)")
    c.add_argument("action", choices=["list", "describe", "alter", "delete"])
    c.add_argument("--name", help="the subscription (a ClientMetrics config resource)")
    c.add_argument("--metrics", metavar="PREFIX[,PREFIX]", help="metric-name prefixes, '*' for all")
    c.add_argument("--interval", type=int, metavar="MS", help="push interval in ms (100..3600000)")
    c.add_argument("--match", metavar="KEY=REGEX[,KEY=REGEX]",
                   help="client_id, client_instance_id, client_software_name, client_software_version, "
                        "client_source_address, client_source_port")
    c.add_argument("--bootstrap-server", "-b", default="127.0.0.1:9092")
    c.add_argument("--command-config", metavar="FILE",
                   help="client properties file (key=value, librdkafka names: security.protocol, ssl.*, sasl.*)")
    c.set_defaults(func=cmd_client_metrics)


def cmd_client_metrics(args: argparse.Namespace) -> int:
    if args.action in ("alter", "delete") and not args.name:
        raise CliError(f"{args.action} needs --name")
    with admin_session(args) as admin, client_errors(args, f"{args.action} client metrics"):
        if args.action == "list":
            for name in admin.list_client_metrics():
                print(name)
        elif args.action == "describe":
            for name in [args.name] if args.name else admin.list_client_metrics():
                configs = admin.describe_client_metrics(name)
                values = ", ".join(f"{key}={value or ''}" for key, value in sorted(configs.items()))
                print(f"Client metrics configs for {name} are {values}")
        elif args.action == "alter":
            changes: dict[str, str | None] = {}
            if args.metrics is not None:
                changes["metrics"] = args.metrics
            if args.interval is not None:
                changes["interval.ms"] = str(args.interval)
            if args.match is not None:
                changes["match"] = args.match
            if not changes:
                raise CliError("alter needs --metrics, --interval or --match")
            admin.alter_client_metrics(args.name, changes)
            print(f"Altered client metrics config for {args.name}.")
        else:
            admin.alter_client_metrics(args.name, {"metrics": None, "interval.ms": None, "match": None})
            print(f"Deleted client metrics config for {args.name}.")
    return 0
