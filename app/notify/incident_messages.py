"""One chat message per incident, updated in place, on the channels that can edit a message
(:class:`~app.notify.channels.base.EditingKind`: Slack's Web API, Discord webhooks).

Delivery rows carry their alert's incident (``notify_delivery.incident_id``, set when queued by
:mod:`app.notify.outbox`). On an editing channel the worker claims every due row of one
incident as one batch (:func:`prepare` reads, in the claim's transaction, what the message must
show: the incident, every alert of it told (or meant to be told: a row that failed) to the
channel in its latest state, and the lines of
what changed); :func:`send` (no transaction) posts the message when the channel has none for
the incident yet, else edits it (and, on Slack, replies in its thread with the changes);
:func:`remember` stores the posted message's reference (``notify_incident_message``).

An edit that the service refuses because the message is gone or can no longer be edited
(Slack ``message_not_found`` / ``edit_window_closed``, Discord 10008 Unknown Message), or
refuses for good for any other reason than a broken channel, is posted as a new message, whose
reference replaces the old one: a change is never lost. A retryable failure retries the edit.
A message in a Slack channel the settings no longer name (``options.channel`` changed) is not
edited: the change is posted to the configured channel.

:func:`app.notify.incident_rows.enqueue_changes` (with the repeat scan, every 15 s) queues an
``incident`` row for each message whose incident closed (its quiet period passed), or whose
GPUs, Xids, state or job-fatal flag changed without a new alert, so the message says it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from app.incidents import service as incidents_service
from app.notify.batches import Batch
from app.notify.channels import common
from app.notify.channels.base import (
    ChannelConfig,
    EditingKind,
    IncidentCard,
    NoticeGroup,
    Outcome,
)
from app.notify.incident_rows import CLOSED, digest, with_firing_counts
from app.notify.models import NotifyDelivery, NotifyIncidentMessage
from app.notify.notices import notice_of
from app.notify.sender import Pacing, PartResult, SendResult, send_one

log = logging.getLogger(__name__)


@dataclass
class IncidentBatch:
    """What one incident's message needs, read while claiming: the incident (``row``), the
    stored message reference (``ref``, None: not posted yet), the payloads of every alert of
    the incident told to the channel (latest per alert, first fired first) and the lines of
    this batch's changes. ``posted`` is set by :func:`send` when it posted a new message."""

    row: incidents_service.IncidentRow
    ref: dict[str, Any] | None
    payloads: list[dict[str, Any]]
    changes: list[str]
    posted: dict[str, str] | None = None


def change_line(payload: dict[str, Any], kind: str, row: incidents_service.IncidentRow) -> str:
    """One line of what a row changes: an alert firing, still firing, resolved; the incident
    closed or grown (new GPUs or Xids)."""
    i = row.incident
    if kind == "incident":
        if payload.get("status") == CLOSED:
            since = common.rfc3339(i.last_event_at)
            return f"{common.RESOLVED_ICON} Incident {i.id} closed: no new fault since {since}"
        gpus = ", ".join(str(g) for g in i.gpu_indexes) or "node-level"
        xids = ", ".join(str(x) for x in i.xids) or "none"
        return f"Incident {i.id} now: {i.state}, GPUs {gpus}, Xids {xids}"
    summary = str(payload.get("summary") or payload.get("rule_name") or "alert")
    if payload.get("status") == "resolved":
        return f"{common.RESOLVED_ICON} Resolved: {summary}"
    if kind == "repeat":
        return f"Still firing: {summary}"
    severity = str(payload.get("severity") or "")
    word = {"critical": "Critical", "warning": "Warning", "info": "Info"}.get(severity, "Alert")
    return f"{word} firing: {summary}"


