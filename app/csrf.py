"""Cross-site request forgery defence: OWASP "verify origin with standard headers".

Source: OWASP Cross-Site Request Forgery Prevention Cheat Sheet, sections "Verifying Origin
With Standard Headers" and "Fetch Metadata headers". For an unsafe method (POST, PUT, PATCH,
DELETE) the request is refused with 403 when

* ``Sec-Fetch-Site`` is ``cross-site``, or ``same-site`` while ``Origin`` names another origin
  (a sibling subdomain is a different origin), or
* an ``Origin`` header is present (``null`` included) and its ``scheme://host:port`` is neither
  the request's own origin (scheme of the connection + ``Host`` header) nor the origin of the
  configured ``external_url`` (the base URL used in notification links).

Requests with neither header pass: agents posting ``/api/v1/ingest``, curl and API clients send
none, and browsers always send ``Origin`` on a cross-origin form post. ``X-Forwarded-*`` is not
trusted (the app has no trusted-proxy setting); behind a proxy that rewrites ``Host``, set
``external_url``.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from app.web import render_error_page

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def normalize_origin(url: str) -> str | None:
    """``scheme://host:port`` of ``url`` with the default port filled in and lowercased
    (``https://Fw.example`` → ``https://fw.example:443``); ``None`` for ``null`` or anything
    without a scheme and host."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if not scheme or not host:
        return None
    port = port or _DEFAULT_PORTS.get(scheme)
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"


def request_origins(scope: Scope, external_url: str | None) -> set[str]:
    """The origins this request may come from: its own (connection scheme + ``Host``) and that
    of ``external_url`` when configured."""
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    origins: set[str] = set()
    host = headers.get("host")
    if host:
        own = normalize_origin(f"{scope.get('scheme', 'http')}://{host}")
        if own:
            origins.add(own)
    if external_url:
        configured = normalize_origin(external_url)
        if configured:
            origins.add(configured)
    return origins


def csrf_refusal(scope: Scope, external_url: str | None) -> str | None:
    """Why an unsafe request must be refused, or ``None`` when it may proceed."""
    if scope["method"] not in UNSAFE_METHODS:
        return None
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    origin = headers.get("origin")
    fetch_site = headers.get("sec-fetch-site", "").strip().lower()
    if fetch_site == "cross-site":
        return "cross-site request refused (Sec-Fetch-Site: cross-site)"
    if origin is None:
        if fetch_site == "same-site":
            return "cross-origin request refused (Sec-Fetch-Site: same-site without Origin)"
        return None
    normalized = normalize_origin(origin)
    if normalized is None or normalized not in request_origins(scope, external_url):
        return f"cross-origin request refused (Origin: {origin[:200]})"
    return None


class OriginCheckMiddleware:
    """ASGI middleware applying :func:`csrf_refusal`: 403 JSON ``{"detail": …}`` under
    ``/api/``, the HTML error page elsewhere."""

    def __init__(self, app: ASGIApp, external_url: str | None = None) -> None:
        self.app = app
        self.external_url = external_url

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        reason = csrf_refusal(scope, self.external_url)
        if reason is None:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        response: Response
        if scope["path"].startswith("/api/"):
            response = JSONResponse({"detail": reason}, status_code=403)
        else:
            response = render_error_page(request, status_code=403, detail=reason)
        await response(scope, receive, send)
