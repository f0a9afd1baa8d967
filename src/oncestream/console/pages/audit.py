"""Audit: the console's recent changes with the user who made each (``console.audit``)."""

from __future__ import annotations

import dataclasses

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from oncestream.console.web import render, state


async def audit_page(request: Request) -> Response:
    return render(request, "audit.html", {"entries": state(request).audit.recent()})


async def audit_api(request: Request) -> Response:
    return JSONResponse([dataclasses.asdict(e) for e in state(request).audit.recent()])


routes: list[BaseRoute] = [
    Route("/audit", audit_page, methods=["GET"], name="audit"),
    Route("/api/audit", audit_api, methods=["GET"], name="audit_api"),
]
