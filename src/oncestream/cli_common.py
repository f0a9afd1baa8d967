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
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise CliError(f"--command-config {path}: {exc.strerror or exc}") from None
    return parse_properties(text, f"--command-config {path}")


def parse_properties(text: str, where: str) -> dict[str, str]:
    """``key=value`` lines of ``text`` (blank lines and lines starting with ``#`` or ``!``
    ignored); CliError naming ``where`` and the line number of a line that is not one."""
    props: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise CliError(f"{where}:{number}: expected key=value, got {raw!r}")
        props[key.strip()] = value.strip()
    return props
