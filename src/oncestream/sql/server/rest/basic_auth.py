"""HTTP Basic authentication for the REST API: an ASGI middleware in front of ``KsqlRestApp``.

What ksqlDB does with ``authentication.method=BASIC`` (its AuthHandlers and Vert.x's
BasicAuthHandler), and so do we:

- every path needs credentials except ``/healthcheck`` (ksqlDB always leaves it, and its
  ``/v1/metadata`` paths, open) and those listed in ``authentication.skip.paths`` (comma
  separated, ``*`` matching any characters, as ksqlDB converts them to a regex);
- a request without an ``Authorization: Basic ...`` header, or whose user and password do not
  check, is answered 401 with ``WWW-Authenticate: Basic realm="<authentication.realm>"`` and
  ksqlDB's error entity ``{"@type":"generic_error","error_code":40100,"message":"Unauthorized"}``;
  the app never sees it, so nothing is executed;
- the authenticated user name is put in the ASGI scope as ``scope["user"]`` for the app.

Passwords are checked against the users file (``users_file``: salted scrypt hashes). One scrypt
costs ~50 ms, too much for every request of a client that sends its credentials each time, so a
password that checked once is remembered as an HMAC under a key made at start (never written
anywhere); later requests compare that HMAC in constant time. A wrong password always pays the
full scrypt, and so does an unknown user (against a dummy hash), so timing tells neither which
users exist nor how close a guess was. Checks run off the event loop on the middleware's own
two threads: a flood of wrong passwords costs at most two cores' worth of scrypt and never takes
the default executor's threads that authenticated requests' statements and queries run on. The users file is read
at start; a node must be restarted to see changes.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import os
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from oncestream.sql.errors import UNAUTHORIZED, KsqlError
from oncestream.sql.server.rest.framing import JSON, dumps
from oncestream.sql.server.rest.http import Receive, RequestReader, Response, Scope, Send, drain_body, header
from oncestream.sql.server.rest.users_file import PasswordHash, load_users

AsgiApp = Callable[[Scope, Receive, Send], Awaitable[None]]

METHOD_NONE = "NONE"
METHOD_BASIC = "BASIC"
# ksqlDB's documented example realm (its default is empty, which its JAAS set-up cannot use).
DEFAULT_REALM = "KsqlServer-Props"
# Paths ksqlDB never authenticates (AuthHandlers.KSQL_AUTHENTICATION_SKIP_PATHS).
ALWAYS_OPEN_PATHS = ("/healthcheck", "/v1/metadata", "/v1/metadata/id")
# An unauthenticated request's body is read (and dropped) up to this much before the 401 ends,
# so HTTP/2 clients still sending can read the answer (see http.drain_body); little, since the
# sender is unknown.
UNAUTHENTICATED_DRAIN_BYTES = 1024 * 1024
# Threads checking passwords (scrypt) at once; more requests wait their turn.
PASSWORD_CHECK_THREADS = 2


class AuthConfigError(ValueError):
    """The ``authentication.*`` settings are invalid (the message names the setting)."""


@dataclass(frozen=True)
class BasicAuthSettings:
    """``authentication.method=BASIC`` with its realm, users file and open paths."""

    users_file: Path
    realm: str = DEFAULT_REALM
    skip_paths: tuple[str, ...] = ()

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> BasicAuthSettings | None:
        """The settings from a node's ``--config`` entries; None for ``authentication.method=NONE``
        (the default)."""
        method = props.get("authentication.method", METHOD_NONE).strip().upper()
        if method == METHOD_NONE:
            return None
        if method != METHOD_BASIC:
            raise AuthConfigError(f"authentication.method must be NONE or BASIC, got {props['authentication.method']!r}")
        users_file = props.get("authentication.users.file", "").strip()
        if not users_file:
            raise AuthConfigError("authentication.method=BASIC needs authentication.users.file "
                                  "(create it with `oncestream sql-users add`)")
        realm = props.get("authentication.realm", "").strip() or DEFAULT_REALM
        if '"' in realm or "\\" in realm:
            raise AuthConfigError(f"authentication.realm must not contain quotes or backslashes, got {realm!r}")
        skip = tuple(p.strip() for p in props.get("authentication.skip.paths", "").split(",") if p.strip())
        return cls(Path(users_file), realm, skip)


def skip_path_pattern(skip_paths: Iterable[str]) -> re.Pattern[str]:
    """ksqlDB's skip-path regex: the always-open paths and ``skip_paths``, ``*`` as ``.*``."""
    paths = sorted(set(ALWAYS_OPEN_PATHS) | set(skip_paths))
    return re.compile("|".join(re.escape(p).replace(r"\*", ".*") for p in paths))


