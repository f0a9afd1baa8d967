"""The message browser of a topic (from an offset, from a time, or the newest N; key, value
and headers as text, JSON or hex; read_committed or read_uncommitted with aborted records
marked: ``console.browse``) and producing a message (audited)."""

from __future__ import annotations

import datetime
import urllib.parse

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from oncestream.console.audit import FAILED
from oncestream.console.browse import (
    DEFAULT_COUNT,
    FORMATS,
    ISOLATIONS,
    MAX_COUNT,
    MODES,
    BrowseRequest,
    BrowseResult,
    parse_headers,
    show,
    show_key,
)
from oncestream.console.pages.topics import FormError, int_field, topic_page
from oncestream.console.web import audit, error_text, render, state


def _int(raw: str | None, default: int) -> int:
    try:
        return int(raw) if raw not in (None, "") else default
    except ValueError:
        raise FormError(f"expected a whole number, got {raw!r}") from None


def parse_time_ms(raw: str) -> int:
    """Epoch milliseconds, or an ISO 8601 time (UTC unless it names a zone), as the form gives it."""
    text = raw.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise FormError(f"from time: expected epoch ms or YYYY-MM-DDTHH:MM[:SS], got {raw!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


def browse_request(request: Request) -> tuple[BrowseRequest, str]:
    """The browse form's query as a BrowseRequest and the display format."""
    q = request.query_params
    mode = q.get("mode", "newest")
    isolation = q.get("isolation", "read_committed")
    fmt = q.get("format", "text")
    if mode not in MODES or isolation not in ISOLATIONS or fmt not in FORMATS:
        raise FormError(f"mode must be one of {MODES}, isolation one of {ISOLATIONS}, format one of {FORMATS}")
    time_raw = q.get("time", "")
    return BrowseRequest(
        topic=request.path_params["name"], partition=_int(q.get("partition"), 0), mode=mode,
        offset=_int(q.get("offset"), 0), time_ms=parse_time_ms(time_raw) if mode == "time" and time_raw else 0,
        count=min(MAX_COUNT, max(1, _int(q.get("count"), DEFAULT_COUNT))), isolation=isolation), fmt


async def messages_page(request: Request) -> Response:
    name = request.path_params["name"]
    console = state(request)
    context: dict[str, object] = {"name": name, "result": None, "modes": MODES, "formats": FORMATS,
                                  "isolations": ISOLATIONS, "max_count": MAX_COUNT, "partitions": [],
                                  "show": show, "show_key": show_key, "query": request.query_params}
    try:
        topic = await console.kafka.topic(name)
        context["partitions"] = [p.partition for p in topic.partitions]
        browse, fmt = browse_request(request)
        context["fmt"] = fmt
        context["req"] = browse
        if browse.partition not in context["partitions"]:  # type: ignore[operator]
            raise FormError(f"{name} has no partition {browse.partition}")
        result: BrowseResult = await console.kafka.browse(browse)
        context["result"] = result
    except LookupError:
        return render(request, "messages.html", {**context, "error": f"No topic {name}."}, status=404)
    except FormError as exc:
        return render(request, "messages.html", {**context, "fmt": "text", "req": None, "error": str(exc)}, status=400)
    except Exception as exc:  # noqa: BLE001 - any client failure is shown on the page
        return render(request, "messages.html", {**context, "fmt": "text", "req": None,
                                                 "error": f"Cannot read {name}: {error_text(exc)}"}, status=502)
    return render(request, "messages.html", context)


async def messages_api(request: Request) -> Response:
    try:
        browse, fmt = browse_request(request)
    except FormError as exc:
        return JSONResponse({"error": str(exc)}, 400)
    result = await state(request).kafka.browse(browse)
    return JSONResponse({
        "start": result.start, "end": result.end, "lso": result.lso, "from": result.from_offset,
        "complete": result.complete,
        "records": [{"partition": r.partition, "offset": r.offset, "timestamp_ms": r.timestamp_ms, "mark": r.mark,
                     "key": show_key(r.key, fmt).text if r.key is not None else None,
                     "value": show(r.value, fmt).text if r.value is not None else None,
                     "headers": [[n, show(v, fmt).text if v is not None else None] for n, v in r.headers]}
                    for r in result.records]})


async def produce(request: Request) -> Response:
    name = request.path_params["name"]
    form = await request.form()
    try:
        partition = int_field(form, "partition", -1, minimum=0) if str(form.get("partition") or "").strip() else None
        headers = parse_headers(str(form.get("headers") or ""))
    except FormError as exc:
        return await topic_page(request, error=str(exc), status=400)
    key_text = str(form.get("key") or "")
    key = key_text.encode("utf-8") if key_text else None
    value = str(form.get("value") or "").replace("\r\n", "\n").encode("utf-8")
    try:
        produced = await state(request).kafka.produce(name, partition, key, value, headers)
    except Exception as exc:  # noqa: BLE001 - the broker's refusal, in words
        audit(request, "message.produce", name, FAILED, error=error_text(exc))
        return await topic_page(request, error=f"Not produced: {error_text(exc)}", status=400)
    audit(request, "message.produce", name, partition=produced.partition, offset=produced.offset,
          key_bytes=len(key or b""), value_bytes=len(value), headers=len(headers))
    query = urllib.parse.urlencode({"partition": produced.partition, "mode": "offset", "offset": produced.offset,
                                    "notice": f"Produced to partition {produced.partition} at offset {produced.offset}"})
    return RedirectResponse(f"/topics/{urllib.parse.quote(name)}/messages?{query}", 303)


routes: list[BaseRoute] = [
    Route("/topics/{name}/messages", messages_page, methods=["GET"], name="messages"),
    Route("/topics/{name}/messages/produce", produce, methods=["POST"], name="produce"),
    Route("/api/topics/{name}/messages", messages_api, methods=["GET"], name="messages_api"),
]
