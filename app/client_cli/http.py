"""The HTTP side of the client commands: one :class:`Api` per command run, talking JSON to a
Fleetwatch server's ``/api/v1``, and the errors it turns every failure into.

Every failure becomes an :class:`ApiError` with a one-line message, never a traceback:
:class:`Unreachable` (no connection, a timeout, an answer that is not Fleetwatch's JSON) or
:class:`HttpError` (a 4xx or 5xx with the server's ``detail``, or a POST redirected).
"""

from __future__ import annotations

from typing import Any

import httpx

#: Connection attempts the transport retries, 0 and 0.5 s after a failed one (refused, DNS,
#: connect timeout): a server restarting is given a moment; nothing sent is ever repeated.
CONNECT_RETRIES = 2


class ApiError(Exception):
    """A request that did not give a usable answer; ``str()`` is the one-line message."""


class Unreachable(ApiError):
    """No answer from the server (refused, DNS, TLS, timeout) or not a Fleetwatch answer."""


class HttpError(ApiError):
    """The server answered ``status`` (4xx, 5xx, or a redirect of a POST); the message is its
    ``detail``."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


def detail_text(body: Any) -> str | None:
    """The server's error ``detail`` as one line: a string as it is; FastAPI's validation
    list (``[{"loc": [...], "msg": ...}]``) as ``loc: msg; …``; ``None`` when absent."""
    detail = body.get("detail") if isinstance(body, dict) else None
    if isinstance(detail, str):
        return detail
    if isinstance(detail, list) and detail:
        parts = []
        for item in detail:
            if not isinstance(item, dict):
                parts.append(str(item))
                continue
            loc = [str(p) for p in item.get("loc", ()) if p not in ("body", "query", "path")]
            parts.append(f"{'.'.join(loc)}: {item.get('msg', '')}" if loc else item.get("msg", ""))
        return "; ".join(parts)
    return None


class Api:
    """A client of one server: ``base_url`` (``http(s)://host[:port]``, no ``/api/v1``),
    ``token`` sent as ``Authorization: Bearer …`` when given, ``timeout_s`` per request.
    Close it (or use it in a ``with``)."""

    def __init__(self, base_url: str, *, token: str | None, timeout_s: float) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"Accept": "application/json", "User-Agent": "fleetwatch-cli"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._client = httpx.Client(
            base_url=f"{self.base_url}/api/v1",
            headers=headers,
            timeout=timeout_s,
            transport=httpx.HTTPTransport(retries=CONNECT_RETRIES),
        )

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()

    def get(self, path: str, **params: Any) -> Any:
        """``GET /api/v1{path}`` with ``params`` (``None`` values left out, lists repeated);
        returns the decoded JSON.

        Raises:
            Unreachable: no answer, or an answer that is not JSON.
            HttpError: a 4xx or 5xx answer.
        """
        query = {k: v for k, v in params.items() if v is not None and v != []}
        return self._send("GET", path, params=query)

    def post(self, path: str, body: Any = None) -> Any:
        """``POST /api/v1{path}`` with the JSON ``body``; returns the decoded JSON answer.

        Raises:
            Unreachable: no answer, or an answer that is not JSON.
            HttpError: a 4xx or 5xx answer, or a redirect (never followed by a POST).
        """
        return self._send("POST", path, json=body)

    def _send(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            # GETs follow a redirect (a proxy's http → https; httpx drops the token when one
            # leads to another origin); a POST is never turned into a GET by a 301 or 302.
            response = self._client.request(
                method, path, follow_redirects=method == "GET", **kwargs
            )
        except httpx.TimeoutException as exc:
            raise Unreachable(
                f"cannot reach {self.base_url}: no answer within "
                f"{self._client.timeout.read or 0:g} s ({type(exc).__name__})"
            ) from None
        except httpx.HTTPError as exc:
            raise Unreachable(f"cannot reach {self.base_url}: {_cause(exc)}") from None
        try:
            body = response.json() if response.content else None
        except ValueError:
            body = None
            if response.is_success:
                raise Unreachable(
                    f"{self.base_url} answered {method} {response.request.url.path} with "
                    f"something other than JSON: is it a Fleetwatch server?"
                ) from None
        if response.is_success:
            return body
        raise HttpError(_error_message(response, body), status=response.status_code)


def _cause(exc: httpx.HTTPError) -> str:
    """A transport error's text and class: ``[Errno 111] Connection refused (ConnectError)``."""
    text = str(exc).strip()
    return f"{text} ({type(exc).__name__})" if text else type(exc).__name__


def _error_message(response: httpx.Response, body: Any) -> str:
    """The server's ``detail``, else the status line and the request; a redirect names its
    target, a 401/403 adds how to give a token, a 5xx says it is the server's fault."""
    status = response.status_code
    if response.is_redirect:
        return (
            f"the server redirects {response.request.method} {response.request.url.path} to "
            f"{response.headers.get('Location', '?')}: give that base URL as --server"
        )
    detail = detail_text(body) or (
        f"HTTP {status} {response.reason_phrase} for "
        f"{response.request.method} {response.request.url.path}"
    )
    if status in (401, 403):
        return f"{detail} (HTTP {status}: give an API token with --token or FLEETWATCH_API_TOKEN)"
    if status >= 500:
        return f"server error (HTTP {status}): {detail}"
    return detail
