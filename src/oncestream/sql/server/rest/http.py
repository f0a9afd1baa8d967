"""The HTTP side of the REST app on plain ASGI: reading bounded bodies, content negotiation, and
writing whole or streamed responses.

Why plain ASGI and no framework: the app has ten fixed routes, two of which stream in both
directions at once (/inserts-stream reads rows while it writes acks) and all of which must stop
reading at a byte limit. A framework (starlette is not installed) would add a dependency for a
router and a request object, and we would still write the streaming and the limits against raw
ASGI ``receive``/``send``. So these ~200 lines are the whole HTTP layer; hypercorn does HTTP/1.1,
h2c and chunking.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from oncestream.sql.errors import BAD_REQUEST, NOT_ACCEPTABLE, REQUEST_TOO_LARGE, KsqlError
from oncestream.sql.server.rest.framing import dumps

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class ClientDisconnected(Exception):
    """The client went away (ASGI ``http.disconnect``) while we were reading its request."""


class BodyTooLargeError(KsqlError):
    """A request body (or one line of /inserts-stream) over the server's limit. HTTP 413."""

    error_code = REQUEST_TOO_LARGE


class NotAcceptableError(KsqlError):
    """No media type of the route matches the request's Accept header. HTTP 406."""

    error_code = NOT_ACCEPTABLE


class RequestReader:
    """``receive`` that remembers whether the request body has ended (or the client left), so a
    handler answering early knows whether there is anything left to drain."""

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self.body_ended = False

    async def __call__(self) -> Message:
        message = await self._receive()
        if message["type"] == "http.disconnect" or not message.get("more_body", False):
            self.body_ended = True
        return message


def header(scope: Scope, name: bytes) -> str | None:
    """The first value of a request header (names are lower case in ASGI)."""
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value).decode("latin-1")
    return None


def negotiate(accept: str | None, produces: tuple[str, ...], *, default: str) -> str:
    """The media type to answer with, as Vert.x picks it for a route's ``produces`` list: the
    client's most preferred (highest ``q``, then first listed) type that the route produces,
    ``*/*`` and ``application/*`` meaning the route's first. No Accept header: ``default``.
    Raises NotAcceptableError when nothing matches."""
    if accept is None or not accept.strip():
        return default
    ranked: list[tuple[float, int, str]] = []
    for index, part in enumerate(accept.split(",")):
        fields = [f.strip() for f in part.split(";")]
        media = fields[0].lower()
        if not media:
            continue
        q = 1.0
        for param in fields[1:]:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if q > 0:
            ranked.append((-q, index, media))
    for _, _, media in sorted(ranked):
        if media in produces:
            return media
        if media in ("*/*", "application/*"):
            return produces[0]
    raise NotAcceptableError(f"None of the accepted media types ({accept}) is produced by this endpoint "
                             f"({', '.join(produces)})")


async def _body_chunk(receive: Receive) -> tuple[bytes, bool]:
    """The next piece of the request body and whether more follows; ClientDisconnected if the
    client left instead."""
    message = await receive()
    if message["type"] == "http.disconnect":
        raise ClientDisconnected()
    return message.get("body", b""), bool(message.get("more_body", False))


async def read_body(scope: Scope, receive: Receive, limit_bytes: int) -> bytes:
    """The whole request body, refusing (BodyTooLargeError) as soon as it would exceed
    ``limit_bytes``: a Content-Length over the limit is refused before reading a byte, and a chunked
    body is never held beyond the limit."""
    declared = header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit_bytes:
        raise BodyTooLargeError(f"Request body of {declared} bytes exceeds the limit of {limit_bytes} bytes")
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk, more = await _body_chunk(receive)
        size += len(chunk)
        if size > limit_bytes:
            raise BodyTooLargeError(f"Request body exceeds the limit of {limit_bytes} bytes")
        chunks.append(chunk)
        if not more:
            return b"".join(chunks)


async def body_lines(receive: Receive, limit_bytes: int) -> AsyncIterator[bytes]:
    """The request body split at ``\\n`` as it arrives (the last line may end without one); empty
    lines are skipped. A line longer than ``limit_bytes`` raises BodyTooLargeError, so a client
    streaming without newlines cannot make us buffer without bound."""
    pending = b""
    while True:
        chunk, more = await _body_chunk(receive)
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if len(line) > limit_bytes:
                raise BodyTooLargeError(f"Inserts-stream line exceeds the limit of {limit_bytes} bytes")
            if line.strip():
                yield line
        if len(pending) > limit_bytes:
            raise BodyTooLargeError(f"Inserts-stream line exceeds the limit of {limit_bytes} bytes")
        if not more:
            if pending.strip():
                yield pending
            return


async def drain_body(request: RequestReader, limit_bytes: int) -> None:
    """Read and discard the rest of a request body (at most ``limit_bytes``; memory stays constant).

    Why: after answering early (413, or an inserts-stream error), ending the response while the
    client is still sending makes hypercorn's HTTP/2 protocol fail on the DATA frames of the
    closed stream and drop the whole connection, so the client never reads the answer. Letting
    the body finish first keeps the answer readable; the cap bounds what a client that never
    stops can make us read."""
    seen = 0
    while not request.body_ended and seen <= limit_bytes:
        message = await request()
        seen += len(message.get("body", b""))


def parse_json_object(body: bytes) -> dict[str, Any]:
    """A JSON object from a request body; anything else is ksqlDB's 400 "Invalid JSON in request"."""
    try:
        value = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise KsqlError(f"Invalid JSON in request: {exc}", error_code=BAD_REQUEST) from None
    if not isinstance(value, dict):
        raise KsqlError(f"Invalid JSON in request: expected an object, got {type(value).__name__}",
                        error_code=BAD_REQUEST)
    return value


@dataclass
class Response:
    """Starts and writes one response."""

    send: Send
    started: bool = False
    ended: bool = False
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)

    async def start(self, status: int, content_type: str | None) -> None:
        headers = list(self.headers)
        if content_type is not None:
            headers.append((b"content-type", content_type.encode("latin-1")))
        await self.send({"type": "http.response.start", "status": status, "headers": headers})
        self.started = True

    async def write(self, data: bytes) -> None:
        if data:
            await self._body(data, more=True)

    async def end(self, data: bytes = b"") -> None:
        if not self.ended:
            self.ended = True
            await self._body(data, more=False)

    async def _body(self, data: bytes, *, more: bool) -> None:
        try:
            await self.send({"type": "http.response.body", "body": data, "more_body": more})
        except (OSError, RuntimeError) as exc:
            # A write failing at the transport (connection reset, transport closed) is the client
            # having gone before its http.disconnect reached us: end quietly, like a disconnect.
            raise ClientDisconnected() from exc

    async def whole(self, status: int, content_type: str | None, body: bytes) -> None:
        """A complete (non-streamed) response with Content-Length."""
        self.headers.append((b"content-length", str(len(body)).encode()))
        await self.start(status, content_type)
        await self.end(body)

    async def json(self, status: int, content_type: str, value: Any) -> None:
        await self.whole(status, content_type, dumps(value))

    async def error(self, error: KsqlError, content_type: str) -> None:
        """ksqlDB's error entity for ``error`` with its HTTP status."""
        await self.json(error.http_status, content_type, error.to_entity())
