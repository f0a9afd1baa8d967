"""The console's own users: login and logout, sessions, CSRF, and the gate every request passes.

Users come from a users file of salted scrypt hashes, the SQL server's format
(``oncestream.sql.server.rest.users_file``; ``oncestream sql-users add --file FILE``). The
file is read at every login, so a user added or removed takes effect without a restart; a
session already open lasts until logout or ``session_max_age_s``.

Sessions live on the server: the cookie holds only a random 256-bit token (``HttpOnly``,
``SameSite=Strict``, ``Secure`` on an https listener) naming a session in this process's memory,
so there is nothing in it to forge or to sign, and logout ends the session for good. (Starlette's
``SessionMiddleware`` would put the session itself in an itsdangerous-signed cookie; itsdangerous
is not a dependency of ours, and a server-side session is the stronger design for an admin tool.)

``AuthGate`` is an ASGI middleware in front of every route, so no page can forget it:
- a request without a live session is refused: pages redirect to ``/login?next=...``, paths under
  ``/api/`` answer 401, WebSockets are closed with 1008 (policy violation); only ``/login`` and
  ``/static/`` are open;
- every POST/PUT/PATCH/DELETE must carry the session's CSRF token, as the form field
  ``csrf_token`` (``web.render`` puts it into every template as ``csrf_token``) or the header
  ``X-CSRF-Token`` (for ``fetch`` from console.js), else 403. The login form is protected the
  same way by a short-lived pre-login token (double-submit cookie).
"""

from __future__ import annotations

import dataclasses
import hmac
import json
import logging
import secrets
import threading
import urllib.parse
from collections.abc import Callable, Mapping
from pathlib import Path

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from oncestream.sql.server.rest.users_file import PasswordHash, UsersFileError, load_users

log = logging.getLogger(__name__)

SESSION_COOKIE = "oncestream_console_session"
LOGIN_CSRF_COOKIE = "oncestream_console_login"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"
SESSION_SCOPE_KEY = "oncestream.console.session"
OPEN_PATHS = frozenset({"/login"})
OPEN_PREFIXES = ("/static/",)
API_PREFIX = "/api/"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# A form body is read whole to check its token: bounded, so a client cannot make us buffer gigabytes.
MAX_FORM_BODY_BYTES = 16 * 1024 * 1024
# How much of a refused (not logged in) request's body is read before answering.
REFUSED_BODY_LIMIT_BYTES = 64 * 1024
LOGIN_CSRF_MAX_AGE_S = 3600
# Verified when a login names no known user, so an unknown name costs the same as a wrong password.
_DUMMY_HASH = PasswordHash.create(secrets.token_urlsafe(16))
# What every response says to the browser: no framing (clickjacking), scripts and styles from this
# origin only (inline style attributes allowed: no script can come through them).
SECURITY_HEADERS = (
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"content-security-policy",
     b"default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; script-src 'self'; "
     b"frame-ancestors 'none'; form-action 'self'"),
)


@dataclasses.dataclass(frozen=True)
class Session:
    """A logged-in user: the token in the cookie, the CSRF token of its forms, when it began."""

    token: str
    user: str
    csrf_token: str
    created_s: float


class SessionStore:
    """Live sessions by token; a session older than ``max_age_s`` is gone. Thread-safe."""

    def __init__(self, clock_s: Callable[[], float], max_age_s: float) -> None:
        self._clock_s = clock_s
        self._max_age_s = max_age_s
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def open(self, user: str) -> Session:
        session = Session(secrets.token_urlsafe(32), user, secrets.token_urlsafe(32), self._clock_s())
        with self._lock:
            self._expire()
            self._sessions[session.token] = session
        return session

    def get(self, token: str | None) -> Session | None:
        if not token:
            return None
        with self._lock:
            session = self._sessions.get(token)
            if session is not None and self._clock_s() - session.created_s > self._max_age_s:
                del self._sessions[token]
                return None
            return session

    def close(self, token: str) -> None:
        with self._lock:
            self._sessions.pop(token, None)

    def _expire(self) -> None:
        now = self._clock_s()
        for token in [t for t, s in self._sessions.items() if now - s.created_s > self._max_age_s]:
            del self._sessions[token]


def current_session(request: Request) -> Session:
    """The request's session (``AuthGate`` has refused every request without one)."""
    session = request.scope.get(SESSION_SCOPE_KEY)
    if not isinstance(session, Session):
        raise PermissionError("no console session: the request did not pass AuthGate")
    return session


def current_user(request: Request) -> str:
    """The logged-in console user of ``request``: the only name the audit log records."""
    return current_session(request).user


