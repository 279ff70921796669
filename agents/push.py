"""Sending one batch to ``POST {server}/api/v1/ingest`` and saying whether to retry it.

gzip JSON over ``urllib.request`` with a connect timeout and a total deadline. The outcome is
classified as the server contract asks: 2xx ok (its JSON answer kept: it says what was not
stored, :mod:`agents.refusals`); 408, 429, 5xx, redirects, network errors and timeouts
retryable (``Retry-After`` honoured); 401, 403, 404, 405 and 407 held (no batch can pass until
a setting is fixed: the token, the hostname, the server URL, the proxy); any other 4xx
permanent (this batch can never pass).
"""

from __future__ import annotations

import enum
import gzip
import http.client
import json
import random
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import Message
from email.utils import parsedate_to_datetime
from typing import Any

from agents import __version__
from agents.transport import Deadline, build_opener

INGEST_PATH = "/api/v1/ingest"
#: Where the agent's command line reads the ingest token from when not given --token(-file).
TOKEN_ENV = "FLEETWATCH_AGENT_TOKEN"
MAX_RETRY_AFTER_S = 3600.0
#: An accepted batch's answer is read whole up to this size (its rejections list is capped at
#: 100 entries by the server, so a real answer is a few KiB).
MAX_ANSWER_BYTES = 1024 * 1024
_BODY_EXCERPT = 2048
#: Refusals no batch can pass until a setting is fixed: the token (401), the token's hostname
#: (403), the server URL (404, 405), the proxy's credentials (407).
HELD_STATUSES = frozenset({401, 403, 404, 405, 407})


class Outcome(enum.Enum):
    """What to do with a batch after a send attempt."""

    OK = "ok"  # acknowledged (2xx): remove it
    RETRY = "retry"  # keep it and try again after a backoff
    HOLD = "hold"  # refused until a setting is fixed: keep it, say so loudly, retry slowly
    PERMANENT = "permanent"  # this batch refused for good (other 4xx): log and drop it


@dataclass(frozen=True)
class PushResult:
    """The result of one send attempt.

    Attributes:
        outcome: :class:`Outcome`.
        status: the HTTP status, or ``None`` when no response came (network error, timeout).
        retry_after_s: the server's ``Retry-After`` in seconds, if it sent one.
        detail: the response body's start (at most 2 KiB) or the error, for logs.
        answer: a 2xx answer's JSON object (``IngestResult``), ``None`` when it is not one.
    """

    outcome: Outcome
    status: int | None
    retry_after_s: float | None = None
    detail: str = ""
    answer: dict[str, Any] | None = None


