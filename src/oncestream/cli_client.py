"""The client plumbing of the ``oncestream`` client commands (``cli``, ``cli_groups``): client
configuration from ``--bootstrap-server`` and ``--command-config``, an ``Admin`` session, and a
client's ``KafkaException`` as a one-line ``CliError``. Its own module so that ``cli`` can
import ``cli_groups`` without a cycle (``cli_common`` is the base layer and imports no client)."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import Any

from oncestream.cli_common import CliError, read_command_config
from oncestream.client import Admin, KafkaError, KafkaException
from oncestream.client.common.connection import parse_bootstrap

CLIENT_ID = "oncestream-cli"


def client_conf(args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    """Client properties from ``--bootstrap-server`` and ``--command-config``, plus ``extra``."""
    host, port = parse_bootstrap(args.bootstrap_server)
    # The file's security (and other) properties first; what the command itself needs wins.
    given = read_command_config(args.command_config) if getattr(args, "command_config", None) else {}
    return {"client.id": CLIENT_ID, **given, "bootstrap.servers": f"{host}:{port}", **extra}


@contextlib.contextmanager
def client_errors(args: argparse.Namespace, what: str) -> Iterator[None]:
    """A client's KafkaException as a one-line CliError: an unreachable bootstrap server gets the
    'broker unreachable at HOST:PORT' message, anything else ``what: ERROR_NAME: detail``."""
    try:
        yield
    except KafkaException as exc:
        err = exc.args[0]
        if isinstance(err, KafkaError) and err.code() == KafkaError._TRANSPORT:
            host, port = parse_bootstrap(args.bootstrap_server)
            raise CliError(f"broker unreachable at {host}:{port} ({err.str()})") from None
        if isinstance(err, KafkaError):
            raise CliError(f"{what}: {err.name()}: {err.str()}") from None
        raise CliError(f"{what}: {exc}") from None


@contextlib.contextmanager
def admin_session(args: argparse.Namespace) -> Iterator[Admin]:
    """An ``Admin`` for the command's cluster, closed afterwards."""
    with client_errors(args, "admin"):
        admin = Admin(client_conf(args))
    try:
        yield admin
    finally:
        admin.close()
