"""Fetching one dcgm-exporter ``/metrics`` document over HTTP (httpx)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

import httpx

from app.db import utcnow

#: A larger body is refused (an 8-GPU node with every DCGM field is about 200 KiB).
MAX_BODY_BYTES = 32 * 1024 * 1024
_ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"


@dataclass(frozen=True)
class Fetched:
    """One try: the document (None on failure), why it failed, when the answer came (or the
    try ended) and how long it took."""

    text: str | None
    error: str | None
    at: datetime
    duration_s: float


def fetch(
    client: httpx.Client,
    url: str,
    *,
    max_bytes: int = MAX_BODY_BYTES,
    deadline_s: float | None = None,
) -> Fetched:
    """GET ``url`` with ``client`` (whose timeout applies to each connect and read). Never
    raises for the network or the answer: a refused connection, a timeout, a status other than
    200, a body over ``max_bytes`` or an answer still coming after ``deadline_s`` (default: the
    client's read timeout) is :attr:`Fetched.error`.

    httpx's read timeout bounds each wait for data, not the whole body: an exporter (or a proxy)
    that sends a line now and then would hold the round forever without the deadline, which
    is checked after each chunk (so it is overrun by one read's wait at most).
    """
    started = time.perf_counter()
    limit_s = deadline_s if deadline_s is not None else client.timeout.read

    def failed(error: str) -> Fetched:
        return Fetched(None, error, utcnow(), time.perf_counter() - started)

    try:
        with client.stream("GET", url, headers={"Accept": _ACCEPT}) as response:
            if response.status_code != 200:
                return failed(f"HTTP {response.status_code} {response.reason_phrase}".strip())
            chunks: list[bytes] = []
            size = 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > max_bytes:
                    return failed(f"the body is over {max_bytes} bytes")
                if limit_s is not None and time.perf_counter() - started > limit_s:
                    return failed(f"timed out after {limit_s:g} s (the body was still coming)")
                chunks.append(chunk)
            encoding = response.encoding or "utf-8"
    except httpx.TimeoutException:
        return failed(f"timed out after {client.timeout.read or client.timeout.connect} s")
    except httpx.HTTPError as exc:
        return failed(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
    text = b"".join(chunks).decode(encoding, errors="replace")
    return Fetched(text, None, utcnow(), time.perf_counter() - started)
