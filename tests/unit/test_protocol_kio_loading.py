"""protocol/kio_loading.py: kio is loaded without importing hypothesis, and kio's types still get
their hypothesis strategies once hypothesis is imported.

Each case runs in a fresh interpreter: what is checked is the order of imports in a new process,
which this pytest process (hypothesis and kio long imported) cannot show.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _run(code: str) -> str:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_importing_the_client_and_using_the_codec_does_not_import_hypothesis() -> None:
    out = _run("""
        import sys
        import oncestream.errors  # imports kio first of all (the broker's first import)
        from oncestream.client import Consumer, Producer, Admin
        from oncestream.protocol.schemas import request_class
        import kio.static._phantom as phantom
        request_class(3, 12)
        print("hypothesis" in sys.modules, phantom.hypothesis is None)
    """)
    assert out == "False True"


def test_hypothesis_imported_later_still_resolves_kio_types_after_registration() -> None:
    """The marker hiding hypothesis is gone after kio's import (hypothesis imports normally), and
    ``register_kio_strategies`` gives kio's types the strategies kio's own hooks define."""
    out = _run("""
        import oncestream.protocol
        from hypothesis import strategies as st, given, settings
        from kio.static.primitive import i16, u8
        from kio.schema.types import TopicName
        from oncestream.protocol.kio_loading import register_kio_strategies
        from oncestream.protocol.schemas import request_class
        register_kio_strategies()
        print(st.from_type(i16), st.from_type(u8))
        seen = []

        @settings(max_examples=20, database=None)
        @given(st.from_type(TopicName), st.from_type(request_class(3, 12)))
        def check(name, request):
            seen.append((type(name), type(request).__name__))
        check()
        print(sorted(set(seen)))
    """)
    lines = out.splitlines()
    assert lines[0] == "integers(min_value=-32768, max_value=32767) integers(min_value=0, max_value=255)"
    assert lines[1] == "[(<class 'str'>, 'MetadataRequest')]"


def test_hypothesis_imported_first_leaves_kio_registering_its_own_strategies() -> None:
    out = _run("""
        import hypothesis.strategies as st
        import oncestream.protocol
        import kio.static._phantom as phantom
        from kio.static.primitive import i32
        print(phantom.hypothesis is not None, st.from_type(i32).example() in range(-2**31, 2**31))
    """)
    assert out == "True True"
