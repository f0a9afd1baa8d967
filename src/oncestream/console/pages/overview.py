"""Overview: the cluster id, the controller, the brokers (id, host:port, rack), the topic and
partition counts, and the throughput from the brokers' metrics when ``--metrics-url`` names them
(console/throughput.py)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from oncestream.console.throughput import BrokerThroughput, ThroughputSampler, total_of
from oncestream.console.web import error_text, render, state

RATE_FIELDS = ("bytes_in_per_s", "messages_in_per_s", "bytes_out_per_s")


async def _throughput(request: Request) -> list[BrokerThroughput]:
    """This look's rates of every ``--metrics-url`` (one sampler per process: rates are the
    growth since the previous look)."""
    console = state(request)
    if not console.settings.metrics_urls:
        return []
    sampler = console.page_state.get("overview.throughput")
    if not isinstance(sampler, ThroughputSampler):
        sampler = console.page_state["overview.throughput"] = ThroughputSampler(console.settings.metrics_urls,
                                                                                console.clock_s)
    return await sampler.sample()


async def overview(request: Request) -> Response:
    console = state(request)
    try:
        cluster = await console.kafka.overview()
    except Exception as exc:  # noqa: BLE001 - any client failure is shown on the page
        return render(request, "overview.html", {"cluster": None, "bootstrap": console.settings.bootstrap_servers,
                                                 "error": f"Cannot describe the cluster: {error_text(exc)}"}, status=502)
    rows = await _throughput(request)
    return render(request, "overview.html", {
        "cluster": cluster, "bootstrap": console.settings.bootstrap_servers, "throughput": rows,
        "metrics_configured": bool(console.settings.metrics_urls),
        "totals": {name: total_of(rows, name) for name in RATE_FIELDS}})


async def overview_api(request: Request) -> Response:
    cluster = await state(request).kafka.overview()
    rows = await _throughput(request)
    return JSONResponse({"cluster_id": cluster.cluster_id, "controller_id": cluster.controller_id,
                         "brokers": [vars(b) for b in cluster.brokers], "topics": cluster.topic_count,
                         "partitions": cluster.partition_count,
                         "throughput": {"brokers": [vars(row) for row in rows],
                                        **{name: total_of(rows, name) for name in RATE_FIELDS}}})


routes: list[BaseRoute] = [
    Route("/", overview, methods=["GET"], name="overview"),
    Route("/api/overview", overview_api, methods=["GET"], name="overview_api"),
]
