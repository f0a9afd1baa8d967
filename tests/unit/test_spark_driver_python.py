"""The driver's Python launcher (oncestream/spark/driver_python.py): run as Spark runs it, with the
installed pyspark's own pyspark.zip first on PYTHONPATH, a module's process imports pyspark from
the installed package (whose bytecode is cached) instead of compiling the zip, and otherwise runs
as ``python -m`` would; any other command line goes to the interpreter unchanged. Real processes
of the installed ``oncestream-driver-python`` script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyspark

from oncestream.spark.driver_python import SCRIPT_NAME, launcher_path, shipped_zip

PYSPARK_DIR = Path(pyspark.__file__).parent
SHIPPED_ZIP = PYSPARK_DIR / "python" / "lib" / "pyspark.zip"
PY4J_ZIP = next((PYSPARK_DIR / "python" / "lib").glob("py4j-*.zip"))

PROBE = """
import json, os, sys
import pyspark
print(json.dumps({"argv": sys.argv, "path0": sys.path[0], "pyspark": pyspark.__file__,
                  "name": __name__, "zip_on_path": any(p.endswith("pyspark.zip") for p in sys.path)}))
"""


def _spark_like(tmp_path: Path, args: list[str], pythonpath: str) -> subprocess.CompletedProcess[str]:
    """Run the launcher the way Spark's PythonWorkerFactory does: the zips first on PYTHONPATH,
    the JVM's working directory as the process's."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([pythonpath, str(tmp_path)]))
    return subprocess.run([launcher_path(), *args], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, check=False)


def test_the_installed_script_is_the_launcher() -> None:
    assert Path(launcher_path()).name == SCRIPT_NAME
    assert SHIPPED_ZIP.is_file()


def test_a_module_runs_as_python_m_with_pyspark_from_the_installed_package(tmp_path: Path) -> None:
    (tmp_path / "probe_module.py").write_text(PROBE)
    zips = os.pathsep.join([str(SHIPPED_ZIP), str(PY4J_ZIP)])
    # The interpreter itself, as Spark starts it without the launcher, imports pyspark from the zip.
    plain = subprocess.run([sys.executable, "-m", "probe_module", "a"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120, check=True,
                           env=dict(os.environ, PYTHONPATH=os.pathsep.join([zips, str(tmp_path)])))
    assert ".zip" in json.loads(plain.stdout)["pyspark"]

    done = _spark_like(tmp_path, ["-m", "probe_module", "worker.module", "--flag"], zips)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["pyspark"] == pyspark.__file__          # the installed package, not the zip
    assert not seen["zip_on_path"]
    assert seen["name"] == "__main__"
    assert seen["argv"] == [str(tmp_path / "probe_module.py"), "worker.module", "--flag"]
    assert Path(seen["path0"]) == tmp_path              # the working directory first, as with -m


def test_another_sparks_zip_stays_and_other_command_lines_go_to_the_interpreter(tmp_path: Path) -> None:
    other = tmp_path / "spark-home" / "python" / "lib" / "pyspark.zip"
    assert shipped_zip([str(other), *sys.path]) is None
    assert shipped_zip([str(SHIPPED_ZIP), *sys.path]) == str(SHIPPED_ZIP)
    done = _spark_like(tmp_path, ["-c", "import sys; print('%d.%d' % sys.version_info[:2])"], str(SHIPPED_ZIP))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{sys.version_info[0]}.{sys.version_info[1]}"


def test_a_failing_module_fails_the_process(tmp_path: Path) -> None:
    (tmp_path / "failing_module.py").write_text("raise SystemExit(3)\n")
    done = _spark_like(tmp_path, ["-m", "failing_module"], str(SHIPPED_ZIP))
    assert done.returncode == 3
