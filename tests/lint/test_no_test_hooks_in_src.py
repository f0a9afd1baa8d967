"""No test hook in a production path (issue 19, point 1): nothing under src/ (what the wheel
ships) names a test switch, so no property, option or environment variable can turn shipped
code into test code. Faults and identities reach tests through injected interfaces instead
(broker/seams.py, the SQL node's write-step observer, the state store's commit hook, the Spark
connector's plugins); test helpers live in tests/support.

Checked on the text of every file under src/oncestream (comments and docstrings included: a
switch that is only documented is still a switch someone will set). Run by ``make lint``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "oncestream"

# What a test switch looks like: our property/option namespaces for tests and faults, the
# environment variables the crash points used to read, and the test-hook module itself.
FORBIDDEN = [
    re.compile(r"oncestream\.test\.", re.IGNORECASE),
    re.compile(r"oncestream\.fault\.", re.IGNORECASE),
    re.compile(r"ONCESTREAM_\w*(?:CRASH|FAULT|TEST|GATE|PGID)\w*"),
    re.compile(r"\btesting_hooks\b"),
    # The shipped package never imports the test tree.
    re.compile(r"^\s*(?:from|import)\s+tests(?:\.|\s|$)", re.MULTILINE),
]


def _shipped_text_files() -> list[Path]:
    files = []
    for path in sorted(SRC.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts or path.suffix in (".so", ".pyc"):
            continue
        files.append(path)
    return files


def test_the_scan_sees_the_package() -> None:
    names = {p.relative_to(SRC).as_posix() for p in _shipped_text_files()}
    assert {"broker/dispatch.py", "broker/txn_service.py", "sql/server/node.py", "state/materializer.py"} <= names


@pytest.mark.parametrize("pattern", FORBIDDEN, ids=lambda p: p.pattern)
def test_no_shipped_file_names_a_test_switch(pattern: re.Pattern[str]) -> None:
    hits = []
    for path in _shipped_text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for match in pattern.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            hits.append(f"{path.relative_to(SRC.parent.parent)}:{line}: {match.group(0).strip()}")
    assert not hits, "test switches in shipped code:\n" + "\n".join(hits)


def test_no_test_only_module_ships() -> None:
    """Test drivers live in tests/support (e.g. the group coordinator harness), not in the wheel."""
    modules = [p.relative_to(SRC).as_posix() for p in SRC.rglob("*.py")
               if p.stem == "testing" or p.stem.startswith(("testing_", "test_"))]
    assert not modules, f"test-only modules in src/: {modules}"
