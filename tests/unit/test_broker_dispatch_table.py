"""The dispatcher's handler table must match the advertised API versions exactly, and the check
is a raised error (``python -O`` strips asserts)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from oncestream.broker.dispatch import HANDLERS, HandlerTableError, check_handler_table
from oncestream.protocol.api_keys import API_VERSIONS


def test_the_shipped_table_matches() -> None:
    check_handler_table(HANDLERS, API_VERSIONS)


def test_an_advertised_api_without_a_handler_is_refused() -> None:
    versions = dict(API_VERSIONS)
    versions[9999] = (0, 0)
    with pytest.raises(HandlerTableError, match="9999"):
        check_handler_table(HANDLERS, versions)


def test_a_handler_nobody_advertises_is_refused() -> None:
    handlers = dict(HANDLERS)
    handlers[9998] = HANDLERS[18]
    with pytest.raises(HandlerTableError, match="9998"):
        check_handler_table(handlers, API_VERSIONS)


def test_the_check_survives_python_dash_o() -> None:
    code = (
        "from oncestream.broker.dispatch import HANDLERS, HandlerTableError, check_handler_table\n"
        "try:\n"
        "    check_handler_table(HANDLERS, {})\n"
        "except HandlerTableError:\n"
        "    print('refused')\n"
    )
    out = subprocess.run([sys.executable, "-O", "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "refused"