def classify_status(status: int) -> Outcome:
    """Map an HTTP status to an :class:`Outcome` (2xx ok; 408/429/5xx/3xx retry;
    :data:`HELD_STATUSES` hold; other 4xx permanent)."""
    if 200 <= status < 300:
        return Outcome.OK
    if status in (408, 429) or status >= 500 or 300 <= status < 400:
        return Outcome.RETRY
    if status in HELD_STATUSES:
        return Outcome.HOLD
    return Outcome.PERMANENT


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Return the delay a ``Retry-After`` header asks for, in seconds (0 to 3600), or ``None``.

    Accepts delta-seconds (``"120"``) and an HTTP-date (``"Wed, 21 Oct 2026 07:28:00 GMT"``,
    parsed with ``email.utils.parsedate_to_datetime``); anything else is ignored.
    """
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if seconds != seconds:  # NaN
        return None
    return min(MAX_RETRY_AFTER_S, max(0.0, seconds))


class Backoff:
    """Exponential backoff with full jitter: the n-th consecutive failure waits a uniform random
    time in ``[0, min(cap_s, base_s * 2**n)]`` seconds, at least the server's ``Retry-After``.

    :meth:`reset` after a success starts over from ``base_s``.
    """

    def __init__(
        self, base_s: float = 1.0, cap_s: float = 60.0, rng: random.Random | None = None
    ) -> None:
        self.base_s = base_s
        self.cap_s = cap_s
        self.failures = 0
        self._rng = rng or random.Random()

    def next_delay(self, retry_after_s: float | None = None) -> float:
        """Count one more failure and return the seconds to wait before the next attempt."""
        ceiling = min(self.cap_s, self.base_s * (2 ** min(self.failures, 32)))
        self.failures += 1
        delay = self._rng.uniform(0.0, ceiling)
        if retry_after_s is not None:
            delay = max(delay, retry_after_s)
        return delay

    def reset(self) -> None:
        """Forget past failures (call after a success)."""
        self.failures = 0


class Pusher:
    """Posts gzip-compressed payload bytes to ``{server_url}/api/v1/ingest`` with a bearer token.

    ``connect_timeout_s`` bounds the TCP (and TLS) connect; ``timeout_s`` bounds the whole
    exchange, enforced by closing the socket when it expires. Redirects are not followed (a POST
    must not turn into a GET); they are retried and logged as a configuration problem.
    """

    def __init__(
        self,
        server_url: str,
        token: str,
        *,
        connect_timeout_s: float = 5.0,
        timeout_s: float = 30.0,
    ) -> None:
        self.url = server_url.rstrip("/") + INGEST_PATH
        self._token = token
        self.connect_timeout_s = connect_timeout_s
        self.timeout_s = timeout_s

    def push(self, json_body: bytes, *, timeout_s: float | None = None) -> PushResult:
        """Gzip ``json_body`` (UTF-8 JSON of one payload), POST it and classify the outcome.

        ``timeout_s`` shortens the total timeout for this call (a shutdown's last push). Never
        raises for network or HTTP trouble: those become a :class:`PushResult`.
        """
        total_s = self.timeout_s if timeout_s is None else min(self.timeout_s, timeout_s)
        body = gzip.compress(json_body, compresslevel=6)
        request = urllib.request.Request(
            self.url,
            data=body,
            method="POST",
            headers={
                "Authorization": f"Bearer {self._token}",
                "Content-Type": "application/json",
                "Content-Encoding": "gzip",
                "User-Agent": f"fleetwatch-agent/{__version__}",
            },
        )
        deadline = Deadline(total_s)
        opener = build_opener(self.connect_timeout_s, deadline)
        try:
            with opener.open(request, timeout=total_s) as response:
                raw = response.read(MAX_ANSWER_BYTES)
            if deadline.fired:
                return PushResult(Outcome.RETRY, None, None, "timeout: answer cut off")
            outcome = classify_status(response.status)
            answer = _answer(raw) if outcome is Outcome.OK else None
            return PushResult(outcome, response.status, None, _excerpt(raw), answer)
        except urllib.error.HTTPError as exc:
            result = self._http_error(exc)
            if deadline.fired:
                return PushResult(Outcome.RETRY, None, None, "timeout: answer cut off")
            return result
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", exc)
            timed_out = deadline.fired or deadline.expired or isinstance(reason, TimeoutError)
            what = "timeout" if timed_out else "network error"
            return PushResult(Outcome.RETRY, None, None, f"{what}: {reason}")
        finally:
            deadline.disarm()

    def _http_error(self, exc: urllib.error.HTTPError) -> PushResult:
        try:
            detail = _excerpt(exc.read(_BODY_EXCERPT))
        except (OSError, http.client.HTTPException):
            detail = ""
        finally:
            exc.close()
        headers: Message | None = exc.headers
        retry_after = parse_retry_after(headers.get("Retry-After") if headers else None)
        if 300 <= exc.code < 400:
            location = headers.get("Location") if headers else None
            detail = f"redirect to {location!r} not followed; check --server. {detail}"
        return PushResult(classify_status(exc.code), exc.code, retry_after, detail)


def _excerpt(raw: bytes) -> str:
    return raw[:_BODY_EXCERPT].decode("utf-8", errors="replace")


def _answer(raw: bytes) -> dict[str, Any] | None:
    """The JSON object of an accepted batch's answer; ``None`` for anything else (an older or
    foreign server: the batch still counts as acknowledged)."""
    try:
        answer = json.loads(raw)
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None
