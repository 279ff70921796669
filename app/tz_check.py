"""Every HTML page refuses a bad ``?tz=`` with 400 naming ``tz``, in one place.

Pages read the viewer's zone lazily (:func:`app.viewer_time.viewer_tz`, the ``utc`` template
filter), so a page that shows no time, or redirects first, used to answer 200 in UTC or drop the
parameter. This ASGI middleware checks ``tz`` before any page runs, for every method (a POST
form's action carries the viewer's ``tz`` too). JSON API routes validate their own ``tz``.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from app.viewer_time import TZ_PARAM, parse_zone
from app.web import render_error_page


def bad_tz_detail(request: Request) -> str | None:
    """``"tz: unknown time zone 'Mars/Phobos' (…)"`` for a non-empty ``?tz=`` that names no IANA
    zone, else ``None`` (an empty ``tz=`` means "not given", as in :func:`viewer_tz`)."""
    for raw in request.query_params.getlist(TZ_PARAM):
        if raw.strip():
            try:
                parse_zone(raw)
            except ValueError as exc:
                return f"{TZ_PARAM}: {exc}"
    return None


class PageTzCheckMiddleware:
    """Answer the 400 error page (or htmx fragment) for a bad ``?tz=`` on any path outside
    ``/api/`` and ``/static/``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if not path or path.startswith(("/api/", "/static/")):
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        detail = bad_tz_detail(request)
        if detail is None:
            await self.app(scope, receive, send)
            return
        await render_error_page(request, status_code=400, detail=detail)(scope, receive, send)
