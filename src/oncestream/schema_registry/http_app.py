"""Confluent Schema Registry's REST API v1 as a plain ASGI app (served by hypercorn, as the SQL
server's REST API is).

Reads are answered from this instance's state. Writes run on the primary; another instance
forwards the request as it came (body, ``Authorization``) to the primary's URL and relays the
answer, then waits until its own state has read the write (the primary names the topic offset
in ``X-Oncestream-Schemas-Offset``), so a client that registered through any instance reads its
schema back from that instance.

Errors are Confluent's bodies (``{"error_code": 40401, "message": ...}``), with
``application/vnd.schemaregistry.v1+json`` as the content type of every JSON answer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote

import httpx

from oncestream.schema_registry import aliases, errors
from oncestream.schema_registry.contexts import rewrite as rewrite_context_path
from oncestream.schema_registry.registry import Registry
from oncestream.schema_registry.schema_types import SCHEMA_TYPES

log = logging.getLogger(__name__)

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
MAX_BODY_BYTES = 16 * 1024 * 1024
OFFSET_HEADER = "x-oncestream-schemas-offset"
FORWARDED_HEADER = "x-oncestream-forwarded"  # a forwarded write is never forwarded again
FORWARD_TIMEOUT_S = 30.0
READ_BACK_TIMEOUT_S = 10.0

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass
class Request:
    method: str
    segments: list[str]
    query: dict[str, list[str]]
    body: bytes
    headers: dict[str, str]
    raw_path: str
    raw_query: str

    def flag(self, name: str) -> bool:
        return self.query.get(name, ["false"])[-1].lower() == "true"

    def param(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else None

    def json(self) -> dict[str, Any]:
        if not self.body.strip():
            return {}
        try:
            doc = json.loads(self.body)
        except ValueError as exc:
            raise errors.bad_request(f"Unexpected character in the request body: {exc}") from exc
        if not isinstance(doc, dict):
            raise errors.bad_request("the request body must be a JSON object")
        return doc


@dataclass
class Answer:
    status: int
    body: Any
    raw: bool = False   # body is the text to send as-is (GET /schemas/ids/{id}/schema)
    headers: tuple[tuple[str, str], ...] = ()


class Cluster:
    """What the app needs to know of the instances: whether this one is the primary, the
    primary's URL, and how to wait for this instance's state to reach a topic offset."""

    def is_primary(self) -> bool:
        raise NotImplementedError

    def primary_url(self) -> str | None:
        raise NotImplementedError

    def position(self) -> int:
        raise NotImplementedError

    def wait_for(self, offset: int, timeout_s: float) -> bool:
        raise NotImplementedError


def _route(method: str, pattern: str, write: bool = False) -> Callable[[Any], Any]:
    def mark(fn: Any) -> Any:
        fn.route = (method, re.compile(f"^{pattern}$"), write)
        return fn
    return mark


class SchemaRegistryApp:
    """The ASGI application. ``authenticate`` (HTTP Basic, optional) maps a request's
    ``Authorization`` header to its user, or None: then the answer is 401. ``forward_verify``:
    how a follower checks the primary's certificate when forwarding over HTTPS."""

    def __init__(self, registry: Registry, cluster: Cluster,
                 authenticate: Callable[[str | None], Awaitable[str | None]] | None = None, *,
                 forward_verify: ssl.SSLContext | bool = True) -> None:
        self.registry = registry
        self.forward_verify = forward_verify
        self.cluster = cluster
        self.authenticate = authenticate
        self._routes = [(fn.route[0], fn.route[1], fn, fn.route[2]) for fn in
                        (getattr(type(self), name) for name in dir(type(self))) if hasattr(fn, "route")]
        self._http: httpx.AsyncClient | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                event = (await receive())["type"]
                if event == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif event == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        try:
            request = await self._read(scope, receive)
            answer = await self._dispatch(request)
        except errors.RegistryError as exc:
            answer = Answer(exc.http_status, exc.body())
            if exc.http_status == 401:
                answer.headers = (("www-authenticate", 'Basic realm="SchemaRegistry"'),)
        except Exception:  # any bug is a 500 with Confluent's body, the traceback to the log
            log.exception("schema registry: internal error")
            answer = Answer(500, {"error_code": 50001, "message": "Internal Server Error"})
        await self._write(send, answer)

    async def _read(self, scope: Scope, receive: Receive) -> Request:
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise errors.RegistryError(413, 413, "Request body too large")
            chunks.append(chunk)
            if not message.get("more_body"):
                break
        raw_path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1").split("?", 1)[0]
        segments = [unquote(s) for s in raw_path.strip("/").split("/") if s]
        raw_query = scope.get("query_string", b"").decode("latin-1")
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        return Request(scope["method"].upper(), segments, parse_qs(raw_query), b"".join(chunks), headers,
                       raw_path, raw_query)

    async def _write(self, send: Send, answer: Answer) -> None:
        if answer.raw:
            data = answer.body.encode() if isinstance(answer.body, str) else bytes(answer.body)
        else:
            data = json.dumps(answer.body, separators=(",", ":")).encode()
        headers = [(b"content-type", CONTENT_TYPE.encode()), (b"content-length", str(len(data)).encode())]
        headers += [(k.encode(), v.encode()) for k, v in answer.headers]
        await send({"type": "http.response.start", "status": answer.status, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    async def _dispatch(self, request: Request) -> Answer:
        if self.authenticate is not None and await self.authenticate(request.headers.get("authorization")) is None:
            raise errors.unauthorized()
        # /contexts/{context}/... is the qualified request (Confluent's ContextFilter)
        request.segments, request.query = rewrite_context_path(request.segments, request.query)
        # then a subject that is an alias stands for its target (Confluent's AliasFilter)
        request.segments, request.query = aliases.follow(request.segments, request.query, self._alias_of)
        path = "/" + "/".join(s.replace("/", "%2F") for s in request.segments)
        known_path = False
        for method, pattern, handler, write in self._routes:
            match = pattern.match(path)
            if match is None:
                continue
            known_path = True
            if method != request.method:
                continue
            args = [unquote(g) for g in match.groups()]
            if write and not self.cluster.is_primary():
                return await self._forward(request)
            answer: Answer = await asyncio.to_thread(handler, self, request, args)
            if write:
                answer.headers += ((OFFSET_HEADER, str(self.cluster.position())),)
            return answer
        if known_path:
            raise errors.method_not_allowed(request.method)
        raise errors.not_found(request.raw_path)

    def _alias_of(self, subject: str) -> str | None:
        alias = (self.registry.state.config_doc(subject) or {}).get(aliases.ALIAS_FIELD)
        return alias if isinstance(alias, str) and alias else None

    async def _forward(self, request: Request) -> Answer:
        primary = self.cluster.primary_url()
        if primary is None:
            raise errors.unknown_primary()
        if FORWARDED_HEADER in request.headers:
            raise errors.forwarding_error("this instance is not the primary (any more); try again")
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=FORWARD_TIMEOUT_S, verify=self.forward_verify)
        headers = {k: v for k, v in request.headers.items() if k in ("authorization", "content-type", "accept")}
        headers[FORWARDED_HEADER] = "1"
        url = primary.rstrip("/") + request.raw_path + (f"?{request.raw_query}" if request.raw_query else "")
        try:
            response = await self._http.request(request.method, url, content=request.body, headers=headers)
        except httpx.HTTPError as exc:
            raise errors.forwarding_error(f"{primary}: {exc}") from exc
        offset = response.headers.get(OFFSET_HEADER)
        if offset is not None and offset.isdigit():
            await asyncio.to_thread(self.cluster.wait_for, int(offset) - 1, READ_BACK_TIMEOUT_S)
        if response.status_code == 204:   # No Content (DELETE /contexts/{context})
            return Answer(204, "", raw=True)
        try:
            body = response.json()
        except ValueError:
            raise errors.forwarding_error(f"{primary} answered {response.status_code} without JSON") from None
        return Answer(response.status_code, body)

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()

    # --- routes -------------------------------------------------------------------------------

    @_route("GET", "/?")
    def root(self, request: Request, args: list[str]) -> Answer:
        return Answer(200, {})

    @_route("GET", "/schemas/types")
    def schema_types(self, request: Request, args: list[str]) -> Answer:
        return Answer(200, list(SCHEMA_TYPES))

    @_route("GET", "/contexts")
    def contexts(self, request: Request, args: list[str]) -> Answer:
        # The default context "." and the contexts of qualified subjects (":.staging:orders-value"
        # is in ".staging"), sorted; offset/limit page them as Confluent's do.
        contexts = self.registry.state.contexts()
        offset, limit = _int_param(request, "offset", 0), _int_param(request, "limit", -1)
        return Answer(200, contexts[offset:] if limit < 0 else contexts[offset:offset + limit])

    @_route("DELETE", "/contexts/([^/]+)", write=True)
    def delete_context(self, request: Request, args: list[str]) -> Answer:
        self.registry.delete_context(args[0])
        return Answer(204, "", raw=True)

    @_route("GET", "/subjects")
    def list_subjects(self, request: Request, args: list[str]) -> Answer:
        return Answer(200, self.registry.subjects(deleted=request.flag("deleted"),
                                                  prefix=request.param("subjectPrefix") or ""))

    @_route("POST", "/subjects/([^/]+)")
    def lookup(self, request: Request, args: list[str]) -> Answer:
        return Answer(200, self.registry.lookup(args[0], request.json(), deleted=request.flag("deleted")))

    @_route("DELETE", "/subjects/([^/]+)", write=True)
    def delete_subject(self, request: Request, args: list[str]) -> Answer:
        return Answer(200, self.registry.delete_subject(args[0], permanent=request.flag("permanent")))

    @_route("GET", "/subjects/([^/]+)/versions")
    def list_versions(self, request: Request, args: list[str]) -> Answer:
        return Answer(200, self.registry.versions(args[0], deleted=request.flag("deleted")))

    @_route("POST", "/subjects/([^/]+)/versions", write=True)
    def register(self, request: Request, args: list[str]) -> Answer:
        return Answer(200, self.registry.register(args[0], request.json()))

    @_route("GET", "/subjects/([^/]+)/metadata")
    def latest_with_metadata(self, request: Request, args: list[str]) -> Answer:
        keys, values = request.query.get("key", []), request.query.get("value", [])
        if len(keys) != len(values):
            raise errors.unprocessable("as many 'value' parameters as 'key' parameters are needed")
        v = self.registry.latest_with_metadata(args[0], dict(zip(keys, values, strict=True)),
                                               deleted=request.flag("deleted"))
        return Answer(200, self.registry.version_json(v, request.param("format")))

    @_route("GET", "/subjects/([^/]+)/versions/([^/]+)")
    def get_version(self, request: Request, args: list[str]) -> Answer:
        v = self.registry.version(args[0], args[1], deleted=request.flag("deleted"))
        return Answer(200, self.registry.version_json(v, request.param("format")))

    @_route("GET", "/subjects/([^/]+)/versions/([^/]+)/schema")
    def get_version_schema(self, request: Request, args: list[str]) -> Answer:
        v = self.registry.version(args[0], args[1], deleted=request.flag("deleted"))
        stored = self.registry.schema(v.schema_id, v.context)
        return Answer(200, self.registry.schema_text(stored, request.param("format")), raw=True)

    @_route("GET", "/subjects/([^/]+)/versions/([^/]+)/referencedby")
    def referenced_by(self, request: Request, args: list[str]) -> Answer:
        return Answer(200, self.registry.referenced_by(args[0], args[1]))

    @_route("DELETE", "/subjects/([^/]+)/versions/([^/]+)", write=True)
    def delete_version(self, request: Request, args: list[str]) -> Answer:
        return Answer(200, self.registry.delete_version(args[0], args[1], permanent=request.flag("permanent")))

    @_route("GET", "/schemas/ids/([^/]+)")
    def get_schema(self, request: Request, args: list[str]) -> Answer:
        stored = self.registry.schema_for_id(_schema_id(args[0]), request.param("subject"))
        return Answer(200, {**self.registry.schema_json(stored, request.param("format")), "guid": stored.guid})

    @_route("GET", "/schemas/guids/([^/]+)")
    def get_schema_by_guid(self, request: Request, args: list[str]) -> Answer:
        stored = self.registry.schema_by_guid(args[0])
        return Answer(200, {**self.registry.schema_json(stored, request.param("format")), "guid": stored.guid})

    @_route("GET", "/schemas/ids/([^/]+)/schema")
    def get_schema_text(self, request: Request, args: list[str]) -> Answer:
        stored = self.registry.schema_for_id(_schema_id(args[0]), request.param("subject"))
        return Answer(200, self.registry.schema_text(stored, request.param("format")), raw=True)

    @_route("GET", "/schemas/ids/([^/]+)/subjects")
    def get_schema_subjects(self, request: Request, args: list[str]) -> Answer:
        stored = self.registry.schema_for_id(_schema_id(args[0]), request.param("subject"))
        usages = self.registry.state.usages(stored.schema_id, deleted=request.flag("deleted"), context=stored.context)
        return Answer(200, sorted({v.subject for v in usages}))

    @_route("GET", "/schemas/ids/([^/]+)/versions")
    def get_schema_versions(self, request: Request, args: list[str]) -> Answer:
        stored = self.registry.schema_for_id(_schema_id(args[0]), request.param("subject"))
        usages = self.registry.state.usages(stored.schema_id, deleted=request.flag("deleted"), context=stored.context)
        return Answer(200, [{"subject": v.subject, "version": v.version} for v in usages])

    @_route("POST", "/compatibility/subjects/([^/]+)/versions")
    def compatibility_all(self, request: Request, args: list[str]) -> Answer:
        return self._compatibility(request, args[0], None)

    @_route("POST", "/compatibility/subjects/([^/]+)/versions/([^/]+)")
    def compatibility_version(self, request: Request, args: list[str]) -> Answer:
        return self._compatibility(request, args[0], args[1])

    def _compatibility(self, request: Request, subject: str, version: str | None) -> Answer:
        problems = self.registry.check_compatibility(subject, version, request.json())
        body: dict[str, Any] = {"is_compatible": not problems}
        if request.flag("verbose"):
            body["messages"] = problems
        return Answer(200, body)

    @_route("GET", "/config")
    def get_global_config(self, request: Request, args: list[str]) -> Answer:
        return Answer(200, self.registry.config_answer(None, default_to_global=True))

    @_route("PUT", "/config", write=True)
    def put_global_config(self, request: Request, args: list[str]) -> Answer:
        return Answer(200, self.registry.set_config(None, request.json()))

    @_route("DELETE", "/config", write=True)
    def delete_global_config(self, request: Request, args: list[str]) -> Answer:
        return Answer(200, self.registry.delete_config(None))

    @_route("GET", "/config/([^/]+)")
    def get_subject_config(self, request: Request, args: list[str]) -> Answer:
        return Answer(200, self.registry.config_answer(args[0], default_to_global=request.flag("defaultToGlobal")))

    @_route("PUT", "/config/([^/]+)", write=True)
    def put_subject_config(self, request: Request, args: list[str]) -> Answer:
        return Answer(200, self.registry.set_config(args[0], request.json()))

    @_route("DELETE", "/config/([^/]+)", write=True)
    def delete_subject_config(self, request: Request, args: list[str]) -> Answer:
        return Answer(200, self.registry.delete_config(args[0]))

    @_route("GET", "/mode")
    def get_global_mode(self, request: Request, args: list[str]) -> Answer:
        return Answer(200, {"mode": self.registry.mode(None)})

    @_route("PUT", "/mode", write=True)
    def put_global_mode(self, request: Request, args: list[str]) -> Answer:
        return Answer(200, {"mode": self.registry.set_mode(None, request.json(), force=request.flag("force"))})

    @_route("GET", "/mode/([^/]+)")
    def get_subject_mode(self, request: Request, args: list[str]) -> Answer:
        mode = self.registry.state.mode(args[0])
        if mode is None:
            if not request.flag("defaultToGlobal"):
                raise errors.subject_mode_not_found(args[0])
            mode = self.registry.mode(None)
        return Answer(200, {"mode": mode})

    @_route("PUT", "/mode/([^/]+)", write=True)
    def put_subject_mode(self, request: Request, args: list[str]) -> Answer:
        return Answer(200, {"mode": self.registry.set_mode(args[0], request.json(), force=request.flag("force"))})

    @_route("DELETE", "/mode/([^/]+)", write=True)
    def delete_subject_mode(self, request: Request, args: list[str]) -> Answer:
        return Answer(200, {"mode": self.registry.delete_mode(args[0])})


def _int_param(request: Request, name: str, default: int) -> int:
    raw = request.param(name)
    try:
        return default if raw is None else int(raw)
    except ValueError:
        raise errors.bad_request(f"{name} must be an integer, not {raw!r}") from None


def _schema_id(raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise errors.schema_not_found(f"Schema {raw} not found") from None


__all__ = ["CONTENT_TYPE", "Cluster", "SchemaRegistryApp"]
