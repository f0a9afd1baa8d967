"""What the ``oncestream`` command's modules share (``cli``, ``cli_groups``, ``cli_users``):
``CliError``, the one ``--command-config`` reader and the client plumbing (configuration from
the common options, an ``Admin`` session, client errors as one-line ``CliError``). Its own module
so that ``cli`` can import the others without a cycle."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from oncestream.client import Admin, KafkaError, KafkaException
from oncestream.client.common.connection import parse_bootstrap

CLIENT_ID = "oncestream-cli"


class CliError(Exception):
    """A user-facing failure: printed without a traceback, exit code 1."""


def read_command_config(path: str) -> dict[str, str]:
    """Client properties from a ``--command-config`` file, as Kafka's tools read it: one
    ``key=value`` per line (librdkafka property names, e.g. ``security.protocol=SSL``,
    ``ssl.ca.location=...``), blank lines and lines starting with ``#`` or ``!`` ignored."""
    props: dict[str, str] = {}
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise CliError(f"--command-config {path}: {exc.strerror or exc}") from None
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise CliError(f"--command-config {path}:{number}: expected key=value, got {raw!r}")
        props[key.strip()] = value.strip()
    return props


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
