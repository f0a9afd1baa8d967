"""The README's SQL quickstart, run as written (issue 24 point 7), by the work tree's program
(``python -m oncestream.cli`` for ``.venv/bin/oncestream``): tests.support.readme_quickstart.

Marked slow: the default run runs the same quickstart with the program that the README's install
command (``pip install -e '.[sql]'``) put in a fresh venv
(tests/interop/test_install_commands.py), which is what a reader of the README does; one Spark
start-up instead of two.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.support.cluster_kind import README_QUICKSTART_BROKER, not_on_cluster
from tests.support.readme_quickstart import ROOT, run_readme_quickstart

pytestmark = [pytest.mark.interop, pytest.mark.spark, not_on_cluster(README_QUICKSTART_BROKER)]


@pytest.mark.slow
def test_readme_sql_quickstart_prints_the_row(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")])
    run_readme_quickstart([sys.executable, "-m", "oncestream.cli"], env, tmp_path)
