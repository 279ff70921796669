"""The delivery worker: claim due outbox rows, send them grouped, record each outcome.

A tick (every ``notify_worker_interval_s``, :mod:`app.notify.jobs`):

1. **Claim** (one short transaction): queued rows whose ``not_before`` has come, not leased by
   another worker, and with no older queued row of the same alert and channel (per-alert
   order). On Postgres ``SELECT … FOR UPDATE OF notify_delivery SKIP LOCKED``, so several
   processes share the work without taking a row twice; SQLite's single writer serializes it.
   Claimed rows get a lease (``leased_until``) and ``attempts + 1``; firing/repeat rows whose
   alert is now silenced (or, for repeats, acknowledged) become ``suppressed``.
2. **Send** (no transaction open): rows grouped by channel and group key (firing/repeat), one
   message per resolved alert, one per test; sent concurrently per group.
3. **Record** (one transaction): delivered; or retried with exponential backoff and full jitter
   (AWS Architecture Blog, "Exponential Backoff And Jitter"), never sooner than ``Retry-After``;
   or failed (permanent error, or the deadline passed); 404/410 marks the channel broken.

A worker that dies mid-send leaves leased rows that another tick retries when the lease ends
(at-least-once; the ``Idempotency-Key`` header lets receivers drop the duplicate).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import exists, or_, select, update
from sqlalchemy.orm import Session, aliased, sessionmaker

from app.alerts.models import AlertInstance
from app.db import session_scope, utcnow
from app.notify.ack_links import AckSigner
from app.notify.channels.base import ChannelConfig, ChannelKind, Outcome
from app.notify.channels.registry import get_kind
from app.notify.models import NotifyChannel, NotifyDelivery
from app.notify.notices import group_of
from app.notify.secrets import SecretBox, SecretUnreadable, install_log_redaction, redact
from app.notify.sender import SendResult, send_group

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerOptions:
    """Timeouts and retry policy (from the ``notify_*`` settings)."""

    timeout_s: float = 10.0
    deadline_s: float = 3600.0
    backoff_base_s: float = 1.0
    backoff_cap_s: float = 300.0
    allow_hosts: tuple[str, ...] = ()
    external_url: str = "http://127.0.0.1:8000"
    batch_limit: int = 500
    max_parallel: int = 8

    @property
    def lease_s(self) -> float:
        """How long a claim holds rows: room for a few timed-out requests."""
        return max(60.0, self.timeout_s * 6)


@dataclass
class Batch:
    """Rows sent as one message (copied out of the claim transaction)."""

    channel_id: int
    group_key: str
    row_ids: list[int]
    payloads: list[dict[str, Any]]
    is_test: bool


@dataclass
class TickReport:
    """What one tick did (row counts)."""

    claimed: int = 0
    delivered: int = 0
    retried: int = 0
    failed: int = 0
    suppressed: int = 0
    messages: int = 0
    errors: list[str] = field(default_factory=list)


def backoff_s(attempts: int, *, base_s: float, cap_s: float, rng: Callable[[], float]) -> float:
    """Full jitter: uniform in [0, min(cap, base · 2^(attempts−1))] seconds."""
    return rng() * min(cap_s, base_s * 2 ** max(0, attempts - 1))


class DeliveryWorker:
    """Sends the outbox. ``kinds`` maps a kind name to its implementation (default: the
    registry); ``rng`` draws the jitter (tests pass a fixed one)."""

    def __init__(
        self,
        factory: sessionmaker[Session],
        *,
        box: SecretBox,
        signer: AckSigner,
        options: WorkerOptions,
        kinds: Callable[[str], ChannelKind] = get_kind,
        rng: Callable[[], float] = random.random,
        client: httpx.Client | None = None,
    ) -> None:
        install_log_redaction()
        self.factory = factory
        self.box = box
        self.signer = signer
        self.options = options
        self.kinds = kinds
        self.rng = rng
        self.client = client or httpx.Client(
            timeout=httpx.Timeout(options.timeout_s), follow_redirects=False, trust_env=False
        )
        self.postgres = factory.kw["bind"].dialect.name == "postgresql"

    def close(self) -> None:
        """Close the HTTP client."""
        self.client.close()

    def claim(self, session: Session, *, now: datetime, report: TickReport) -> list[Batch]:
        """Step 1 (see the module docstring) in ``session``; returns the batches to send."""
        older = aliased(NotifyDelivery)
        blocked = exists().where(
            older.instance_id == NotifyDelivery.instance_id,
            older.channel_id == NotifyDelivery.channel_id,
            older.status == "queued",
            older.id < NotifyDelivery.id,
        )
        stmt = (
            select(NotifyDelivery)
            .where(
                NotifyDelivery.status == "queued",
                NotifyDelivery.not_before <= now,
                or_(NotifyDelivery.leased_until.is_(None), NotifyDelivery.leased_until <= now),
                ~blocked,
            )
            .order_by(NotifyDelivery.id)
            .limit(self.options.batch_limit)
        )
        if self.postgres:
            stmt = stmt.with_for_update(skip_locked=True, of=NotifyDelivery)
        rows = list(session.scalars(stmt))
        report.claimed = len(rows)
        channels = {
            c.id: c
            for c in session.scalars(
                select(NotifyChannel).where(NotifyChannel.id.in_({r.channel_id for r in rows}))
            )
        }
        muted = self._muted(session, rows)
        batches: dict[tuple[int, str], Batch] = {}
        lease = now + timedelta(seconds=self.options.lease_s)
        for row in rows:
            channel = channels[row.channel_id]
            if row.attempts == 0:
                row.deadline_at = row.created_at + timedelta(seconds=self.options.deadline_s)
            if row.id in muted:
                row.status, row.last_error = "suppressed", muted[row.id]
                report.suppressed += 1
                continue
            if not channel.enabled or channel.broken:
                why = "channel disabled" if not channel.enabled else "channel broken"
                row.status = "failed"
                row.last_error = f"{why}: {channel.last_error or 'disabled by a user'}"
                report.failed += 1
                continue
            row.attempts += 1
            row.leased_until = lease
            if row.kind == "test":
                key = f"test:{row.id}"
            elif row.kind == "resolved":
                key = f"resolved:{row.instance_id}"
            else:
                key = f"firing:{row.group_key}"
            batch = batches.setdefault(
                (row.channel_id, key),
                Batch(row.channel_id, row.group_key, [], [], row.kind == "test"),
            )
            batch.row_ids.append(row.id)
            batch.payloads.append(row.payload)
        return list(batches.values())

    def _muted(self, session: Session, rows: list[NotifyDelivery]) -> dict[int, str]:
        ids = {r.instance_id for r in rows if r.kind in ("firing", "repeat") and r.instance_id}
        if not ids:
            return {}
        state = {
            i: (s, a)
            for i, s, a in session.execute(
                select(AlertInstance.id, AlertInstance.silenced, AlertInstance.acked).where(
                    AlertInstance.id.in_(ids)
                )
            )
        }
        muted: dict[int, str] = {}
        for row in rows:
            silenced, acked = state.get(row.instance_id or 0, (False, False))
            if row.kind in ("firing", "repeat") and silenced:
                muted[row.id] = "silenced before it was sent"
            elif row.kind == "repeat" and acked:
                muted[row.id] = "acknowledged before it was sent"
        return muted

    def _config(self, channel: NotifyChannel) -> ChannelConfig:
        url = self.box.decrypt(channel.url_encrypted)
        secret = self.box.decrypt(channel.secret_encrypted) if channel.secret_encrypted else None
        return ChannelConfig(url=url, secret=secret, options=dict(channel.options or {}))

    def send(self, batch: Batch, channel: NotifyChannel, *, now: datetime) -> SendResult:
        """Step 2 for one batch (no database)."""
        try:
            config = self._config(channel)
            kind = self.kinds(channel.kind)
        except SecretUnreadable as exc:
            return SendResult(Outcome(ok=False, detail=str(exc), broken=True), None, 0.0)
        except (KeyError, ValueError) as exc:
            return SendResult(Outcome(ok=False, detail=str(exc), broken=True), None, 0.0)
        group = group_of(
            batch.payloads,
            group_key=batch.group_key,
            receiver=channel.name,
            external_url=self.options.external_url,
            signer=self.signer,
            is_test=batch.is_test,
            sent_at=now,
        )
        return send_group(
            self.client,
            kind,
            group,
            config,
            row_ids=batch.row_ids,
            allow_hosts=self.options.allow_hosts,
        )

    def record(
        self, session: Session, batch: Batch, result: SendResult, *, report: TickReport
    ) -> None:
        """Step 3 for one batch, in ``session``."""
        now = utcnow()
        outcome = result.outcome
        values: dict[str, Any] = {
            "leased_until": None,
            "last_status_code": result.status_code,
            "latency_ms": round(result.latency_ms, 1),
        }
        rows = list(
            session.scalars(select(NotifyDelivery).where(NotifyDelivery.id.in_(batch.row_ids)))
        )
        for row in rows:
            row.leased_until = values["leased_until"]
            row.last_status_code = values["last_status_code"]
            row.latency_ms = values["latency_ms"]
            if outcome.ok:
                row.status, row.delivered_at, row.last_error = "delivered", now, None
                report.delivered += 1
                continue
            row.last_error = outcome.detail
            delay = backoff_s(
                row.attempts,
                base_s=self.options.backoff_base_s,
                cap_s=self.options.backoff_cap_s,
                rng=self.rng,
            )
            if outcome.retry_after_s is not None:
                delay = max(delay, outcome.retry_after_s)
            retry_at = now + timedelta(seconds=delay)
            if outcome.retryable and retry_at <= row.deadline_at:
                row.not_before = retry_at
                report.retried += 1
            else:
                row.status = "failed"
                if outcome.retryable:
                    row.last_error = f"gave up at the deadline after {row.attempts} attempts: "
                    row.last_error += outcome.detail
                report.failed += 1
        if outcome.broken:
            session.execute(
                update(NotifyChannel)
                .where(NotifyChannel.id == batch.channel_id)
                .values(broken=True, last_error=outcome.detail, updated_at=now)
            )
        if not outcome.ok:
            log.warning(
                "notification to channel %d failed (attempt %d): %s",
                batch.channel_id,
                max((r.attempts for r in rows), default=0),
                redact(outcome.detail),
            )

    def run_once(self, *, now: datetime | None = None) -> TickReport:
        """One tick: claim, send, record. Returns what it did."""
        report = TickReport()
        now = now or utcnow()
        with session_scope(self.factory) as session:
            batches = self.claim(session, now=now, report=report)
            ids = {b.channel_id for b in batches}
            channels = {
                c.id: c
                for c in session.scalars(select(NotifyChannel).where(NotifyChannel.id.in_(ids)))
            }
        if not batches:
            return report
        report.messages = len(batches)
        workers = min(self.options.max_parallel, len(batches))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="notify-send") as pool:
            results = list(
                pool.map(lambda b: self.send(b, channels[b.channel_id], now=now), batches)
            )
        with session_scope(self.factory) as session:
            for batch, result in zip(batches, results, strict=True):
                self.record(session, batch, result, report=report)
        return report
