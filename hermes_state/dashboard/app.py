"""The dashboard's Starlette application: pages, JSON API, ``/events`` and ``/metrics``.

The app takes an *awaitable* store (``AsyncSessionDB(SessionDB(...))`` or
``NativeAsyncSessionDB``), so no database call blocks the event loop. Pages are rendered on
the server (they work without JavaScript); the script only refreshes them when ``/events``
reports a change, and sends the actions with the operator's token.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import time
from collections.abc import AsyncIterator, Collection, Mapping
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote, urlsplit

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup, escape
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import HermesStateError, InvalidInputError, InvalidInputTypeError
from ..metrics import CONTENT_TYPE, render_stats
from ..models import HandoffState
from ..plans import STRANDED_ERROR
from ..transcript import result_tool, tool_calls_of
from .feed import ChangeFeed

if TYPE_CHECKING:
    from ..surface import AsyncStore

__all__ = ["ACTOR", "LOOPBACK_NAMES", "WITHDRAWN_ERROR", "create_app", "session_path"]

#: The names a dashboard bound to a loopback address answers to.
LOOPBACK_NAMES: Final = ("127.0.0.1", "localhost", "::1")
#: Who the audit trail names for the dashboard's actions.
ACTOR: Final = "dashboard"
WITHDRAWN_ERROR: Final = "Withdrawn by an operator from the dashboard."
PAGE_SIZE: Final = 50
MAX_PAGE: Final = 500
RECENT_FAILURES: Final = 10
#: Hits a search page shows unless ``limit`` says otherwise.
SEARCH_PAGE: Final = 20
HEARTBEAT: Final = 15.0
STATES: Final = tuple(state.value for state in HandoffState)


def session_path(session_id: str, prefix: str = "/sessions/") -> str:
    """The URL of a session's page: the id percent-encoded as one path segment.

    ``.`` and ``..`` (even encoded) are dot segments a browser would resolve away, so those
    two ids travel as a query parameter instead.
    """
    if session_id in {".", ".."}:
        return f"{prefix.rstrip('/')}?id={quote(session_id, safe='')}"
    return prefix + quote(session_id, safe="")


def _iso(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


class Dashboard:
    """The state behind the app: the store, the change feed, the token and the templates."""

    def __init__(
        self, store: AsyncStore, *, token: str | None, where: str, feed_interval: float = 0.5
    ) -> None:
        self.store = store
        self.token = token or None
        self.where = where
        self.feed = ChangeFeed(store, interval=feed_interval)
        self.templates = Environment(
            loader=PackageLoader("hermes_state.dashboard", "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
        )
        self.templates.filters.update(
            iso=_iso, age=_age, session_url=session_path, marked=marked_snippet
        )
        self.templates.globals.update(
            states=STATES, where=where, tool_calls_of=tool_calls_of, result_tool=result_tool
        )

    def render(self, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        context.setdefault("actions_enabled", self.token is not None)
        html = self.templates.get_template(name).render(**context)
        return HTMLResponse(html, status_code=status_code)

    # -- reads -----------------------------------------------------------------------------

    async def overview(self, query: Mapping[str, str]) -> dict[str, Any]:
        state, limit, after, search = _listing_query(query)
        now = time.time()
        stats = await self.store.handoff_stats()
        running = await self.store.list_handoffs("running", limit=MAX_PAGE)
        failures = await self.store.recent_handoff_failures(limit=RECENT_FAILURES)
        rows = await self.store.list_handoffs(state, limit=limit, after=after, search=search)
        running.sort(key=lambda row: (row.get("handoff_owner") or "", row["id"]))
        return {
            "now": now,
            "stats": stats,
            "running": running,
            "failures": failures,
            "rows": rows,
            "next_after": rows[-1]["id"] if len(rows) == limit else None,
            "filter": {"state": state, "limit": limit, "after": after, "q": search},
        }

    async def search(self, query: Mapping[str, str]) -> dict[str, Any]:
        """The messages matching ``q`` (``search_messages``, the best match first)."""
        text = (query.get("q") or "").strip()
        raw_limit = query.get("limit") or str(SEARCH_PAGE)
        try:
            limit = int(raw_limit)
        except ValueError:
            raise InvalidInputError(f"limit must be a whole number, not {raw_limit!r}") from None
        if not 1 <= limit <= MAX_PAGE:
            raise InvalidInputError(f"limit must be between 1 and {MAX_PAGE}, not {limit}")
        hits = await self.store.search_messages(text, limit=limit) if text else []
        return {"q": text, "limit": limit, "hits": hits}

    async def session(self, session_id: str) -> dict[str, Any] | None:
        row = await self.store.get_session(session_id)
        if row is None:
            return None
        return {
            "session": row,
            "handoff": await self.store.get_handoff_state(session_id),
            "history": await self.store.handoff_history(session_id),
            "messages": await self.store.get_messages(session_id),
        }

    # -- actions ---------------------------------------------------------------------------

    def refuse(self, request: Request) -> Response | None:
        """Why this action request may not run, or None when it may."""
        if self.token is None:
            return _error(
                403,
                "the dashboard is read-only: restart it with --token "
                "(or HERMES_STATE_DASHBOARD_TOKEN) to enable actions",
            )
        site = request.headers.get("sec-fetch-site")
        if site is not None and site not in {"same-origin", "none"}:
            return _error(403, f"cross-site request refused (Sec-Fetch-Site: {site})")
        origin = request.headers.get("origin")
        if origin is not None and not _same_origin(origin, request):
            return _error(403, "cross-site request refused (Origin does not match this dashboard)")
        scheme, _, presented = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            return _error(401, "send the dashboard token as `Authorization: Bearer TOKEN`")
        if not hmac.compare_digest(presented.strip().encode(), self.token.encode()):
            return _error(401, "wrong dashboard token: send the one the dashboard was started with")
        return None


def _same_origin(origin: str, request: Request) -> bool:
    # host:port only: behind a TLS-terminating proxy the scheme differs, the site does not.
    return urlsplit(origin).netloc.lower() == request.headers.get("host", "").lower()


class HostCheck:
    """ASGI middleware: answer 400 to a request whose ``Host`` is not one of ``allowed``.

    A dashboard on a loopback address must not answer under another name: a page on another
    site could otherwise rebind its own name to 127.0.0.1 and read the dashboard's pages.
    """

    def __init__(self, app: ASGIApp, allowed: Collection[str]) -> None:
        self.app = app
        self.allowed = frozenset(name.lower() for name in allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in {"http", "websocket"}:
            host = Headers(scope=scope).get("host", "")
            name = urlsplit(f"//{host}").hostname or ""
            if name not in self.allowed:
                message = f"unexpected Host {host!r}: open the dashboard by its own address"
                await _error(400, message)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def marked_snippet(snippet: object) -> Markup:
    """A search snippet as HTML: its text escaped, the ``>>>``/``<<<`` marks as ``<mark>``."""
    escaped = str(escape(str(snippet or "")))
    return Markup(escaped.replace("&gt;&gt;&gt;", "<mark>").replace("&lt;&lt;&lt;", "</mark>"))


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _listing_query(query: Mapping[str, str]) -> tuple[str | None, int, str | None, str | None]:
    state = query.get("state") or None
    if state is not None and state not in STATES:
        raise InvalidInputError(f"unknown state {state!r}; expected one of {', '.join(STATES)}")
    raw_limit = query.get("limit") or str(PAGE_SIZE)
    try:
        limit = int(raw_limit)
    except ValueError:
        raise InvalidInputError(f"limit must be a whole number, not {raw_limit!r}") from None
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidInputError(f"limit must be between 1 and {MAX_PAGE}, not {limit}")
    return state, limit, query.get("after") or None, query.get("q") or None


def _session_id(request: Request) -> str:
    session_id = request.path_params.get("session_id") or request.query_params.get("id")
    if not session_id:
        raise InvalidInputError("name a session: /sessions/ID (percent-encoded) or ?id=ID")
    return str(session_id)


def _json(document: Any, status_code: int = 200) -> Response:
    body = json.dumps(document, default=str, ensure_ascii=False)
    return Response(body, status_code=status_code, media_type="application/json")


def create_app(
    store: AsyncStore,
    *,
    token: str | None = None,
    where: str = "",
    feed_interval: float = 0.5,
    allowed_hosts: Collection[str] | None = None,
) -> Starlette:
    """The dashboard for ``store`` (awaitable). ``token`` enables the actions; ``where`` is
    shown in the header and must not carry a password (``engine.describe`` masks it);
    ``allowed_hosts``, when given, are the only names the ``Host`` header may carry."""
    dashboard = Dashboard(store, token=token, where=where, feed_interval=feed_interval)

    async def index(request: Request) -> Response:
        overview = await dashboard.overview(request.query_params)
        template = "_overview.html" if request.query_params.get("fragment") else "index.html"
        return dashboard.render(template, **overview)

    async def session_page(request: Request) -> Response:
        session_id = _session_id(request)
        found = await dashboard.session(session_id)
        if found is None:
            return dashboard.render("missing.html", 404, session_id=session_id)
        template = "_session.html" if request.query_params.get("fragment") else "session.html"
        return dashboard.render(template, session_id=session_id, **found)

    async def search_page(request: Request) -> Response:
        found = await dashboard.search(request.query_params)
        return dashboard.render("search.html", **found)

    async def api_search(request: Request) -> Response:
        found = await dashboard.search(request.query_params)
        return _json(found)

    async def api_stats(request: Request) -> Response:
        stats = await store.handoff_stats()
        return _json({"where": where, "now": time.time(), **stats})

    async def api_handoffs(request: Request) -> Response:
        state, limit, after, search = _listing_query(request.query_params)
        rows = await store.list_handoffs(state, limit=limit, after=after, search=search)
        next_after = rows[-1]["id"] if len(rows) == limit else None
        return _json({"handoffs": rows, "next_after": next_after})

    async def api_session(request: Request) -> Response:
        session_id = _session_id(request)
        found = await dashboard.session(session_id)
        if found is None:
            return _error(404, f"no session {session_id!r}")
        return _json(found)

    async def metrics(request: Request) -> Response:
        stats = await store.handoff_stats()
        return Response(render_stats(stats), media_type=CONTENT_TYPE)

    async def events(request: Request) -> Response:
        async def stream() -> AsyncIterator[str]:
            async with dashboard.feed.subscribe() as subscription:
                yield "retry: 1000\n: connected\n\n"
                while True:
                    try:
                        async with asyncio.timeout(HEARTBEAT):
                            event = await subscription.queue.get()
                    except TimeoutError:
                        yield ": heartbeat\n\n"
                        continue
                    if event is None:  # dropped (too slow) or shutting down
                        return
                    payload = json.dumps(event, default=str, ensure_ascii=False)
                    yield f"id: {event['id']}\nevent: handoff\ndata: {payload}\n\n"

        headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)

    async def act(request: Request) -> Response:
        refused = dashboard.refuse(request)
        if refused is not None:
            return refused
        action = request.path_params["action"]
        if action == "reclaim":
            reclaimed = await store.reclaim_expired_handoffs(STRANDED_ERROR)
            dashboard.feed.wake()
            return _json({"reclaimed": reclaimed})
        session_id = _session_id(request)
        if action == "retry":
            done = await store.retry_handoff(session_id)
            refusal = "only a failed handoff can be retried"
        elif action == "withdraw":
            done = await store.fail_handoff(session_id, WITHDRAWN_ERROR, only_states=("pending",))
            refusal = (
                "only a pending handoff can be withdrawn (a claimed one belongs to its gateway)"
            )
        else:
            return _error(404, f"unknown action {action!r}; expected retry, withdraw or reclaim")
        state = await store.get_handoff_state(session_id)
        if state is None:
            return _error(404, f"no session {session_id!r}")
        if not done:
            return _error(409, f"{refusal}; {session_id!r} is {state['state'] or 'not handed off'}")
        dashboard.feed.wake()
        return _json({"id": session_id, "done": True, **state})

    async def bad_input(request: Request, exc: Exception) -> Response:
        if request.url.path.startswith("/api/"):
            return _error(400, str(exc))
        return dashboard.render("error.html", 400, message=str(exc))

    async def refused(request: Request, exc: Exception) -> Response:
        if request.url.path.startswith("/api/"):
            return _error(503, str(exc))
        return dashboard.render("error.html", 503, message=str(exc))

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        await dashboard.feed.start()
        try:
            yield
        finally:
            await dashboard.feed.stop()

    routes = [
        Route("/", index),
        Route("/sessions", session_page),
        Route("/sessions/{session_id:path}", session_page),
        Route("/search", search_page),
        Route("/api/search", api_search),
        Route("/api/stats", api_stats),
        Route("/api/handoffs", api_handoffs),
        Route("/api/sessions", api_session),
        Route("/api/sessions/{session_id:path}", api_session),
        Route("/api/actions/{action}", act, methods=["POST"]),
        Route("/api/actions/{action}/{session_id:path}", act, methods=["POST"]),
        Route("/events", events),
        Route("/metrics", metrics),
        Mount("/static", StaticFiles(packages=[("hermes_state.dashboard", "static")])),
    ]
    middleware = [] if allowed_hosts is None else [Middleware(HostCheck, allowed=allowed_hosts)]
    app = Starlette(
        routes=routes,
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={
            InvalidInputError: bad_input,
            InvalidInputTypeError: bad_input,
            HermesStateError: refused,
        },
    )
    app.state.dashboard = dashboard
    return app
