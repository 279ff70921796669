"""The delivery worker: claim due outbox rows, send them grouped, record each outcome.

A tick (every ``notify_worker_interval_s``, :mod:`app.notify.jobs`):

1. **Claim** (one short transaction): queued rows whose ``not_before`` has come, not leased by
   another worker, and with no older queued row of the same alert and channel (per-alert
   order). On Postgres ``SELECT … FOR UPDATE OF notify_delivery SKIP LOCKED``, so several
   processes share the work without taking a row twice; SQLite's single writer serializes it.
   Claimed rows get a lease (``leased_until``) and ``attempts + 1``; firing/repeat rows whose
   alert is now silenced or inhibited (or, for repeats, acknowledged) become ``suppressed``.
   A row sent before belongs to a message (``message_id``): it is claimed only with every
   other waiting row of that message, and never regrouped.
2. **Send** (no transaction open): new rows grouped by channel and group key (firing/repeat),
   one message per resolved alert, one per test; a retried message is rebuilt from all its
   rows, and only its parts not yet accepted are sent (:mod:`app.notify.sender`), paced per
   destination (:mod:`app.notify.pacing`); messages are sent concurrently.
3. **Record** (one transaction, :mod:`app.notify.recording`): per part, delivered, retried
   with backoff (never sooner than ``Retry-After`` or the destination's hold), or failed
   (permanent error, or the deadline passed); 404/410 marks the channel broken.

A worker that dies mid-send leaves leased rows that another tick retries when the lease ends
(at-least-once; the ``Idempotency-Key`` header lets receivers drop the duplicate).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import httpx
from sqlalchemy import exists, or_, select, update
from sqlalchemy.orm import Session, aliased, sessionmaker

from app.alerts import inhibition
from app.alerts.models import AlertInstance
from app.db import session_scope, utcnow
from app.notify import incident_messages, incident_rows
from app.notify.ack_links import AckSigner
from app.notify.batches import Batch
from app.notify.channels.base import ChannelConfig, ChannelKind, EditingKind, Outcome
from app.notify.channels.registry import get_kind
from app.notify.models import NotifyChannel, NotifyDelivery
from app.notify.notices import group_of
from app.notify.pacing import Pacer, pace_for
from app.notify.recording import (
    RetryPolicy,
    TickReport,
    backoff_s,
    count_outcomes,
    record_rows,
)
from app.notify.secrets import SecretBox, SecretUnreadable, install_log_redaction, redact
from app.notify.sender import Pacing, SendResult, send_group
from app.workloads import service as workloads

__all__ = ["Batch", "DeliveryWorker", "TickReport", "WorkerOptions", "backoff_s"]

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
    #: ``notify_rate_limits``: kind → pace (``"5/2s"``, ``"off"``), over the kinds' defaults.
    rate_limits: tuple[tuple[str, str], ...] = ()
    #: Longest sleep for a destination's next slot; a later slot puts the rows back.
    max_pace_wait_s: float = 10.0
    #: The last attempt is made this long before the deadline, not one backoff early.
    last_try_margin_s: float = 1.0
    #: Where the jobs on nodes are captured (Slurm or Kubernetes managed): a first firing page
    #: about a node whose incident opened this recently waits for the capture, to name the
    #: jobs hit; 0: never waits.
    hold_for_jobs_s: float = 0.0
    #: ``incident_quiet_s``: when an incident closes (its message then says so).
    incident_quiet_s: float = 180.0

    @property
    def lease_s(self) -> float:
        """How long a claim holds rows: room for a few timed-out requests."""
        return max(60.0, self.timeout_s * 6)


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
        self.pacer = Pacer(factory)
        self.policy = RetryPolicy(
            base_s=options.backoff_base_s,
            cap_s=options.backoff_cap_s,
            last_try_margin_s=options.last_try_margin_s,
            rng=rng,
        )

    def close(self) -> None:
        """Close the HTTP client."""
        self.client.close()

    def claim(self, session: Session, *, now: datetime, report: TickReport) -> list[Batch]:
        """Step 1 (see the module docstring) in ``session``; returns the messages to send."""
        older = aliased(NotifyDelivery)
        blocked = exists().where(
            older.instance_id == NotifyDelivery.instance_id,
            older.channel_id == NotifyDelivery.channel_id,
            older.status == "queued",
            older.id < NotifyDelivery.id,
            or_(
                NotifyDelivery.message_id.is_(None),
                older.message_id.is_(None),
                older.message_id != NotifyDelivery.message_id,
            ),
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
        messages = self._messages(session, rows)
        rows = [r for r in rows if r.message_id is None or r.message_id in messages]
        incident_rows.attach_late(session, rows)
        held = self._held(session, rows, now)
        busy = incident_rows.busy(session, rows=rows, now=now)
        rows = [r for r in rows if r.id not in held and (r.channel_id, r.incident_id) not in busy]
        report.claimed = len(rows)
        channels = {
            c.id: c
            for c in session.scalars(
                select(NotifyChannel).where(NotifyChannel.id.in_({r.channel_id for r in rows}))
            )
        }
        reposted = {c.id for c in channels.values() if c.kind == "alertmanager"}
        editing = {c.id for c in channels.values() if self._edits(c.kind)}
        # A message sent before keeps its parts: muting applies before the first send only.
        muted = self._muted(session, [r for r in rows if r.message_id is None], reposted)
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
            if row.message_id is not None:
                batch = messages[row.message_id]
                batch.claimed.add(row.id)
                batches.setdefault((row.channel_id, f"message:{row.message_id}"), batch)
                continue
            if row.incident_id is not None and row.channel_id in editing:
                # One message per incident: every due row of it, whatever its kind, never
                # grouped with another incident's (message_id stays unset: a retry is
                # claimed with the incident's other due rows).
                batch = batches.setdefault(
                    (row.channel_id, f"incident:{row.incident_id}"),
                    Batch(
                        row.channel_id,
                        row.group_key,
                        [],
                        [],
                        False,
                        incident_id=row.incident_id,
                    ),
                )
                batch.row_ids.append(row.id)
                batch.payloads.append(row.payload)
                batch.kinds.append(row.kind)
                batch.claimed.add(row.id)
                continue
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
            batch.claimed.add(row.id)
            row.message_id = batch.row_ids[0]
        found = list(batches.values())
        self._name_jobs(session, found)
        report.suppressed += incident_messages.prepare_batches(
            session, found, quiet_s=self.options.incident_quiet_s, now=now
        )
        return [b for b in found if b.row_ids]

    def _edits(self, kind_name: str) -> bool:
        try:
            return isinstance(self.kinds(kind_name), EditingKind)
        except (KeyError, ValueError):
            return False

    def _held(self, session: Session, rows: list[NotifyDelivery], now: datetime) -> set[int]:
        """First firing rows, never sent, about a node whose incident's jobs are being
        captured (:data:`WorkerOptions.hold_for_jobs_s`): left queued for a later tick."""
        first = {
            r.id: r.payload.get("labels", {}).get("hostname")
            for r in rows
            if r.kind == "firing" and r.attempts == 0 and r.message_id is None
        }
        hosts = {h for h in first.values() if isinstance(h, str)}
        waiting = workloads.awaiting_capture(
            session, hosts, now=now, within_s=self.options.hold_for_jobs_s
        )
        return {row_id for row_id, host in first.items() if host in waiting}

    def _name_jobs(self, session: Session, batches: list[Batch]) -> None:
        """Give each firing notice about a node the jobs its incident hit (``jobs_hit``, see
        :func:`app.workloads.service.jobs_hit_lines`), read now: a repeat names jobs captured
        after the first page. The stored payloads are not changed."""
        known: dict[tuple[str, str], list[str] | None] = {}
        for batch in batches:
            for i, payload in enumerate(batch.payloads):
                host = (payload.get("labels") or {}).get("hostname")
                starts = payload.get("starts_at")
                if payload.get("status") != "firing" or not host or not starts:
                    continue
                key = (host, starts)
                if key not in known:
                    try:
                        at = datetime.fromisoformat(starts)
                    except ValueError:
                        known[key] = None
                    else:
                        known[key] = workloads.jobs_hit_lines(session, hostname=host, at=at)
                if known[key] is not None:
                    batch.payloads[i] = {**payload, "jobs_hit": known[key]}

    def _messages(self, session: Session, rows: list[NotifyDelivery]) -> dict[int, Batch]:
        """The messages of ``rows`` sent before, each rebuilt from all its rows; a message
        with a waiting row not among ``rows`` (leased elsewhere, not due, past the batch
        limit) is left for a later tick, whole."""
        ids = {r.message_id for r in rows if r.message_id is not None}
        if not ids:
            return {}
        claimed = {r.id for r in rows}
        members = session.scalars(
            select(NotifyDelivery)
            .where(NotifyDelivery.message_id.in_(ids))
            .order_by(NotifyDelivery.id)
        )
        found: dict[int, Batch] = {}
        partial: set[int] = set()
        for row in members:
            assert row.message_id is not None
            batch = found.setdefault(
                row.message_id,
                Batch(row.channel_id, row.group_key, [], [], row.kind == "test"),
            )
            if row.status == "queued" and row.id not in claimed:
                partial.add(row.message_id)
            if row.status != "queued":
                batch.done.add(len(batch.row_ids))
            batch.row_ids.append(row.id)
            batch.payloads.append(row.payload)
        return {m: b for m, b in found.items() if m not in partial}

    def _muted(
        self, session: Session, rows: list[NotifyDelivery], keep_acked: set[int]
    ) -> dict[int, str]:
        """Rows not to send (row id → why): silenced and inhibited alerts
        (:mod:`app.alerts.inhibition`), and repeats of acknowledged ones except to the channels
        in ``keep_acked`` (Alertmanager: it would resolve them)."""
        ids = {r.instance_id for r in rows if r.kind in ("firing", "repeat") and r.instance_id}
        if not ids:
            return {}
        state = {
            i: (s, a, labels)
            for i, s, a, labels in session.execute(
                select(
                    AlertInstance.id,
                    AlertInstance.silenced,
                    AlertInstance.acked,
                    AlertInstance.labels,
                ).where(AlertInstance.id.in_(ids))
            )
        }
        inhibited = inhibition.inhibitors(
            session, {i: labels for i, (_, _, labels) in state.items()}
        )
        muted: dict[int, str] = {}
        for row in rows:
            silenced, acked, _ = state.get(row.instance_id or 0, (False, False, {}))
            by = inhibited.get(row.instance_id or 0)
            if row.kind in ("firing", "repeat") and silenced:
                muted[row.id] = "silenced before it was sent"
            elif row.kind in ("firing", "repeat") and by is not None:
                muted[row.id] = by.reason()
            elif row.kind == "repeat" and acked and row.channel_id not in keep_acked:
                muted[row.id] = "acknowledged before it was sent"
        return muted

    def _config(self, channel: NotifyChannel) -> ChannelConfig:
        url = self.box.decrypt(channel.url_encrypted)
        secret = self.box.decrypt(channel.secret_encrypted) if channel.secret_encrypted else None
        return ChannelConfig(url=url, secret=secret, options=dict(channel.options or {}))

    def send(self, batch: Batch, channel: NotifyChannel, *, now: datetime) -> SendResult:
        """Step 2 for one message (no database but the pacer's)."""
        try:
            config = self._config(channel)
            kind = self.kinds(channel.kind)
            pace = pace_for(kind, config.options, dict(self.options.rate_limits))
        except SecretUnreadable as exc:
            return SendResult(Outcome(ok=False, detail=str(exc), broken=True), None, 0.0)
        except (KeyError, ValueError) as exc:
            return SendResult(Outcome(ok=False, detail=str(exc), broken=True), None, 0.0)
        pacing = Pacing(
            self.pacer,
            pace,
            max_wait_s=self.options.max_pace_wait_s,
            budget_s=self.options.lease_s / 2,
        )
        if batch.incident is not None and isinstance(kind, EditingKind):
            group = incident_messages.group_for(
                batch.incident,
                receiver=channel.name,
                external_url=self.options.external_url,
                signer=self.signer,
                now=now,
            )
            return incident_messages.send(
                self.client,
                kind,
                group,
                config,
                batch.incident,
                row_ids=batch.row_ids,
                allow_hosts=self.options.allow_hosts,
                pacing=pacing,
            )
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
            done=batch.done,
            pacing=pacing,
        )

    def record(
        self, session: Session, batch: Batch, result: SendResult, *, report: TickReport
    ) -> None:
        """Step 3 for one message, in ``session``."""
        now = utcnow()
        outcome = result.outcome
        rows = session.scalars(select(NotifyDelivery).where(NotifyDelivery.id.in_(batch.row_ids)))
        by_id = {r.id: r for r in rows}
        record_rows(
            by_id,
            batch.row_ids,
            batch.claimed,
            result,
            now=now,
            policy=self.policy,
            report=report,
        )
        if batch.incident is not None and outcome.ok:
            incident_messages.remember(
                session, channel_id=batch.channel_id, batch=batch.incident, now=now
            )
        broken = [p.outcome for p in result.parts if p.outcome and p.outcome.broken]
        if outcome.broken or broken:
            detail = broken[0].detail if broken else outcome.detail
            session.execute(
                update(NotifyChannel)
                .where(NotifyChannel.id == batch.channel_id)
                .values(broken=True, last_error=detail, updated_at=now)
            )
        if not outcome.ok:
            log.warning(
                "notification to channel %d failed (attempt %d): %s",
                batch.channel_id,
                max((by_id[i].attempts for i in batch.claimed if i in by_id), default=0),
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
        count_outcomes(report)  # decided while claiming: suppressed, failed (channel off)
        if not batches:
            return report
        claimed = replace(report)
        report.messages = len(batches)
        workers = min(self.options.max_parallel, len(batches))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="notify-send") as pool:
            results = list(
                pool.map(lambda b: self.send(b, channels[b.channel_id], now=now), batches)
            )
        with session_scope(self.factory) as session:
            for batch, result in zip(batches, results, strict=True):
                self.record(session, batch, result, report=report)
        count_outcomes(report, since=claimed)
        return report
