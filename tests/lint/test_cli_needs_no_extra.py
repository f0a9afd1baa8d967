"""`oncestream` (the command line every install has) builds its parser without any optional
extra: `pip install oncestream` then `oncestream broker` must work. A sub-command imports what its
extra brings only when it runs. Checked in a fresh interpreter whose imports of the extras'
packages fail, as they do in an install without them."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# The packages only the optional extras (sql, spark, state, schema-registry, console, test) bring.
EXTRAS_ONLY = ("sqlglot", "pyspark", "pyarrow", "pandas", "rocksdict", "fastavro", "jsonschema",
               "starlette", "jinja2", "hypercorn", "httpx", "confluent_kafka", "google.protobuf")


def test_the_command_line_builds_without_any_extra() -> None:
    script = textwrap.dedent(f"""
        import importlib.abc, sys
        BLOCKED = {EXTRAS_ONLY!r}

        class NoExtras(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if any(name == b or name.startswith(b + ".") for b in BLOCKED):
                    raise ModuleNotFoundError(f"No module named {{name!r}} (an extra's package)")
                return None

        sys.meta_path.insert(0, NoExtras())
        from oncestream.cli import build_parser
        build_parser()
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"
