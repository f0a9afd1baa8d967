"""The login and logout pages (the gate, sessions and users are ``console.auth``)."""

from __future__ import annotations

import hmac
import logging
import secrets

from anyio import to_thread
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from oncestream.console.auth import (
    CSRF_FIELD,
    LOGIN_CSRF_COOKIE,
    LOGIN_CSRF_MAX_AGE_S,
    SESSION_COOKIE,
    SESSION_SCOPE_KEY,
    current_session,
    safe_next,
)
from oncestream.console.web import state, templates

log = logging.getLogger("oncestream.console.auth")


def login_page(request: Request, *, error: str | None = None, status: int = 200) -> Response:
    token = request.cookies.get(LOGIN_CSRF_COOKIE) or secrets.token_urlsafe(32)
    response = templates(request).TemplateResponse(request, "login.html", {
        "login_csrf": token, "next": safe_next(request.query_params.get("next")), "error": error,
        "nav": [], "user": None}, status_code=status)
    response.set_cookie(LOGIN_CSRF_COOKIE, token, max_age=LOGIN_CSRF_MAX_AGE_S, httponly=True, samesite="strict",
                        secure=request.url.scheme == "https", path="/login")
    return response


async def login_form(request: Request) -> Response:
    if request.scope.get(SESSION_SCOPE_KEY) is not None:
        return RedirectResponse(safe_next(request.query_params.get("next")), 303)
    return login_page(request)


async def login_submit(request: Request) -> Response:
    form = await request.form()
    cookie_token = request.cookies.get(LOGIN_CSRF_COOKIE, "")
    form_token = str(form.get(CSRF_FIELD) or "")
    if not cookie_token or not hmac.compare_digest(cookie_token.encode(), form_token.encode()):
        return login_page(request, error="The login form expired: please try again.", status=403)
    user = str(form.get("username") or "")
    password = str(form.get("password") or "")
    console = state(request)
    if not user or not await to_thread.run_sync(console.users.check, user, password):
        log.warning("console login refused", extra={"user": user, "client": _client(request)})
        return login_page(request, error="Wrong user name or password.", status=401)
    session = console.sessions.open(user)
    log.info("console login", extra={"user": user, "client": _client(request)})
    response = RedirectResponse(safe_next(str(form.get("next") or "")), 303)
    response.set_cookie(SESSION_COOKIE, session.token, max_age=int(console.settings.session_max_age_s), httponly=True,
                        samesite="strict", secure=request.url.scheme == "https", path="/")
    response.delete_cookie(LOGIN_CSRF_COOKIE, path="/login")
    return response


async def logout(request: Request) -> Response:
    session = current_session(request)
    state(request).sessions.close(session.token)
    log.info("console logout", extra={"user": session.user, "client": _client(request)})
    response = RedirectResponse("/login", 303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


def _client(request: Request) -> str:
    return f"{request.client.host}:{request.client.port}" if request.client else "?"


routes: list[BaseRoute] = [
    Route("/login", login_form, methods=["GET"], name="login"),
    Route("/login", login_submit, methods=["POST"], name="login_submit"),
    Route("/logout", logout, methods=["POST"], name="logout"),
]
