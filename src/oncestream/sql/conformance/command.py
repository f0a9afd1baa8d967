"""``oncestream sql-conformance PATH``: run ksqlDB's query-validation tests (a checkout's
``ksqldb-functional-tests/src/test/resources/query-validation-tests``, or any directory or file of
QTT JSON) through this SQL engine and print, per file and in total, how many cases pass, fail or
are out of scope and why (docs/sql-conformance.md).

    oncestream sql-conformance PATH [--files GLOB] [--cases REGEX] [--jobs N] [--json OUT]
        [--bootstrap-server HOST:PORT] [--schema-registry-url URL] [--spark-master MASTER]
        [--budget-s S] [--interleave] [--resume] [--verbose]

Without ``--bootstrap-server`` it starts its own broker (``oncestream broker`` with
``transaction.two.phase.commit.enable=true``, which the exactly-once sink needs) in a temporary
directory, and an ``oncestream schema-registry`` on that broker unless ``--schema-registry-url``
names one; one Spark session, one broker and one registry serve every case. Cases out of scope by their text
are classified without starting either. ``--budget-s`` stops starting cases after that many
seconds (the cases left are listed as not run, outside the totals). ``--json OUT`` is rewritten
after every case; ``--resume`` keeps the results OUT already holds and runs only the other cases,
so the whole suite (hours on a small machine) can be measured in parts. Each result records the
engine revision it ran on (``engine_revision``), and the report says when a total mixes several.
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from oncestream.spark.driver_python import default_spark_pythons
from oncestream.sql.conformance.case_runner import CaseEnvironment, CaseResult, CaseRun, Outcome
from oncestream.sql.conformance.qtt_format import QttCase, QttFormatError, load_file
from oncestream.sql.conformance.report import read_json, text_report, write_json
from oncestream.sql.conformance.scope import registry_formats, static_family
from oncestream.sql.engine.runtime import is_spark_start_failure

QTT_SUBDIR = "ksqldb-functional-tests/src/test/resources/query-validation-tests"
TWO_PHASE_COMMIT = {"transaction.two.phase.commit.enable": "true"}
# Each input record is its own micro-batch (case_runner's rules); a short trigger interval keeps
# the per-record cost down.
TRIGGER_INTERVAL_MS = 100


def case_files(path: Path, files_glob: str = "*.json") -> list[Path]:
    """The QTT files under ``path``: the file itself, the directory's ``*.json``, or, for a ksqlDB
    checkout, its query-validation-tests directory; only names matching ``files_glob`` (several
    globs separated by commas: ``avro.json,protobuf.json``)."""
    if path.is_file():
        return [path]
    if (path / QTT_SUBDIR).is_dir():
        path = path / QTT_SUBDIR
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such file or directory")
    globs = [g.strip() for g in files_glob.split(",") if g.strip()]
    return sorted(p for p in path.glob("*.json") if any(fnmatch.fnmatch(p.name, g) for g in globs))


def collect_cases(files: Sequence[Path], name_pattern: str | None = None) -> tuple[list[QttCase], list[str]]:
    """Every case of ``files`` (whose full name matches ``name_pattern``, a regular expression)
    and the files that could not be read, each with why."""
    cases: list[QttCase] = []
    unreadable: list[str] = []
    matcher = re.compile(name_pattern) if name_pattern else None
    for file in files:
        try:
            loaded = load_file(file)
        except QttFormatError as e:
            unreadable.append(str(e))
            continue
        cases += [c for c in loaded if matcher is None or matcher.search(c.name)]
    return cases, unreadable


# A case that failed because Spark did not start one of its queries in time (engine.runtime's
# SPARK_START_FAILURES: nothing about the engine) is run again, up to this many times, and if it
# never got to run it is reported NOT_RUN (outside the totals), not FAIL.
INFRASTRUCTURE_RETRIES = 2
INFRASTRUCTURE_PAUSE_S = 15.0


def is_infrastructure_failure(result: CaseResult) -> bool:
    """A FAIL caused by the machine, not the engine (``is_spark_start_failure``)."""
    return result.outcome is Outcome.FAIL and is_spark_start_failure(result.detail)


def interleaved(cases: Sequence[QttCase]) -> list[QttCase]:
    """``cases`` taken round-robin from their files (first case of each file, then the second...):
    a run stopped by ``--budget-s`` then samples every file instead of the first ones."""
    by_file: dict[str, list[QttCase]] = {}
    for case in cases:
        by_file.setdefault(case.file, []).append(case)
    out: list[QttCase] = []
    queues = [list(reversed(v)) for v in by_file.values()]
    while any(queues):
        for queue in queues:
            if queue:
                out.append(queue.pop())
    return out


def engine_revision() -> str:
    """The engine's revision a result is measured on: the git commit of the source the
    ``oncestream`` package runs from (``+dirty`` when that source has uncommitted changes), else
    the installed package's version."""
    import subprocess

    import oncestream

    source = Path(oncestream.__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "-C", str(source), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                                text=True, timeout=10, check=True).stdout.strip()
        changes = subprocess.run(["git", "-C", str(source), "status", "--porcelain", "--", "."], capture_output=True,
                                 text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        from importlib.metadata import PackageNotFoundError, version

        try:
            return f"oncestream {version('oncestream')}"
        except PackageNotFoundError:
            return "unknown"
    return commit + ("+dirty" if changes else "")


def case_key(file: str, name: str) -> tuple[str, str]:
    """What identifies a case across runs (``--resume``)."""
    return file, name


def run_cases(cases: Sequence[QttCase], environment: Callable[[], CaseEnvironment] | CaseEnvironment, *,
              jobs: int = 1, budget_s: float | None = None,
              on_result: Callable[[CaseResult], None] | None = None,
              engine: str = "") -> tuple[list[CaseResult], list[QttCase]]:
    """Results of ``cases`` in their order, and the cases not started within ``budget_s``.
    ``environment`` (or the factory making it) is only needed when a case must run; ``engine``
    is the revision each result is stamped with."""
    results: dict[int, CaseResult] = {}
    to_run: list[tuple[int, QttCase]] = []
    for i, case in enumerate(cases):
        family = static_family(case)
        if family is None:
            to_run.append((i, case))
            continue
        results[i] = CaseResult(case.file, case.name, Outcome.OUT_OF_SCOPE, family.name, family,
                                formats=tuple(registry_formats(case)), engine=engine)
        if on_result is not None:
            on_result(results[i])
    not_run: list[QttCase] = []
    if to_run:
        env = environment() if callable(environment) else environment
        deadline = None if budget_s is None else time.monotonic() + budget_s

        def one(item: tuple[int, QttCase]) -> tuple[int, CaseResult | None]:
            index, case = item
            if deadline is not None and time.monotonic() > deadline:
                return index, None
            result = CaseRun(case, env).run()
            for _ in range(INFRASTRUCTURE_RETRIES):
                if not is_infrastructure_failure(result):
                    break
                time.sleep(INFRASTRUCTURE_PAUSE_S)
                result = CaseRun(case, env).run()
            if is_infrastructure_failure(result):
                result = dataclasses.replace(result, outcome=Outcome.NOT_RUN)
            result = dataclasses.replace(result, engine=engine)
            if on_result is not None:
                on_result(result)
            return index, result

        with ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="qtt") as pool:
            for index, result in pool.map(one, to_run):
                if result is None:
                    not_run.append(cases[index])
                else:
                    results[index] = result
    return [results[i] for i in sorted(results)], not_run


