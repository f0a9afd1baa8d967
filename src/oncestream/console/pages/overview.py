"""Overview: the cluster id, the controller, the brokers (id, host:port, rack) and the topic and
partition counts."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from oncestream.console.web import error_text, render, state


async def overview(request: Request) -> Response:
    console = state(request)
    try:
        cluster = await console.kafka.overview()
    except Exception as exc:  # noqa: BLE001 - any client failure is shown on the page
        return render(request, "overview.html", {"cluster": None, "bootstrap": console.settings.bootstrap_servers,
                                                 "error": f"Cannot describe the cluster: {error_text(exc)}"}, status=502)
    return render(request, "overview.html", {"cluster": cluster, "bootstrap": console.settings.bootstrap_servers})


async def overview_api(request: Request) -> Response:
    cluster = await state(request).kafka.overview()
    return JSONResponse({"cluster_id": cluster.cluster_id, "controller_id": cluster.controller_id,
                         "brokers": [vars(b) for b in cluster.brokers], "topics": cluster.topic_count,
                         "partitions": cluster.partition_count})


routes: list[BaseRoute] = [
    Route("/", overview, methods=["GET"], name="overview"),
    Route("/api/overview", overview_api, methods=["GET"], name="overview_api"),
]
