"""What every page module uses: the console's state, template rendering, errors in words, audit.

A page module (``console/pages/NAME.py``) exports ``routes: list[BaseRoute]``; its handlers
reach the cluster through ``state(request).kafka`` (``console.kafka.ConsoleKafka``), render with
``render(request, "NAME.html", {...})`` (the template extends ``base.html``, fills
``{% block content %}``, and puts ``<input type="hidden" name="csrf_token" value="{{ csrf_token }}">``
into every POST form), and record every change with ``audit(request, ...)``.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import urllib.parse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jinja2
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from oncestream.client import KafkaError, KafkaException
from oncestream.console.audit import OK, AuditEntry, AuditLog
from oncestream.console.auth import SessionStore, Users, current_session
from oncestream.console.kafka import ConsoleKafka
from oncestream.console.settings import ConsoleSettings

TEMPLATES_DIR = Path(__file__).with_name("templates")
STATIC_DIR = Path(__file__).with_name("static")

# The navigation bar: (label, path). A page whose path no route serves is left out.
NAV = (("Overview", "/"), ("Topics", "/topics"), ("Groups", "/groups"), ("Transactions", "/transactions"),
       ("SQL", "/sql"), ("ACLs", "/acls"), ("Audit", "/audit"))


@dataclasses.dataclass
class ConsoleState:
    """The application's shared objects (``app.state.console``)."""

    settings: ConsoleSettings
    kafka: ConsoleKafka
    audit: AuditLog
    sessions: SessionStore
    users: Users
    templates: Jinja2Templates
    clock_s: Callable[[], float]
    nav: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    # Per-page memory that lives as long as the process (e.g. groups' lag samples), by page name.
    page_state: dict[str, Any] = dataclasses.field(default_factory=dict)


def state(request: Request) -> ConsoleState:
    """The console's state of ``request``'s application."""
    console = request.app.state.console
    if not isinstance(console, ConsoleState):
        raise TypeError("the application was not built by console.app.create_app")
    return console


def templates(request: Request) -> Jinja2Templates:
    return state(request).templates


def make_templates() -> Jinja2Templates:
    """Jinja2 with autoescape on for every template: a value with markup shows as text."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)), autoescape=True)
    env.filters["ms_time"] = format_ms
    # A name as one path segment ('/' too is escaped: a group id may contain it; Jinja's
    # urlencode keeps '/').
    env.filters["segment"] = lambda v: urllib.parse.quote(str(v), safe="")
    env.filters["number"] = lambda n: "" if n is None else f"{n:,}"
    env.filters["tojson_pretty"] = lambda v: json.dumps(v, indent=2, sort_keys=True, default=str)
    return Jinja2Templates(env=env)


def format_ms(epoch_ms: int | None) -> str:
    """Epoch milliseconds as UTC ``YYYY-MM-DD HH:MM:SS.mmm`` ('' for None or negative)."""
    if epoch_ms is None or epoch_ms < 0:
        return ""
    moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


def render(request: Request, template: str, context: Mapping[str, Any] | None = None, *,
           status: int = 200) -> Response:
    """``template`` with ``context`` plus what ``base.html`` needs: the user, the navigation, the
    CSRF token of POST forms and the current path."""
    session = current_session(request)
    console = state(request)
    full = {"user": session.user, "csrf_token": session.csrf_token, "nav": console.nav,
            "path": request.url.path, "sql_server_url": console.settings.sql_server_url,
            "error": None, "notice": None, **(context or {})}
    return console.templates.TemplateResponse(request, template, full, status_code=status)


def error_text(exc: BaseException) -> str:
    """A client failure in words: the broker's error name and message when it gave one."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        err = exc.args[0]
        return f"{err.name()}: {err.str()}"
    if isinstance(exc, KafkaError):
        return f"{exc.name()}: {exc.str()}"
    return str(exc) or type(exc).__name__


def audit(request: Request, action: str, target: str, outcome: str = OK, **details: Any) -> AuditEntry:
    """Record a change made by the request's session user (never a name from the request)."""
    return state(request).audit.record(current_session(request).user, action, target, outcome, **details)