def conformance_spark_session(master: str, local_dir: Path) -> Any:
    """A SparkSession with the SQL server's settings (``runtime.spark_session_config``), one
    shuffle partition (a case's data is a few records), a short progress history, and an idle
    query's progress every second (the runner waits for one after the last input of a query with
    a watermark: ``case_runner._consumed``)."""
    default_spark_pythons()
    from pyspark.sql import SparkSession

    from oncestream.sql.engine.runtime import spark_session_config

    settings = {**spark_session_config(), "spark.sql.shuffle.partitions": "1", "spark.ui.enabled": "false",
                "spark.ui.showConsoleProgress": "false", "spark.sql.streaming.numRecentProgressUpdates": "5",
                "spark.sql.streaming.noDataProgressEventInterval": "1000", "spark.local.dir": str(local_dir)}
    builder = SparkSession.builder.master(master).appName("oncestream-sql-conformance")
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def runtime_settings(bootstrap: str, checkpoint_root: str, *, per_record: bool = True) -> Any:
    """The query runtime's settings for conformance runs: one offset per trigger for stateful
    queries, all available for stateless ones (case_runner's rules)."""
    from oncestream.sql.engine.runtime import RuntimeSettings

    return RuntimeSettings(bootstrap_servers=bootstrap, checkpoint_root=checkpoint_root, service_id="conformance",
                           trigger_interval_ms=TRIGGER_INTERVAL_MS, max_offsets_per_trigger=1 if per_record else None)


def case_environment(spark: Any, bootstrap: str, checkpoint_root: str, registry: Any = None) -> CaseEnvironment:
    """The environment cases share: both query runtimes on ``spark``, writing to ``bootstrap``;
    ``registry`` the Schema Registry client of the registry formats' cases."""
    from oncestream.sql.engine.runtime import QueryRuntime

    return CaseEnvironment(bootstrap, QueryRuntime(spark, runtime_settings(bootstrap, checkpoint_root)),
                           QueryRuntime(spark, runtime_settings(bootstrap, checkpoint_root, per_record=False)),
                           registry)