def _cookies(scope: Scope) -> dict[str, str]:
    for name, value in scope.get("headers", ()):
        if name == b"cookie":
            out: dict[str, str] = {}
            for part in value.decode("latin-1").split(";"):
                key, _, val = part.strip().partition("=")
                out.setdefault(key, val)
            return out
    return {}


def _header(scope: Scope, wanted: bytes) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == wanted:
            return str(value.decode("latin-1"))
    return None


def _is_open(path: str) -> bool:
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)


def safe_next(target: str | None) -> str:
    """Where to go after login: a path of this site only (no ``//host`` or ``scheme:``)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


class AuthGate:
    """The ASGI middleware described in the module docstring."""

    def __init__(self, app: ASGIApp, sessions: SessionStore) -> None:
        self.app = app
        self.sessions = sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        session = self.sessions.get(_cookies(scope).get(SESSION_COOKIE))
        scope[SESSION_SCOPE_KEY] = session
        if scope["type"] == "websocket":
            if session is None:
                await send({"type": "websocket.close", "code": 1008})
                return
            await self.app(scope, receive, send)
            return
        send = _with_security_headers(send)
        if session is None and not _is_open(path):
            await _refuse_unauthenticated(scope, receive, send)
            return
        method = scope["method"]
        if method not in SAFE_METHODS and session is not None:
            ok, receive = await _check_csrf(scope, receive, session.csrf_token)
            if not ok:
                await Response("CSRF token missing or wrong: reload the page and try again", 403,
                               media_type="text/plain")(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _with_security_headers(send: Send) -> Send:
    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            present = {name.lower() for name, _ in message.get("headers", ())}
            extra = [(k, v) for k, v in SECURITY_HEADERS if k not in present]
            message = {**message, "headers": [*message.get("headers", ()), *extra]}
        await send(message)
    return wrapped


async def _refuse_unauthenticated(scope: Scope, receive: Receive, send: Send) -> None:
    path: str = scope["path"]
    # The request's body is read first (up to a bound): answered over a body still on its way,
    # the server ends the keep-alive connection after the response, and a client that sends its
    # next request on it meanwhile sees the connection dropped (a CI run did, on a second POST).
    # A body over the bound is not waited for: the answer says the connection closes.
    drained = await _read_body(receive, REFUSED_BODY_LIMIT_BYTES) is not None
    closing = {} if drained else {"connection": "close"}
    response: Response
    if path.startswith(API_PREFIX) or path == API_PREFIX.rstrip("/"):
        response = Response(json.dumps({"error": "not logged in"}), 401, media_type="application/json",
                            headers={"www-authenticate": 'Cookie realm="oncestream console"', **closing})
    else:
        query = scope.get("query_string", b"").decode("latin-1")
        target = path + (f"?{query}" if query else "")
        response = RedirectResponse("/login?" + urllib.parse.urlencode({"next": target}), 303, headers=closing)
    await response(scope, _replay(b""), send)


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes) -> Receive:
    """A ``receive`` that yields ``body`` once, then waits for the disconnect as a real one does."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}
    return receive


async def form_field(scope: Scope, body: bytes, name: str) -> str | None:
    """Field ``name`` of a urlencoded or multipart form ``body`` (python-multipart through
    Starlette's parser), None if absent or not a form."""
    request = Request(scope, _replay(body))
    try:
        form = await request.form()
    except Exception:  # noqa: BLE001 - a malformed body has no token; the caller refuses it
        return None
    value = form.get(name)
    await form.close()
    return value if isinstance(value, str) else None


async def _check_csrf(scope: Scope, receive: Receive, expected: str) -> tuple[bool, Receive]:
    """Whether the request carries ``expected`` (header or form field) and the ``receive`` the
    app must read the body from (the body is buffered when the token is in it)."""
    given = _header(scope, CSRF_HEADER.encode())
    if given is not None:
        return hmac.compare_digest(given.encode(), expected.encode()), receive
    body = await _read_body(receive, MAX_FORM_BODY_BYTES)
    if body is None:
        return False, _replay(b"")
    token = await form_field(scope, body, CSRF_FIELD)
    ok = token is not None and hmac.compare_digest(token.encode(), expected.encode())
    return ok, _replay(body)


# --- users ---------------------------------------------------------------------------------------


class Users:
    """Checks passwords against the users file (read at every login)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> Mapping[str, PasswordHash]:
        """The users now in the file (UsersFileError if it cannot be read)."""
        return load_users(self.path)

    def check(self, user: str, password: str) -> bool:
        """Whether ``password`` is ``user``'s (one scrypt either way: no timing hint of which)."""
        try:
            users = self.load()
        except UsersFileError as exc:
            log.error("console login impossible: %s", exc)
            return False
        known = users.get(user)
        ok = (known or _DUMMY_HASH).verify(password)
        return ok and known is not None


