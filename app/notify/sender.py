"""Sending one message: the kind's requests, part by part, paced per destination, through
the SSRF guard, with timeouts, read back into an
:class:`~app.notify.channels.base.Outcome` per part. No database here but the pacer's.

Each request goes to the address :func:`app.notify.ssrf.check_url` approved (``Host`` header
and TLS server name set to the original host, via httpcore's ``sni_hostname`` extension), never
follows redirects (a redirect could point anywhere), and carries an ``Idempotency-Key`` derived
from the delivery rows of that part, the same on every retry, so a receiver can drop the
duplicate a timed-out attempt may have caused. Parts whose rows were all accepted before are not
sent again; sending stops at the first part that fails or is held back (the rest wait for the
retry, in order). Error texts are passed through :func:`app.notify.secrets.redact`.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

import httpx

from app.notify.channels import common
from app.notify.channels.base import (
    ChannelConfig,
    ChannelKind,
    NoticeGroup,
    OutboundRequest,
    Outcome,
)
from app.notify.pacing import Pace, Pacer, destination_key
from app.notify.secrets import redact
from app.notify.ssrf import BlockedDestination, Unresolvable, check_url

log = logging.getLogger(__name__)
IDEMPOTENCY_HEADER = "Idempotency-Key"


@dataclass(frozen=True)
class PartResult:
    """One part: its number (1-based) of ``parts``, the notice indexes it ``covers``, and its
    ``outcome``; ``None`` when it was not sent (held back until ``held_until``, or after an
    earlier part failed). ``skipped``: all its rows were accepted on an earlier attempt."""

    part: int
    parts: int
    covers: tuple[int, ...]
    outcome: Outcome | None
    status_code: int | None = None
    latency_ms: float = 0.0
    held_until: datetime | None = None
    skipped: bool = False
    #: The service's answer (its first 64 KiB): what an incident message's post is read back
    #: from (the message's reference).
    answer: bytes = b""


@dataclass(frozen=True)
class SendResult:
    """The outcome of a message (ok when every part sent was accepted, else the first
    failure), the last HTTP status seen (``None`` when no answer came), the milliseconds spent
    waiting for answers, each part's result (empty when the message failed before any part:
    the outcome then applies to every row), and what was cut to fit (``None``: nothing)."""

    outcome: Outcome
    status_code: int | None
    latency_ms: float
    parts: tuple[PartResult, ...] = ()
    truncated: str | None = None


@dataclass
class Pacing:
    """How a message is paced: the shared :class:`Pacer`, the channel's :class:`Pace`
    (``None``: no limit, holds still count) and the longest wait for a slot, in seconds."""

    pacer: Pacer
    pace: Pace | None
    max_wait_s: float = 10.0
    budget_s: float = field(default=30.0)


def idempotency_key(row_ids: Sequence[int]) -> str:
    """A stable key for a set of delivery rows (SHA-256 of their sorted ids, 32 hex digits)."""
    digest = hashlib.sha256(",".join(str(i) for i in sorted(row_ids)).encode()).hexdigest()
    return f"fleetwatch-{digest[:32]}"


def _cut_note(notes: list[str]) -> str | None:
    if not notes:
        return None
    shown = "; ".join(dict.fromkeys(notes[:5]))
    more = f" (+{len(notes) - 5} more)" if len(notes) > 5 else ""
    return f"truncated to fit: {shown}{more}"


def send_group(
    client: httpx.Client,
    kind: ChannelKind,
    group: NoticeGroup,
    config: ChannelConfig,
    *,
    row_ids: Sequence[int],
    allow_hosts: Sequence[str],
    done: Collection[int] = (),
    pacing: Pacing | None = None,
) -> SendResult:
    """Build ``group`` (``row_ids[i]`` is the row of ``group.notices[i]``) and send each part
    that covers a notice whose index is not in ``done``, paced. Never raises for network
    trouble: timeouts and connection errors are retryable outcomes."""
    secrets_ = (config.url, config.secret)
    with common.counting_cuts() as cuts:
        try:
            requests = kind.build(group, config)
        except ValueError as exc:
            detail = f"bad channel settings: {exc}"
            return SendResult(Outcome(ok=False, detail=detail), None, 0.0)
    truncated = _cut_note(cuts)
    if truncated:
        log.warning("%s notification of %d alerts %s", kind.kind, len(group.notices), truncated)
    key = destination_key(kind, config) if pacing else ""
    started = time.monotonic()
    results: list[PartResult] = []
    stop: PartResult | None = None
    for part, request in enumerate(requests, start=1):
        covers = request.covers if request.covers is not None else tuple(range(len(row_ids)))
        if stop is not None:
            results.append(
                PartResult(part, len(requests), covers, None, held_until=stop.held_until)
            )
            continue
        if all(i in done for i in covers):
            results.append(PartResult(part, len(requests), covers, None, skipped=True))
            continue
        if pacing is not None:
            budget = pacing.budget_s - (time.monotonic() - started)
            held = _wait_for_slot(pacing, key, max_wait_s=max(0.0, min(pacing.max_wait_s, budget)))
            if held is not None:
                stop = PartResult(part, len(requests), covers, None, held_until=held)
                results.append(stop)
                continue
        ids = [row_ids[i] for i in covers]
        result = _send_part(client, kind, request, part, len(requests), covers, ids, allow_hosts)
        result = _cleaned(result, secrets_)
        results.append(result)
        outcome = result.outcome
        if outcome is not None and not outcome.ok:
            if pacing is not None and (result.status_code == 429 or outcome.retry_after_s):
                until = pacing.pacer.hold(key, seconds=outcome.retry_after_s)
                result = replace(result, held_until=until)
                results[-1] = result
            stop = result
    return _summary(results, truncated)


def _wait_for_slot(pacing: Pacing, key: str, *, max_wait_s: float) -> datetime | None:
    """Reserve a slot and sleep until it; ``None`` when the part may go now, else the end of
    the hold that keeps it back (another thread's 429 seen after the sleep included)."""
    slot = pacing.pacer.reserve(key, pacing.pace, max_wait_s=max_wait_s)
    if slot.held_until is not None:
        return slot.held_until
    if slot.wait_s > 0:
        time.sleep(slot.wait_s)
        return pacing.pacer.held_until(key)
    return None


def _send_part(
    client: httpx.Client,
    kind: ChannelKind,
    request: OutboundRequest,
    part: int,
    parts: int,
    covers: tuple[int, ...],
    ids: Sequence[int],
    allow_hosts: Sequence[str],
) -> PartResult:
    def failed(detail: str, *, retryable: bool, waited_ms: float = 0.0) -> PartResult:
        outcome = Outcome(ok=False, detail=detail, retryable=retryable)
        return PartResult(part, parts, covers, outcome, None, waited_ms)

    try:
        target = check_url(request.url, allow=allow_hosts)
    except Unresolvable as exc:
        return failed(str(exc), retryable=True)
    except BlockedDestination as exc:
        return failed(str(exc), retryable=False)
    headers = {
        **dict(request.headers),
        "Host": target.host_header,
        IDEMPOTENCY_HEADER: idempotency_key(ids),
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
        waited_ms = (time.perf_counter() - started) * 1000
        return failed(f"timed out ({type(exc).__name__})", retryable=True, waited_ms=waited_ms)
    except httpx.TransportError as exc:
        waited_ms = (time.perf_counter() - started) * 1000
        detail = f"connection error: {type(exc).__name__}: {exc}"
        return failed(detail, retryable=True, waited_ms=waited_ms)
    waited_ms = (time.perf_counter() - started) * 1000
    outcome = kind.interpret(response.status_code, response.headers, response.content)
    return PartResult(
        part,
        parts,
        covers,
        outcome,
        response.status_code,
        waited_ms,
        answer=response.content[:65536],
    )


def send_one(
    client: httpx.Client,
    kind: ChannelKind,
    request: OutboundRequest,
    config: ChannelConfig,
    *,
    row_ids: Sequence[int],
    allow_hosts: Sequence[str],
    pacing: Pacing | None = None,
) -> PartResult:
    """One request carrying all of ``row_ids`` (an incident message's post, edit or thread
    reply), paced, through the SSRF guard, its detail redacted; a 429 or ``Retry-After``
    holds the destination as :func:`send_group` does. ``outcome`` is ``None`` when the pace
    held it back (until ``held_until``). Never raises for network trouble."""
    covers = tuple(range(len(row_ids)))
    key = destination_key(kind, config) if pacing else ""
    if pacing is not None:
        held = _wait_for_slot(pacing, key, max_wait_s=pacing.max_wait_s)
        if held is not None:
            return PartResult(1, 1, covers, None, held_until=held)
    result = _send_part(client, kind, request, 1, 1, covers, row_ids, allow_hosts)
    result = _cleaned(result, (config.url, config.secret))
    outcome = result.outcome
    throttled = outcome is not None and (result.status_code == 429 or outcome.retry_after_s)
    if pacing is not None and outcome is not None and not outcome.ok and throttled:
        held = pacing.pacer.hold(key, seconds=outcome.retry_after_s)
        result = replace(result, held_until=held)
    return result


def _cleaned(result: PartResult, secrets_: tuple[str | None, ...]) -> PartResult:
    """``result`` with the URL and secret redacted from its detail."""
    outcome = result.outcome
    if outcome is None or outcome.ok:
        return result
    detail = redact(outcome.detail, *secrets_)
    cleaned = Outcome(
        ok=False,
        detail=detail,
        retryable=outcome.retryable,
        retry_after_s=outcome.retry_after_s,
        broken=outcome.broken,
    )
    return replace(result, outcome=cleaned)


def _summary(results: list[PartResult], truncated: str | None) -> SendResult:
    """The message's outcome from its parts' (see :class:`SendResult`)."""
    sent = [r for r in results if r.outcome is not None]
    latency = sum(r.latency_ms for r in sent)
    code = sent[-1].status_code if sent else None
    failure = next((r.outcome for r in sent if r.outcome and not r.outcome.ok), None)
    if failure is not None:
        outcome = failure
    elif any(r.held_until for r in results):
        outcome = Outcome(ok=False, detail="held back: the destination is rate-limited")
    else:
        outcome = Outcome(ok=True, detail=f"HTTP {code}")
    return SendResult(outcome, code, latency, tuple(results), truncated)