def prepare(
    session: Session,
    *,
    channel_id: int,
    incident_id: int,
    claimed: list[tuple[int, str, dict[str, Any]]],
    quiet_s: float,
    now: datetime,
) -> IncidentBatch | None:
    """The message's content for rows ``claimed`` (their id, kind and payload) of incident
    ``incident_id`` on channel ``channel_id``; None when the incident no longer exists (pruned
    with its events: the rows are then sent as plain notices)."""
    found = incidents_service.incidents_by_id(
        session, ids={incident_id}, quiet_s=quiet_s, now=now
    ).get(incident_id)
    if found is None:
        return None
    message = session.scalar(
        select(NotifyIncidentMessage).where(
            NotifyIncidentMessage.channel_id == channel_id,
            NotifyIncidentMessage.incident_id == incident_id,
        )
    )
    latest: dict[int, dict[str, Any]] = {}
    for instance_id, payload in session.execute(
        select(NotifyDelivery.instance_id, NotifyDelivery.payload)
        .where(
            NotifyDelivery.incident_id == incident_id,
            NotifyDelivery.channel_id == channel_id,
            NotifyDelivery.instance_id.is_not(None),
            or_(
                # A failed row (its edit refused until the deadline, the channel broken)
                # still names a real alert: the next edit shows it; a suppressed one was
                # silenced and stays out.
                NotifyDelivery.status.in_(("delivered", "failed")),
                NotifyDelivery.id.in_([row_id for row_id, _, _ in claimed]),
            ),
        )
        .order_by(NotifyDelivery.id)
    ):
        latest[instance_id] = payload
    payloads = sorted(latest.values(), key=lambda p: (str(p.get("starts_at")), p["alert_id"]))
    changes = [change_line(payload, kind, found) for _, kind, payload in claimed]
    return IncidentBatch(
        found, dict(message.ref) if message is not None else None, payloads, list(changes)
    )


def group_for(
    batch: IncidentBatch, *, receiver: str, external_url: str, signer: Any, now: datetime
) -> NoticeGroup:
    """The :class:`NoticeGroup` of the incident's message."""
    base = external_url.rstrip("/")
    row = batch.row
    i = row.incident
    card = IncidentCard(
        id=i.id,
        hostname=row.hostname,
        url=f"{base}/incidents/{i.id}",
        opened_at=i.opened_at,
        last_event_at=i.last_event_at,
        closes_at=row.closes_at,
        open=row.open,
        state=i.state,
        job_fatal=bool(i.job_fatal),
        gpu_indexes=tuple(i.gpu_indexes),
        xids=tuple(i.xids),
        action_text=i.action_text,
        test=bool(i.test),
        changes=tuple(batch.changes),
    )
    notices = tuple(notice_of(p, external_url=base, signer=signer) for p in batch.payloads)
    return NoticeGroup(
        group_key=f"incident:{i.id}",
        receiver=receiver,
        notices=notices,
        external_url=base,
        group_labels={"incident": str(i.id), "hostname": row.hostname},
        is_test=bool(i.test),
        sent_at=now,
        incident=card,
    )


def send(
    client: httpx.Client,
    kind: EditingKind,
    group: NoticeGroup,
    config: ChannelConfig,
    batch: IncidentBatch,
    *,
    row_ids: list[int],
    allow_hosts: tuple[str, ...],
    pacing: Pacing | None,
) -> SendResult:
    """Edit the incident's message, or post it (first page, or the edit cannot be made); the
    outcome applies to every row of the batch. Never raises for network trouble."""

    def one(request: Any) -> PartResult:
        return send_one(
            client, kind, request, config, row_ids=row_ids, allow_hosts=allow_hosts, pacing=pacing
        )

    try:
        if batch.ref is not None and kind.message_here(config, batch.ref):
            requests = kind.build_update(group, config, batch.ref)
            edited = one(requests[0])
            outcome = edited.outcome
            if outcome is None or outcome.ok or _retry_edit(kind, edited):
                if outcome is not None and outcome.ok:
                    for extra in requests[1:]:  # the thread reply: the edit already told it
                        reply = one(extra)
                        if reply.outcome is not None and not reply.outcome.ok:
                            log.warning("incident thread reply failed: %s", reply.outcome.detail)
                return _result(edited)
            log.info(
                "incident %d message could not be edited (%s): posting it anew",
                group.incident.id if group.incident else 0,
                outcome.detail,
            )
        posted = one(kind.build_post(group, config))
    except ValueError as exc:
        return SendResult(Outcome(ok=False, detail=f"bad channel settings: {exc}"), None, 0.0)
    if posted.outcome is not None and posted.outcome.ok:
        batch.posted = kind.message_ref(posted.answer)
        if batch.posted is None:
            log.warning("the service's answer to an incident post named no message")
    return _result(posted)


