"""Scraping a process's ``/metrics`` with prometheus-client's own text parser (a real Prometheus
exposition reader, not ours): samples keyed by name and labels."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client.parser import text_string_to_metric_families

from oncestream.broker_process import OnceStreamBroker

if TYPE_CHECKING:
    from tests.support.cluster import ClusterBroker

# A broker whose metrics a test reads: port 0 for both, the bound ones come from its ready file.
METRICS_BROKER_CONFIG = {"listeners": "PLAINTEXT://127.0.0.1:0", "metrics.listen": "127.0.0.1:0"}
SCRAPE_TIMEOUT_S = 10.0

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def metrics_url_of(broker: OnceStreamBroker | ClusterBroker) -> str:
    """The ``/metrics`` URL of a broker (or one cluster broker) started with ``metrics.listen``
    and ``listeners`` (its ready file names the bound metrics port)."""
    bound = json.loads(Path(broker.ready_file).read_text())["metrics"]
    return f"http://{bound['host']}:{bound['port']}/metrics"


def scrape(url: str) -> Samples:
    """Every sample of one scrape, parsed by prometheus-client."""
    with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as response:
        text = response.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample ``name{labels}``; 0 when absent (a counter not moved yet)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name`` over every sample whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)
