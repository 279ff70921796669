"""URLs with a NUL character are refused with 400 before any route runs.

PostgreSQL refuses NUL in text, so a NUL in a path or a query parameter can only be garbage
(in a hostname, a search) and would otherwise surface as a 500 deep in a query. A plain ASGI
middleware, not ``@app.middleware("http")``: Starlette's ``BaseHTTPMiddleware`` runs every
request (every agent's batch included) through an extra task and a memory stream for its body.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from app.web import render_error_page

DETAIL = "the URL contains a NUL character"


def has_nul(scope: Scope) -> bool:
    """Whether the request's path or a decoded query parameter (name or value) holds a NUL."""
    if "\x00" in scope.get("path", ""):
        return True
    if b"%00" not in scope.get("query_string", b"").lower() and b"\x00" not in scope.get(
        "query_string", b""
    ):
        return False
    params = Request(scope).query_params.multi_items()
    return any("\x00" in k + v for k, v in params)


class NulInUrlMiddleware:
    """400 (JSON under ``/api/``, the error page elsewhere) for a URL holding a NUL."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not has_nul(scope):
            await self.app(scope, receive, send)
            return
        response: Response
        if scope.get("path", "").startswith("/api/"):
            response = JSONResponse({"detail": DETAIL}, status_code=400)
        else:
            response = render_error_page(Request(scope, receive), status_code=400, detail=DETAIL)
        await response(scope, receive, send)
