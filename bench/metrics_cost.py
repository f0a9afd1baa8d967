"""Cost of the broker's metrics on the produce path: librdkafka produce throughput against the same
broker build with ``metrics.listen`` set (Prometheus recorder on the hot path, scraped once a
15 s, as Prometheus usually does) and without it (the no-op recorder).

One run: two brokers started side by side, rounds alternating between them (off, on, off, on,
...) so drift of the machine lands on both alike; a fresh single-partition topic per round.
librdkafka producer: acks=all, idempotent, linger.ms=5, 100-byte records (small records: the
per-request and per-batch work is what metrics add to). The figures are records/s acknowledged
and the broker process's CPU time per record (/proc), the median per side; the cost is 1 - on/off.

    .venv/bin/python bench/metrics_cost.py                 # 4 rounds per side
    .venv/bin/python bench/metrics_cost.py --write-docs    # also write its docs/benchmarks.md section

This is a benchmark command, not a test.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import timeit
import urllib.request
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka import libversion as librdkafka_version
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from groups import write_docs_section
from machine import machine_description
from oncestream.broker_process import OnceStreamBroker
from topic_compression import produce_all

DOCS_HEADING = "## Metrics: produce throughput with metrics on vs off (librdkafka)"
RECORD_BYTES = 100
# Prometheus's usual scrape interval. One scrape of a small broker (~650 series) costs ~4 ms of
# the broker's loop; scraping more often measures the scrapes more than the hot path.
SCRAPE_INTERVAL_S = 15.0


def _round(bootstrap: str, records: int) -> float:
    topic = f"bench-metrics-{time.monotonic_ns()}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "queue.buffering.max.kbytes": 1 << 20})
    started = time.perf_counter()
    produce_all(producer, topic, [b"v" * RECORD_BYTES], records)
    return records / (time.perf_counter() - started)


def _hot_path_us_per_request() -> float:
    """What the Prometheus recorder adds to one Produce request (timeit, this process): the
    request's stage times, its appended batch and its response's error codes."""
    from oncestream.broker.metrics.recorder import PrometheusBrokerMetrics, RequestTiming
    from oncestream.protocol.codec import build
    from oncestream.protocol.schemas import response_module

    m = response_module(0, 9)
    response = build(m.ProduceResponse, throttle_time=dt.timedelta(0), responses=(
        build(m.TopicProduceResponse, name="t", partition_responses=(build(
            m.PartitionProduceResponse, index=0, error_code=0, base_offset=0, log_start_offset=0,
            log_append_time=None, error_message=None, record_errors=()),)),))
    metrics, timing = PrometheusBrokerMetrics(), RequestTiming()

    def one_request() -> None:
        timing.api_key, timing.api_version, timing.handler_start_s, timing.handler_end_s = 0, 9, 1.0, 1.001
        metrics.produced("t", 100_000, 1000)
        metrics.response_errors(0, response)
        metrics.request_done(timing, 0.999, 1.002)

    runs = 50_000
    return min(timeit.repeat(one_request, number=runs, repeat=3)) / runs * 1e6


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def _scrape_forever(url: str, interval_s: float, stop: threading.Event, scrapes: list[int]) -> None:
    while not stop.wait(interval_s):
        with urllib.request.urlopen(url, timeout=10) as response:
            response.read()
        scrapes[0] += 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4, help="rounds per side (default: 4)")
    parser.add_argument("--records", type=int, default=1_000_000, help="records per round (default: 1000000)")
    parser.add_argument("--scrape-interval-s", type=float, default=SCRAPE_INTERVAL_S,
                        help=f"scrape the metrics broker this often (default: {SCRAPE_INTERVAL_S:.0f})")
    parser.add_argument("--write-docs", action="store_true", help="write the section of docs/benchmarks.md")
    args = parser.parse_args(argv)
    listeners = {"listeners": "PLAINTEXT://127.0.0.1:0"}
    results: dict[str, list[float]] = {"off": [], "on": []}
    cpu_us: dict[str, list[float]] = {"off": [], "on": []}  # broker CPU per record
    scrapes = [0]
    with tempfile.TemporaryDirectory() as tmp:
        brokers = {
            "off": OnceStreamBroker(Path(tmp) / "off", config=listeners),
            "on": OnceStreamBroker(Path(tmp) / "on", config={**listeners, "metrics.listen": "127.0.0.1:0"}),
        }
        stop = threading.Event()
        try:
            for broker in brokers.values():
                broker.start()
            bound = json.loads(brokers["on"].ready_file.read_text())["metrics"]
            url = f"http://{bound['host']}:{bound['port']}/metrics"
            scraper = threading.Thread(target=_scrape_forever, args=(url, args.scrape_interval_s, stop, scrapes), daemon=True)
            scraper.start()
            for round_index in range(args.rounds):
                for side in ("off", "on"):
                    cpu_before = _cpu_s(brokers[side].pid)
                    rate = _round(brokers[side].bootstrap, args.records)
                    cpu_us[side].append((_cpu_s(brokers[side].pid) - cpu_before) / args.records * 1e6)
                    results[side].append(rate)
                    print(f"round {round_index + 1} metrics {side:<3} {rate:10.0f} records/s, "
                          f"broker CPU {cpu_us[side][-1]:.2f} us/record", flush=True)
            produce_requests = sum(
                v for (name, labels), v in _scrape(url).items()
                if name == "kafka_network_requestmetrics_requests_total" and ("request", "Produce") in labels)
        finally:
            stop.set()
            for broker in brokers.values():
                broker.stop()
    off, on = statistics.median(results["off"]), statistics.median(results["on"])
    cost = 1 - on / off
    cpu_off, cpu_on = statistics.median(cpu_us["off"]), statistics.median(cpu_us["on"])
    cpu_cost = cpu_on / cpu_off - 1
    print(f"median: off {off:.0f} records/s, on {on:.0f} records/s: cost {cost:.1%}; broker CPU "
          f"{cpu_off:.2f} vs {cpu_on:.2f} us/record: {cpu_cost:+.1%} ({scrapes[0]} scrapes)")
    # The hot path's share of the broker's CPU, from counts rather than from two noisy figures.
    per_request_us = _hot_path_us_per_request()
    records_on = args.records * args.rounds
    hot_share = produce_requests * per_request_us / (cpu_on * records_on)
    print(f"{produce_requests:.0f} Produce requests for {records_on} records; the recorder adds "
          f"{per_request_us:.1f} us per request: {hot_share:.2%} of the broker's CPU")
    if args.write_docs:
        rows = "\n".join(
            f"| {i + 1} | {a:.0f} | {b:.0f} | {c:.2f} | {d:.2f} |"
            for i, (a, b, c, d) in enumerate(zip(results["off"], results["on"], cpu_us["off"], cpu_us["on"])))
        section = (
            f"{DOCS_HEADING}\n\n"
            f"`bench/metrics_cost.py --rounds {args.rounds} --records {args.records}`, "
            f"{dt.date.today().isoformat()}. Machine: {machine_description()}; librdkafka "
            f"{librdkafka_version()[0]}. Same broker build twice, one with `metrics.listen` (scraped every "
            f"{args.scrape_interval_s:g} s, {scrapes[0]} scrapes), one without; acks=all, idempotent, linger.ms=5, "
            f"{RECORD_BYTES}-byte records, one partition, rounds alternating.\n\n"
            "| round | off (records/s) | on (records/s) | off: broker CPU (us/record) | on: broker CPU (us/record) |\n"
            "|---|---|---|---|---|\n"
            f"{rows}\n\n"
            f"Median: off {off:.0f}, on {on:.0f} records/s: **throughput cost {cost:.1%}** (goal: under 3%); "
            f"broker CPU per record {cpu_off:.2f} vs {cpu_on:.2f} us: **{cpu_cost:+.1%}**. The machine is shared "
            "(2 cores, other jobs running), so single rounds vary by more than the cost (a negative cost is that "
            "noise): the broker's CPU time "
            "per record is the steadier figure, and the hot path's share computed from counts the steadiest: "
            f"the metrics broker answered {produce_requests:.0f} Produce requests for {records_on} records, "
            f"the recorder adds {per_request_us:.1f} us to each (stage times, the batch's counters, the "
            f"response's error codes; timeit), so **{hot_share:.2%} of the broker's CPU** goes to metrics "
            "on this path (plus ~4 ms of loop time per scrape).\n"
        )
        write_docs_section(section, DOCS_HEADING)
    return 0


if __name__ == "__main__":
    sys.exit(main())
