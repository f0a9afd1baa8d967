"""Topics: the list (partitions, messages, bytes), create, delete (confirmed by typing the
name), alter configs, and a topic's page (partitions with start, end and last stable offsets,
configs, produce a message). The message browser is ``pages/messages.py``."""

from __future__ import annotations

import dataclasses
import urllib.parse

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from oncestream import cli_common
from oncestream.console.audit import FAILED
from oncestream.console.kafka import TopicSummary
from oncestream.console.rates import OffsetRates
from oncestream.console.web import audit, error_text, render, state

# Kafka's topic name rule (the broker checks it too; checking here gives the error in words).
_LEGAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
MAX_TOPIC_NAME = 249


class FormError(ValueError):
    """A form field the console cannot use (the message says which and why)."""


def parse_properties(text: str, what: str) -> dict[str, str]:
    """``key=value`` lines (as a ``--command-config`` file) as a dict; FormError naming the bad line."""
    try:
        return cli_common.parse_properties(text, what)
    except cli_common.CliError as exc:
        raise FormError(str(exc)) from None


def check_topic_name(name: str) -> str:
    if not name or name in (".", "..") or len(name) > MAX_TOPIC_NAME or not set(name) <= _LEGAL:
        raise FormError(f"illegal topic name {name!r}: 1-{MAX_TOPIC_NAME} of a-z A-Z 0-9 . _ -")
    return name


def int_field(form: FormData, name: str, default: int | None = None, *, minimum: int | None = None) -> int:
    raw = str(form.get(name) or "").strip()
    if not raw:
        if default is None:
            raise FormError(f"{name} is required")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise FormError(f"{name} must be a whole number, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise FormError(f"{name} must be at least {minimum}")
    return value


def _back(path: str, **query: str) -> RedirectResponse:
    return RedirectResponse(path + ("?" + urllib.parse.urlencode(query) if query else ""), 303)


def rates(request: Request) -> OffsetRates:
    console = state(request)
    tracker = console.page_state.get("topics.rates")
    if not isinstance(tracker, OffsetRates):
        tracker = console.page_state["topics.rates"] = OffsetRates(console.clock_s)
    return tracker


async def topics_with_rates(request: Request) -> list[TopicSummary]:
    tracker = rates(request)
    return [dataclasses.replace(t, rate_per_s=tracker.observe(t.name, t.end_offsets))
            for t in await state(request).kafka.topics()]


async def topic_list(request: Request, *, error: str | None = None, status: int = 200) -> Response:
    try:
        topics = await topics_with_rates(request)
    except Exception as exc:  # noqa: BLE001 - any client failure is shown on the page
        return render(request, "topics.html", {"topics": [], "error": f"Cannot list topics: {error_text(exc)}"},
                      status=502)
    return render(request, "topics.html", {"topics": topics, "error": error,
                                           "notice": request.query_params.get("notice")}, status=status)


async def topic_create(request: Request) -> Response:
    form = await request.form()
    name = str(form.get("name") or "").strip()
    try:
        check_topic_name(name)
        partitions = int_field(form, "partitions", 1, minimum=1)
        replication = int_field(form, "replication_factor", 1, minimum=1)
        configs = parse_properties(str(form.get("configs") or ""), "configs")
    except FormError as exc:
        return await topic_list(request, error=str(exc), status=400)
    try:
        await state(request).kafka.create_topic(name, partitions, replication, configs)
    except Exception as exc:  # noqa: BLE001 - the broker's refusal, in words
        audit(request, "topic.create", name, FAILED, partitions=partitions, error=error_text(exc))
        return await topic_list(request, error=f"Cannot create {name}: {error_text(exc)}", status=400)
    audit(request, "topic.create", name, partitions=partitions, replication_factor=replication,
          **{f"config.{k}": v for k, v in configs.items()})
    return _back(f"/topics/{urllib.parse.quote(name)}", notice=f"Created topic {name}")


async def topic_page(request: Request, *, error: str | None = None, notice: str | None = None,
                     status: int = 200) -> Response:
    name = request.path_params["name"]
    try:
        topic = await state(request).kafka.topic(name)
    except LookupError:
        return render(request, "topic.html", {"topic": None, "name": name, "error": f"No topic {name}."}, status=404)
    except Exception as exc:  # noqa: BLE001 - any client failure is shown on the page
        return render(request, "topic.html", {"topic": None, "name": name,
                                              "error": f"Cannot describe {name}: {error_text(exc)}"}, status=502)
    return render(request, "topic.html", {"topic": topic, "name": name, "error": error,
                                          "notice": notice or request.query_params.get("notice")}, status=status)


async def topic_delete(request: Request) -> Response:
    name = request.path_params["name"]
    form = await request.form()
    if str(form.get("confirm") or "") != name:
        return await topic_page(request, error=f"Not deleted: type the topic's name ({name}) to confirm.", status=400)
    try:
        await state(request).kafka.delete_topic(name)
    except Exception as exc:  # noqa: BLE001 - the broker's refusal, in words
        audit(request, "topic.delete", name, FAILED, error=error_text(exc))
        return await topic_page(request, error=f"Cannot delete {name}: {error_text(exc)}", status=400)
    audit(request, "topic.delete", name)
    return _back("/topics", notice=f"Deleted topic {name}")


async def topic_configs(request: Request) -> Response:
    """Set configs (``set``: key=value lines) and reset others to the default (``reset``: names)."""
    name = request.path_params["name"]
    form = await request.form()
    try:
        changes: dict[str, str | None] = dict(parse_properties(str(form.get("set") or ""), "set"))
        for key in str(form.get("reset") or "").replace(",", "\n").splitlines():
            if key.strip():
                changes[key.strip()] = None
        if not changes:
            raise FormError("nothing to change: give key=value lines to set or names to reset")
    except FormError as exc:
        return await topic_page(request, error=str(exc), status=400)
    details = {f"config.{k}": ("(default)" if v is None else v) for k, v in changes.items()}
    try:
        await state(request).kafka.alter_topic_configs(name, changes)
    except Exception as exc:  # noqa: BLE001 - the broker's refusal, in words
        audit(request, "topic.alter-configs", name, FAILED, error=error_text(exc), **details)
        return await topic_page(request, error=f"Configs not changed: {error_text(exc)}", status=400)
    audit(request, "topic.alter-configs", name, **details)
    return _back(f"/topics/{urllib.parse.quote(name)}", notice="Configs changed: " + ", ".join(sorted(changes)))


async def topics_api(request: Request) -> Response:
    return JSONResponse([dataclasses.asdict(t) for t in await topics_with_rates(request)])


async def topic_api(request: Request) -> Response:
    name = request.path_params["name"]
    try:
        topic = await state(request).kafka.topic(name)
    except LookupError:
        return JSONResponse({"error": f"no topic {name}"}, 404)
    return JSONResponse(dataclasses.asdict(topic))


routes: list[BaseRoute] = [
    Route("/topics", topic_list, methods=["GET"], name="topics"),
    Route("/topics", topic_create, methods=["POST"], name="topic_create"),
    Route("/topics/{name}", topic_page, methods=["GET"], name="topic"),
    Route("/topics/{name}/delete", topic_delete, methods=["POST"], name="topic_delete"),
    Route("/topics/{name}/configs", topic_configs, methods=["POST"], name="topic_configs"),
    Route("/api/topics", topics_api, methods=["GET"], name="topics_api"),
    Route("/api/topics/{name}", topic_api, methods=["GET"], name="topic_api"),
]