@contextmanager
def environment(work_dir: Path, bootstrap: str | None, master: str,
                registry_url: str | None = None) -> Iterator[Callable[[], CaseEnvironment]]:
    """A factory of the run's one ``CaseEnvironment``, started on first use (a broker of our own
    unless ``bootstrap`` is given, a Schema Registry of our own on it unless ``registry_url`` is
    given, then Spark) and stopped on exit. The registry is this process's for the engine's
    AVRO/JSON_SR/PROTOBUF serdes too (``serde.use_registry``), as ``ksql.schema.registry.url``
    makes it in a SQL server."""
    state: dict[str, Any] = {}

    def make() -> CaseEnvironment:
        if "env" in state:
            return state["env"]
        address = bootstrap
        if address is None:
            from oncestream.broker_process import OnceStreamBroker

            broker = OnceStreamBroker(data_dir=work_dir / "broker" / "data", config=TWO_PHASE_COMMIT)
            broker.start()
            state["broker"] = broker
            address = broker.bootstrap
        url = registry_url
        if url is None:
            from oncestream.schema_registry_process import SchemaRegistryProcess

            # No compatibility checks, as ksqlDB's runner's MockSchemaRegistryClient makes none: a
            # sink registering its columns' schema over a case's differing one is accepted there.
            registry_process = SchemaRegistryProcess(bootstrap=address, log_dir=work_dir / "schema-registry",
                                                     config={"schema.compatibility.level": "none"})
            registry_process.start()
            state["registry"] = registry_process
            registry_process.wait_writable()
            url = registry_process.url
        from oncestream.spark.schema_registry_client import RegistryClient
        from oncestream.sql.engine.serde import use_registry

        client = RegistryClient(url)
        use_registry(client)
        spark = conformance_spark_session(master, work_dir / "spark-local")
        state["spark"] = spark
        state["env"] = case_environment(spark, address, str(work_dir / "checkpoints"), client)
        return state["env"]

    try:
        yield make
    finally:
        if "env" in state:
            state["env"].close()
        if "spark" in state:
            state["spark"].stop()
        if "registry" in state:
            state["registry"].stop()
        if "broker" in state:
            state["broker"].stop()


def cmd_sql_conformance(args: argparse.Namespace) -> int:
    """The command: collect, run, print, write ``--json`` (after every case, so an interrupted
    run keeps what it measured; with ``--resume`` the cases that file already holds are kept and
    not run again)."""
    files = case_files(Path(args.path), args.files)
    cases, unreadable = collect_cases(files, args.cases)
    if args.interleave:
        cases = interleaved(cases)
    for problem in unreadable:
        print(f"unreadable: {problem}", file=sys.stderr)
    kept: list[CaseResult] = []
    if args.resume:
        if not args.json_out:
            print("--resume needs --json FILE (the results to go on from)", file=sys.stderr)
            return 2
        if Path(args.json_out).exists():
            kept = [r for r in read_json(args.json_out) if r.outcome is not Outcome.NOT_RUN]
        done = {case_key(r.file, r.name) for r in kept}
        cases = [c for c in cases if case_key(c.file, c.name) not in done]
        print(f"resuming: {len(kept)} results kept from {args.json_out}, {len(cases)} cases to run", flush=True)
    engine = engine_revision()
    new: list[CaseResult] = []
    saving = threading.Lock()

    def show(result: CaseResult) -> None:
        if args.verbose:
            detail = f": {result.detail}" if result.detail else ""
            print(f"{result.outcome.value} {result.name} ({result.seconds:.1f} s){detail}", flush=True)
        if args.json_out:
            with saving:
                new.append(result)
                write_json(args.json_out, kept + new)

    with tempfile.TemporaryDirectory(prefix="oncestream-conformance-") as work, \
            environment(Path(work), args.bootstrap_server, args.spark_master, args.schema_registry_url) as make:
        results, not_run = run_cases(cases, make, jobs=args.jobs, budget_s=args.budget_s, on_result=show,
                                     engine=engine)
    everything = kept + results
    print(text_report(everything, verbose=args.verbose))
    engines = sorted({r.engine for r in everything if r.engine})
    if len(engines) > 1:
        print(f"\nmeasured on {len(engines)} engine revisions: {', '.join(engines)}")
    if not_run:
        print(f"\nnot run (budget): {len(not_run)} cases of {len({c.file for c in not_run})} files")
    if args.json_out:
        write_json(args.json_out, everything)
    return 0
