"""Kafka's ``sasl.jaas.config`` syntax, as far as the broker's PLAIN and SCRAM modules read it.

``org.apache.kafka.common.security.plain.PlainLoginModule required username="admin"
password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";`` — a login module
class, a control flag, then ``key="value"`` options, ended by ``;``. PLAIN's server side takes
every ``user_NAME`` option as a user and its password.
"""

from __future__ import annotations

import re

from oncestream.errors import InvalidConfigError

_HEAD = re.compile(r"\s*([A-Za-z_$][\w.$]*)\s+(required|requisite|sufficient|optional)\s*")
_OPTION = re.compile(r'\s*([^\s=;]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))\s*')


def parse_jaas_options(text: str) -> dict[str, str]:
    """The options of the single login module in ``text``; InvalidConfigError if malformed."""
    head = _HEAD.match(text)
    if head is None:
        raise InvalidConfigError(f"sasl.jaas.config: expected 'LoginModule required ...;', got {text!r}")
    pos = head.end()
    options: dict[str, str] = {}
    while pos < len(text) and text[pos] != ";":
        m = _OPTION.match(text, pos)
        if m is None:
            raise InvalidConfigError(f"sasl.jaas.config: cannot parse options at {text[pos:pos + 30]!r}")
        value = m.group(2) if m.group(2) is not None else m.group(3)
        options[m.group(1)] = re.sub(r"\\(.)", r"\1", value)
        pos = m.end()
    if text[pos:].strip() != ";":
        raise InvalidConfigError("sasl.jaas.config must end with ';'")
    return options


def plain_users(text: str) -> dict[str, str]:
    """``user_NAME="PASSWORD"`` options of a PlainLoginModule config, as {NAME: PASSWORD}."""
    return {key[len("user_"):]: value for key, value in parse_jaas_options(text).items()
            if key.startswith("user_") and len(key) > len("user_")}
