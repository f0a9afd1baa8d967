"""deploy/grafana/oncestream.json names only metrics the broker or the SQL server exports, and
every metric they export is on it (an exported series nobody can see is as bad as a panel that
shows nothing)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from oncestream.broker.metrics import names as broker_names
from oncestream.sql.server import metrics as sql_metrics

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "oncestream.json"
# Label values and names never start with these; metric names always do.
METRIC = re.compile(r"\b(?:kafka|oncestream)_[a-z0-9_]+\b")


def _expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    exprs += [var["definition"] for var in dashboard["templating"]["list"] if var["type"] == "query"]
    return exprs


def _exported() -> frozenset[str]:
    return broker_names.exposed_names() | sql_metrics.exposed_names()


def test_every_dashboard_expression_names_exported_metrics():
    exported = _exported()
    for expr in _expressions():
        used = METRIC.findall(expr)
        assert used, f"no oncestream metric in {expr!r}"
        unknown = sorted(set(used) - exported)
        assert not unknown, f"{expr!r} names metrics nobody exports: {unknown}"


def test_every_exported_metric_is_on_the_dashboard():
    used = {name for expr in _expressions() for name in METRIC.findall(expr)}
    # A histogram is on the dashboard through any of its series.
    families = {re.sub(r"_(bucket|count|sum)$", "", name) for name in used} | used
    missing = sorted(name for name in _exported()
                     if name not in families and re.sub(r"_(bucket|count|sum)$", "", name) not in families)
    assert not missing, f"exported but on no panel: {missing}"
