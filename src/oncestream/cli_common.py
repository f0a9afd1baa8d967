"""What the ``oncestream`` command's modules share (``cli`` and ``cli_users``): ``CliError`` and
the one ``--command-config`` reader. Its own module so that ``cli`` can import ``cli_users``
without a cycle."""

from __future__ import annotations

from pathlib import Path


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
