"""The interpreter Spark starts the driver's Python data-source processes with (PYSPARK_DRIVER_PYTHON).

Why this exists: Spark starts the connector's streaming-source process on the driver itself (not
through its fork daemon) and gives it a fixed 10 s to connect back (PythonWorkerFactory's simple
worker; not configurable); past that the query fails with "Python worker failed to connect back".
Spark also puts ``SPARK_HOME/python/lib/pyspark.zip`` first on that process's PYTHONPATH, and
Python keeps no bytecode cache for modules imported from a zip: every start compiles pyspark's
modules from source. Measured here (2 cores, PySpark 4.3): importing the source runner takes 1.8
CPU s from the zip against 0.6 from the installed package, whose bytecode is cached; on a loaded
machine the zip start passed the 10 s, and queries failed for that alone (CI runs of 2026-11-30).

``main`` (installed as the ``oncestream-driver-python`` script) is what Spark runs in place of the
interpreter: for ``-m MODULE ARGS`` it removes from ``sys.path`` the pyspark.zip that ships inside
the installed pyspark package (the same files, so nothing else changes) and runs the module as
``python -m`` would; anything else (Spark also asks the interpreter for its version with ``-c``)
is handed to the interpreter unchanged. A pyspark.zip of another Spark (an operator's SPARK_HOME)
is left in place. No library does this; it is a few lines around ``runpy``.
"""

from __future__ import annotations

import importlib.machinery
import os
import runpy
import sys
import sysconfig
from pathlib import Path

SCRIPT_NAME = "oncestream-driver-python"


def launcher_path() -> str:
    """The ``oncestream-driver-python`` script of this installation, or this interpreter when the
    script is not there (a source checkout run without installing): the value to give
    PYSPARK_DRIVER_PYTHON when the operator did not."""
    for directory in (Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))):
        candidate = directory / SCRIPT_NAME
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return sys.executable


def default_spark_pythons() -> None:
    """Before a Spark session of ours starts: the operator's PYSPARK_PYTHON and
    PYSPARK_DRIVER_PYTHON are kept; unset, the executors' Python is this interpreter and the
    driver's data-source processes run ``launcher_path()``."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", launcher_path())


def shipped_zip(path: list[str]) -> str | None:
    """The ``python/lib/pyspark.zip`` inside the pyspark package that ``path`` holds outside any
    zip (the installed one), if that zip is on ``path``."""
    unzipped = [entry for entry in path if not entry.endswith(".zip")]
    spec = importlib.machinery.PathFinder.find_spec("pyspark", unzipped)
    if spec is None or not spec.submodule_search_locations:
        return None
    package_dir = Path(next(iter(spec.submodule_search_locations)))
    shipped = package_dir / "python" / "lib" / "pyspark.zip"
    for entry in path:
        if entry.endswith(".zip") and Path(entry) == shipped:
            return entry
    return None


def main() -> None:
    """Run ``-m MODULE ARGS`` as ``python -m`` would, without the shipped pyspark.zip on the path;
    hand any other command line to the interpreter."""
    args = sys.argv[1:]
    if len(args) < 2 or args[0] != "-m":
        os.execv(sys.executable, [sys.executable, *args])
    zipped = shipped_zip(sys.path)
    if zipped is not None:
        sys.path[:] = [entry for entry in sys.path if entry != zipped]
    # As ``python -m``: the working directory first on the path (not this script's directory), and
    # argv[0] the module's file (runpy sets it), then the module's own arguments.
    if sys.path and Path(sys.path[0]).resolve() == Path(sys.argv[0]).resolve().parent:
        sys.path[0] = os.getcwd()
    else:
        sys.path.insert(0, os.getcwd())
    sys.argv = [args[1], *args[2:]]
    runpy.run_module(args[1], run_name="__main__", alter_sys=True)
