"""Sending one message: the kind's requests, through the SSRF guard, with timeouts, read back
into an :class:`~app.notify.channels.base.Outcome`. No database here.

Each request goes to the address :func:`app.notify.ssrf.check_url` approved (``Host`` header
and TLS server name set to the original host, via httpcore's ``sni_hostname`` extension), never
follows redirects (a redirect could point anywhere), and carries an ``Idempotency-Key`` that is
the same on every retry of the same rows, so a receiver can drop the duplicate a timed-out
attempt may have caused. Error texts are passed through :func:`app.notify.secrets.redact`.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from app.notify.channels.base import ChannelConfig, ChannelKind, NoticeGroup, Outcome
from app.notify.secrets import redact
from app.notify.ssrf import BlockedDestination, Unresolvable, check_url

IDEMPOTENCY_HEADER = "Idempotency-Key"


@dataclass(frozen=True)
class SendResult:
    """The outcome of a message, the last HTTP status seen (``None`` when no answer came) and
    the milliseconds spent waiting for answers."""

    outcome: Outcome
    status_code: int | None
    latency_ms: float


def idempotency_key(row_ids: Sequence[int]) -> str:
    """A stable key for a set of delivery rows (SHA-256 of their sorted ids, 32 hex digits)."""
    digest = hashlib.sha256(",".join(str(i) for i in sorted(row_ids)).encode()).hexdigest()
    return f"fleetwatch-{digest[:32]}"


def send_group(
    client: httpx.Client,
    kind: ChannelKind,
    group: NoticeGroup,
    config: ChannelConfig,
    *,
    row_ids: Sequence[int],
    allow_hosts: Sequence[str],
) -> SendResult:
    """Build and send ``group``; stops at the first request that is not ``ok`` (the whole
    message is retried: its parts are idempotent by key). Never raises for network trouble:
    timeouts and connection errors are retryable outcomes."""
    secrets_ = (config.url, config.secret)
    try:
        requests = kind.build(group, config)
    except ValueError as exc:
        return SendResult(Outcome(ok=False, detail=f"bad channel settings: {exc}"), None, 0.0)
    key = idempotency_key(row_ids)
    waited_ms = 0.0
    last_code: int | None = None
    for part, request in enumerate(requests, start=1):
        try:
            target = check_url(request.url, allow=allow_hosts)
        except Unresolvable as exc:
            detail = redact(str(exc), *secrets_)
            return SendResult(Outcome(ok=False, detail=detail, retryable=True), None, waited_ms)
        except BlockedDestination as exc:
            return SendResult(Outcome(ok=False, detail=redact(str(exc), *secrets_)), None, 0.0)
        headers = {
            **dict(request.headers),
            "Host": target.host_header,
            IDEMPOTENCY_HEADER: f"{key}-{part}" if len(requests) > 1 else key,
        }
        headers.setdefault("User-Agent", "Fleetwatch-Notifier")
        started = time.perf_counter()
        try:
            response = client.request(
                request.method,
                target.pinned_url,
                content=request.body,
                headers=headers,
                extensions={"sni_hostname": target.host},
            )
        except httpx.TimeoutException as exc:
            waited_ms += (time.perf_counter() - started) * 1000
            detail = f"timed out ({type(exc).__name__})"
            return SendResult(Outcome(ok=False, detail=detail, retryable=True), None, waited_ms)
        except httpx.TransportError as exc:
            waited_ms += (time.perf_counter() - started) * 1000
            detail = redact(f"connection error: {type(exc).__name__}: {exc}", *secrets_)
            return SendResult(Outcome(ok=False, detail=detail, retryable=True), None, waited_ms)
        waited_ms += (time.perf_counter() - started) * 1000
        last_code = response.status_code
        outcome = kind.interpret(response.status_code, response.headers, response.content)
        if not outcome.ok:
            cleaned = Outcome(
                ok=False,
                detail=redact(outcome.detail, *secrets_),
                retryable=outcome.retryable,
                retry_after_s=outcome.retry_after_s,
                broken=outcome.broken,
            )
            return SendResult(cleaned, last_code, waited_ms)
    return SendResult(Outcome(ok=True, detail=f"HTTP {last_code}"), last_code, waited_ms)
