"""Security headers on every answer (OWASP Secure Headers Project, HTTP Headers Cheat Sheet).

* ``Content-Security-Policy``: scripts only from this server (no inline script, no eval: the
  pages' behaviour is in ``static/js``; JSON data blocks are not executed), nothing framed
  (``frame-ancestors 'none'``), forms post only here. Inline *styles* are allowed: htmx and
  Plotly set element styles at run time.
* ``X-Content-Type-Options: nosniff``, ``X-Frame-Options: DENY`` (older browsers),
  ``Referrer-Policy: same-origin`` (acknowledgement links carry a signed token in the path).
* ``Strict-Transport-Security`` when the request came over TLS or ``external_url`` is https
  (a TLS-terminating proxy in front); browsers ignore it over plain http.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
HSTS = "max-age=31536000; includeSubDomains"


class SecurityHeadersMiddleware:
    """Adds the headers above to every HTTP answer (a header the endpoint set is kept)."""

    def __init__(self, app: ASGIApp, *, external_url: str | None = None) -> None:
        self.app = app
        self.behind_tls = bool(external_url and external_url.lower().startswith("https://"))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        tls = self.behind_tls or scope.get("scheme") == "https"

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
                headers.setdefault("X-Content-Type-Options", "nosniff")
                headers.setdefault("X-Frame-Options", "DENY")
                headers.setdefault("Referrer-Policy", "same-origin")
                if tls:
                    headers.setdefault("Strict-Transport-Security", HSTS)
            await send(message)

        await self.app(scope, receive, with_headers)
