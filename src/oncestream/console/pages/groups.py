"""Consumer groups: the list, one group's members, assignment, committed offsets, end offsets
and lag per partition, lag over time (a sample at each view, refreshed every 5 s by
console.js), and resetting an empty group's offsets (audited)."""

from __future__ import annotations

import dataclasses
import urllib.parse
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from oncestream.console.audit import FAILED
from oncestream.console.groups import (
    RESET_TARGETS,
    LagHistory,
    ResetPlan,
    describe_group,
    list_groups,
    reset_offsets,
    sparkline_points,
)
from oncestream.console.pages.messages import parse_time_ms
from oncestream.console.pages.topics import FormError, int_field
from oncestream.console.web import audit, error_text, render, state


def lag_history(request: Request) -> LagHistory:
    console = state(request)
    history = console.page_state.get("groups.lag")
    if not isinstance(history, LagHistory):
        history = console.page_state["groups.lag"] = LagHistory(console.clock_s)
    return history


async def groups_page(request: Request) -> Response:
    wanted = request.query_params.get("id", "").strip()
    if wanted:  # "Open a group": share groups a broker keeps out of ListGroups are found by id
        return RedirectResponse(f"/groups/{urllib.parse.quote(wanted, safe='')}", 303)
    try:
        rows, errors = await state(request).kafka.run(list_groups)
    except Exception as exc:  # noqa: BLE001 - any client failure is shown on the page
        return render(request, "groups.html", {"groups": [], "error": f"Cannot list groups: {error_text(exc)}"},
                      status=502)
    return render(request, "groups.html", {"groups": rows, "error": "; ".join(errors) or None})


async def group_page(request: Request, *, error: str | None = None, status: int = 200) -> Response:
    group_id = request.path_params["group"]
    context: dict[str, object] = {"group_id": group_id, "group": None, "targets": RESET_TARGETS,
                                  "notice": request.query_params.get("notice")}
    try:
        group = await state(request).kafka.run(lambda admin: describe_group(admin, group_id))
    except LookupError:
        return render(request, "group.html", {**context, "error": f"No group {group_id}."}, status=404)
    except Exception as exc:  # noqa: BLE001 - any client failure is shown on the page
        return render(request, "group.html", {**context, "error": f"Cannot describe {group_id}: {error_text(exc)}"},
                      status=502)
    history = lag_history(request)
    history.add(group_id, group.total_lag)
    samples = history.samples(group_id)
    return render(request, "group.html", {**context, "group": group, "samples": samples,
                                          "spark": sparkline_points(samples), "error": error or group.error},
                  status=status)


async def group_reset(request: Request) -> Response:
    group_id = request.path_params["group"]
    form = await request.form()
    target = str(form.get("target") or "")
    topic = str(form.get("topic") or "").strip() or None
    try:
        if target not in RESET_TARGETS:
            raise FormError(f"reset to one of {', '.join(RESET_TARGETS)}")
        plan = ResetPlan(group_id, target, topic,
                         time_ms=parse_time_ms(str(form.get("time") or "")) if target == "time" else 0,
                         offset=int_field(form, "offset", minimum=0) if target == "offset" else 0)
    except FormError as exc:
        return await group_page(request, error=str(exc), status=400)
    details: dict[str, Any] = {"to": target, "topic": topic or "(all)", **({"time_ms": plan.time_ms} if target == "time" else {}),
               **({"offset": plan.offset} if target == "offset" else {})}
    try:
        done = await state(request).kafka.run(lambda admin: reset_offsets(admin, plan))
    except Exception as exc:  # noqa: BLE001 - the broker's refusal, in words
        audit(request, "group.reset-offsets", group_id, FAILED, error=error_text(exc), **details)
        return await group_page(request, error=f"Offsets not reset (the group must be empty): {error_text(exc)}",
                                status=409)
    audit(request, "group.reset-offsets", group_id, partitions=len(done), **details)
    notice = f"Reset {len(done)} partition(s) to {target}"
    return RedirectResponse(f"/groups/{urllib.parse.quote(group_id, safe='')}?"
                            + urllib.parse.urlencode({"notice": notice}), 303)


async def groups_api(request: Request) -> Response:
    rows, errors = await state(request).kafka.run(list_groups)
    return JSONResponse({"groups": [dataclasses.asdict(r) for r in rows], "errors": errors})


async def group_api(request: Request) -> Response:
    group_id = request.path_params["group"]
    try:
        group = await state(request).kafka.run(lambda admin: describe_group(admin, group_id))
    except LookupError:
        return JSONResponse({"error": f"no group {group_id}"}, 404)
    lag_history(request).add(group_id, group.total_lag)
    return JSONResponse({**dataclasses.asdict(group), "total_lag": group.total_lag,
                         "lag_samples": lag_history(request).samples(group_id)})


routes: list[BaseRoute] = [
    Route("/groups", groups_page, methods=["GET"], name="groups"),
    # ``:path``: a group id may contain '/' (sent as %2F, which the server decodes); the POST route
    # comes first so that its suffix is not taken as part of a group id.
    Route("/groups/{group:path}/reset-offsets", group_reset, methods=["POST"], name="group_reset"),
    Route("/groups/{group:path}", group_page, methods=["GET"], name="group"),
    Route("/api/groups", groups_api, methods=["GET"], name="groups_api"),
    Route("/api/groups/{group:path}", group_api, methods=["GET"], name="group_api"),
]