def _normalized(path: str) -> bool:
    """Whether ``path`` has no empty, ``.`` or ``..`` segments (only such paths may skip
    authentication: a skip pattern with ``*`` must not open ``/healthcheck/../ksql``)."""
    return all(segment not in ("", ".", "..") for segment in path.split("/")[1:]) or path == "/"


def parse_basic(value: str | None) -> tuple[str, str] | None:
    """(user, password) from an ``Authorization: Basic base64(user:password)`` header value."""
    if value is None:
        return None
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = decoded.partition(":")
    return (user, password) if sep else None


class BasicAuthMiddleware:
    """The ASGI middleware (see the module docstring). ``app`` is the wrapped application."""

    def __init__(self, app: AsgiApp, users: Mapping[str, PasswordHash], *, realm: str = DEFAULT_REALM,
                 skip_paths: Iterable[str] = ()) -> None:
        self.app = app
        self._users = dict(users)
        self._skip = skip_path_pattern(skip_paths)
        self._challenge = f'Basic realm="{realm}"'.encode("latin-1")
        self._cache_key = os.urandom(32)
        # user -> HMAC of the password that last checked for that user (bounded by the users file).
        self._verified: dict[str, bytes] = {}
        self._dummy = PasswordHash.create(os.urandom(16).hex())
        self._checks = ThreadPoolExecutor(max_workers=PASSWORD_CHECK_THREADS, thread_name_prefix="sql-basic-auth")

    @classmethod
    def from_settings(cls, app: AsgiApp, settings: BasicAuthSettings) -> BasicAuthMiddleware:
        """Wrap ``app``, reading the users file (UsersFileError if it cannot be read)."""
        return cls(app, load_users(settings.users_file), realm=settings.realm, skip_paths=settings.skip_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")
        if _normalized(path) and self._skip.fullmatch(path):
            await self.app(scope, receive, send)
            return
        user = await self.authenticate(header(scope, b"authorization"))
        if user is None:
            await self._refuse(receive, send)
            return
        await self.app({**scope, "user": user}, receive, send)

    async def authenticate(self, authorization: str | None) -> str | None:
        """The user whose credentials ``authorization`` carries, or None."""
        credentials = parse_basic(authorization)
        if credentials is None:
            return None
        user, password = credentials
        digest = hmac.new(self._cache_key, password.encode("utf-8"), hashlib.sha256).digest()
        remembered = self._verified.get(user)
        if remembered is not None and hmac.compare_digest(remembered, digest):
            return user
        stored = self._users.get(user)
        checks = await asyncio.get_running_loop().run_in_executor(
            self._checks, (stored or self._dummy).verify, password)
        if stored is None or not checks:
            return None
        self._verified[user] = digest
        return user

    async def _refuse(self, receive: Receive, send: Send) -> None:
        error = KsqlError("Unauthorized", error_code=UNAUTHORIZED)
        request = RequestReader(receive)
        response = Response(send, headers=[(b"www-authenticate", self._challenge)])
        # The entity first, then the rest of the body is read and dropped (bounded), then the end.
        await response.start(error.http_status, JSON)
        await response.write(dumps(error.to_entity()))
        await drain_body(request, UNAUTHENTICATED_DRAIN_BYTES)
        await response.end()