def _retry_edit(kind: EditingKind, edited: PartResult) -> bool:
    """Whether a failed edit is retried as an edit (retryable, or the channel is broken),
    rather than posted anew (the message is gone, or the edit was refused for good)."""
    outcome = edited.outcome
    assert outcome is not None
    if kind.message_gone(edited.status_code or 0, edited.answer):
        return False
    return outcome.retryable or outcome.broken


def _result(part: PartResult) -> SendResult:
    outcome = part.outcome
    if outcome is None:
        outcome = Outcome(ok=False, detail="held back: the destination is rate-limited")
        part = PartResult(part.part, part.parts, part.covers, None, held_until=part.held_until)
    return SendResult(outcome, part.status_code, part.latency_ms, (part,))


def remember(
    session: Session,
    *,
    channel_id: int,
    batch: IncidentBatch,
    now: datetime,
) -> None:
    """After the batch was delivered: store the posted message's reference (replacing one
    that could not be edited), or count the edit; record what of the incident it told."""
    incident_id = batch.row.incident.id
    message = session.scalar(
        select(NotifyIncidentMessage).where(
            NotifyIncidentMessage.channel_id == channel_id,
            NotifyIncidentMessage.incident_id == incident_id,
        )
    )
    seen = digest(batch.row)
    if message is None:
        if batch.posted is None:
            return
        session.add(
            NotifyIncidentMessage(
                channel_id=channel_id,
                incident_id=incident_id,
                ref=batch.posted,
                posted_at=now,
                updated_at=now,
                updates=0,
                seen=seen,
                closed_told_at=now if not batch.row.open else None,
            )
        )
        return
    if batch.posted is not None:
        message.ref, message.posted_at, message.updates = batch.posted, now, 0
    else:
        message.updates += 1
    message.updated_at, message.seen = now, seen
    if not batch.row.open and message.closed_told_at is None:
        message.closed_told_at = now


def prepare_batches(
    session: Session, batches: list[Batch], *, quiet_s: float, now: datetime
) -> int:
    """While claiming: read what each incident batch's message shows (:func:`prepare`), and
    count, for the other batches, the alerts of their incidents still firing
    (:func:`with_firing_counts`). An incident pruned since: its alert rows go out as plain
    notices, its ``incident`` rows (nothing left to tell) are suppressed. Returns how many
    rows were suppressed."""
    suppressed = 0
    for batch in batches:
        if batch.incident_id is None:
            continue
        claimed = list(zip(batch.row_ids, batch.kinds, batch.payloads, strict=True))
        batch.incident = prepare(
            session,
            channel_id=batch.channel_id,
            incident_id=batch.incident_id,
            claimed=claimed,
            quiet_s=quiet_s,
            now=now,
        )
        if batch.incident is not None:
            continue
        batch.incident_id = None
        gone = [i for i, k in enumerate(batch.kinds) if k == "incident"]
        for row in session.scalars(
            select(NotifyDelivery).where(NotifyDelivery.id.in_([batch.row_ids[i] for i in gone]))
        ):
            row.status, row.last_error = "suppressed", "its incident no longer exists"
            batch.claimed.discard(row.id)
            suppressed += 1
        keep = [i for i in range(len(batch.row_ids)) if i not in gone]
        batch.row_ids = [batch.row_ids[i] for i in keep]
        batch.payloads = [batch.payloads[i] for i in keep]
        batch.kinds = [batch.kinds[i] for i in keep]
    for batch in batches:
        if batch.incident is None and not batch.is_test:
            batch.payloads = with_firing_counts(
                session, channel_id=batch.channel_id, row_ids=batch.row_ids, payloads=batch.payloads
            )
    return suppressed
