"""``oncestream console``: run the web console (registered by ``oncestream.cli``)."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from oncestream.cli_common import CliError, read_command_config
from oncestream.durable_files import write_file_atomically
from oncestream.sql.server.rest.users_file import UsersFileError, load_users

log = logging.getLogger(__name__)


def register(sub: Any) -> None:
    """Add the ``console`` command to the top-level subparsers."""
    c = sub.add_parser("console", help="run the web console (docs/console.md)")
    c.add_argument("--bootstrap-server", "-b", required=True, metavar="HOST:PORT")
    c.add_argument("--sql-server", metavar="URL", help="the SQL server's REST API (e.g. http://127.0.0.1:8088)")
    c.add_argument("--listen", default="127.0.0.1:8480", metavar="HOST:PORT",
                   help="where the console listens (default 127.0.0.1:8480; port 0 picks a free one)")
    c.add_argument("--command-config", metavar="FILE",
                   help="client properties file for the cluster (security.protocol, ssl.*, sasl.*)")
    c.add_argument("--users-file", required=True, metavar="FILE",
                   help="the console's users: USER:$scrypt$... lines, written by `oncestream sql-users add --file FILE`")
    c.add_argument("--tls-cert", metavar="PEM", help="serve HTTPS with this certificate chain")
    c.add_argument("--tls-key", metavar="PEM", help="the private key of --tls-cert (default: in the same file)")
    c.add_argument("--metrics-url", action="append", default=[], metavar="URL",
                   help="a broker's Prometheus /metrics (metrics.listen), once per broker: throughput on the Overview")
    c.add_argument("--ready-file", metavar="PATH", help="write {\"url\": ...} as JSON here once listening")
    c.add_argument("--log-level", default="info")
    c.set_defaults(func=cmd_console)


def _listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise CliError(f"--listen expects HOST:PORT, got {text!r}")
    return host or "0.0.0.0", int(port)


def cmd_console(args: argparse.Namespace) -> int:
    from oncestream.console.app import create_app
    from oncestream.console.serve import run
    from oncestream.console.settings import ConsoleSettings
    from oncestream.logging_setup import LogConfigError, LogSettings, configure_logging

    try:
        configure_logging(LogSettings.from_properties({}, args.log_level))
    except LogConfigError as exc:
        raise CliError(str(exc)) from None
    try:
        users = load_users(args.users_file)
    except UsersFileError as exc:
        raise CliError(str(exc)) from None
    if not users:
        log.warning("the users file %s names no user: nobody can log in "
                    "(add one: oncestream sql-users add --file %s --user NAME)", args.users_file, args.users_file)
    if bool(args.tls_key) and not args.tls_cert:
        raise CliError("--tls-key needs --tls-cert")
    host, port = _listen(args.listen)
    settings = ConsoleSettings(
        bootstrap_servers=args.bootstrap_server, users_file=Path(args.users_file), sql_server_url=args.sql_server,
        client_config=read_command_config(args.command_config) if args.command_config else {},
        listen_host=host, listen_port=port, tls_cert_file=args.tls_cert, tls_key_file=args.tls_key,
        metrics_urls=tuple(args.metrics_url))

    def ready(url: str) -> None:
        if args.ready_file:
            write_file_atomically(Path(args.ready_file), json.dumps({"url": url}).encode())

    run(create_app(settings), settings, ready)
    return 0
