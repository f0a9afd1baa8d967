"""``create_app``: the console's Starlette application, built from its page modules.

Every module of ``oncestream.console.pages`` that exports ``routes`` contributes them (found by
``pkgutil``, so a new page is one new module and template); ``auth.AuthGate`` stands in front of
all of them, and ``/static`` serves the stylesheet and script.
"""

from __future__ import annotations

import contextlib
import importlib
import pkgutil
import time
from collections.abc import AsyncIterator, Callable

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from oncestream.console import pages
from oncestream.console.audit import AuditLog
from oncestream.console.auth import AuthGate, SessionStore, Users
from oncestream.console.kafka import ConsoleKafka
from oncestream.console.settings import ConsoleSettings
from oncestream.console.web import NAV, STATIC_DIR, ConsoleState, make_templates


def page_routes() -> list[BaseRoute]:
    """The ``routes`` of every page module, in module-name order."""
    out: list[BaseRoute] = []
    for info in sorted(pkgutil.iter_modules(pages.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{pages.__name__}.{info.name}")
        routes = getattr(module, "routes", None)
        if routes is None:
            continue
        if not isinstance(routes, list) or not all(isinstance(r, BaseRoute) for r in routes):
            raise TypeError(f"{module.__name__}.routes must be a list of starlette routes")
        out.extend(routes)
    return out


def create_app(settings: ConsoleSettings, *, kafka: ConsoleKafka | None = None,
               clock: Callable[[], float] = time.time) -> Starlette:
    """The console for ``settings``. ``kafka`` is the cluster access (default: a ``ConsoleKafka``
    of ``settings``; closed with the app), ``clock`` the wall clock in seconds (sessions, audit
    times, lag samples)."""
    cluster = kafka if kafka is not None else ConsoleKafka(settings)
    routes = [*page_routes(), Mount("/static", app=StaticFiles(directory=str(STATIC_DIR)), name="static")]
    served = {r.path for r in routes if isinstance(r, Route)}
    sessions = SessionStore(clock, settings.session_max_age_s)
    console = ConsoleState(
        settings=settings, kafka=cluster, audit=AuditLog(lambda: int(clock() * 1000)), sessions=sessions,
        users=Users(settings.users_file), templates=make_templates(), clock_s=clock,
        nav=[(label, path) for label, path in NAV if path in served])

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await cluster.aclose()

    app = Starlette(routes=routes, middleware=[Middleware(AuthGate, sessions=sessions)], lifespan=lifespan)
    app.state.console = console
    return app
