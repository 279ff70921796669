"""One chat message per incident, updated in place, on the channels that can edit a message
(:class:`~app.notify.channels.base.EditingKind`: Slack's Web API, Discord webhooks).

Delivery rows carry their alert's incident (``notify_delivery.incident_id``, set when queued by
:mod:`app.notify.outbox`). On an editing channel the worker claims every due row of one
incident as one batch (:func:`prepare` reads, in the claim's transaction, what the message must
show: the incident, every alert of it told to the channel in its latest state, and the lines of
what changed); :func:`send` (no transaction) posts the message when the channel has none for
the incident yet, else edits it (and, on Slack, replies in its thread with the changes);
:func:`remember` stores the posted message's reference (``notify_incident_message``).

An edit that the service refuses because the message is gone or can no longer be edited
(Slack ``message_not_found`` / ``edit_window_closed``, Discord 10008 Unknown Message), or
refuses for good for any other reason than a broken channel, is posted as a new message, whose
reference replaces the old one: a change is never lost. A retryable failure retries the edit.

:func:`enqueue_changes` (the notification job, every few seconds) queues an ``incident`` row for
each message whose incident closed (its quiet period passed), or whose GPUs, Xids, state or
job-fatal flag changed without a new alert, so the message says it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from app.incidents import service as incidents_service
from app.notify.channels import common
from app.notify.channels.base import (
    ChannelConfig,
    EditingKind,
    IncidentCard,
    NoticeGroup,
    Outcome,
)
from app.notify.models import NotifyChannel, NotifyDelivery, NotifyIncidentMessage
from app.notify.notices import notice_of
from app.notify.sender import Pacing, PartResult, SendResult, send_one

log = logging.getLogger(__name__)

CLOSED = "closed"
CHANGED = "changed"


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


def digest(row: incidents_service.IncidentRow) -> str:
    """What a message tells of its incident beyond its alerts: ``gpus=1,3 xids=79,154
    state=unhealthy fatal=1`` (compared to find changes)."""
    i = row.incident
    gpus = ",".join(str(g) for g in i.gpu_indexes)
    xids = ",".join(str(x) for x in i.xids)
    return f"gpus={gpus} xids={xids} state={i.state} fatal={int(bool(i.job_fatal))}"[:512]


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
                NotifyDelivery.status == "delivered",
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
        if batch.ref is not None:
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


def enqueue_changes(session: Session, *, now: datetime, quiet_s: float, deadline_s: float) -> int:
    """Queue an ``incident`` row for each message (of an enabled, working channel) whose
    incident closed, or changed beyond its alerts, since it was last told; returns how many.
    A message whose incident was pruned is left alone from then on."""
    messages = list(
        session.scalars(
            select(NotifyIncidentMessage)
            .join(NotifyChannel, NotifyChannel.id == NotifyIncidentMessage.channel_id)
            .where(
                NotifyIncidentMessage.closed_told_at.is_(None),
                NotifyChannel.enabled,
                NotifyChannel.broken.is_(False),
            )
        )
    )
    if not messages:
        return 0
    rows = incidents_service.incidents_by_id(
        session, ids={m.incident_id for m in messages}, quiet_s=quiet_s, now=now
    )
    queued = 0
    for message in messages:
        row = rows.get(message.incident_id)
        if row is None:
            message.closed_told_at = now
            continue
        if row.open and digest(row) == message.seen:
            continue
        waiting = session.scalar(
            select(NotifyDelivery.id)
            .where(
                NotifyDelivery.incident_id == message.incident_id,
                NotifyDelivery.channel_id == message.channel_id,
                NotifyDelivery.kind == "incident",
                NotifyDelivery.status == "queued",
            )
            .limit(1)
        )
        if waiting is not None:
            continue
        status = CHANGED if row.open else CLOSED
        session.add(
            NotifyDelivery(
                channel_id=message.channel_id,
                route_id=None,
                group_key=f"incident:{message.incident_id}",
                instance_id=None,
                event_id=None,
                kind="incident",
                status="queued",
                payload={"incident_id": message.incident_id, "status": status},
                attempts=0,
                not_before=now,
                deadline_at=now + timedelta(seconds=deadline_s),
                created_at=now,
                incident_id=message.incident_id,
            )
        )
        message.seen = digest(row)
        if not row.open:
            message.closed_told_at = now
        queued += 1
    session.flush()
    return queued


def with_firing_counts(
    session: Session, *, channel_id: int, row_ids: list[int], payloads: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """``payloads`` (rows ``row_ids``, being sent to a channel that cannot edit) with
    ``incident_firing`` on each of an incident: how many other alerts of it the channel was
    last told fire (delivered rows, and these), so PagerDuty resolves the incident's alert
    only with its last alert. One statement; payloads of no incident are returned as given."""
    incidents = {p["incident_id"] for p in payloads if isinstance(p.get("incident_id"), int)}
    if not incidents:
        return payloads
    latest: dict[int, dict[int, bool]] = {i: {} for i in incidents}
    for incident_id, instance_id, payload in session.execute(
        select(NotifyDelivery.incident_id, NotifyDelivery.instance_id, NotifyDelivery.payload)
        .where(
            NotifyDelivery.incident_id.in_(sorted(incidents)),
            NotifyDelivery.channel_id == channel_id,
            NotifyDelivery.instance_id.is_not(None),
            or_(NotifyDelivery.status == "delivered", NotifyDelivery.id.in_(row_ids)),
        )
        .order_by(NotifyDelivery.id)
    ):
        latest[incident_id][instance_id] = payload.get("status") == "firing"
    out = []
    for payload in payloads:
        incident_id = payload.get("incident_id")
        if not isinstance(incident_id, int):
            out.append(payload)
            continue
        others = sum(
            firing
            for instance_id, firing in latest[incident_id].items()
            if instance_id != payload.get("alert_id")
        )
        out.append({**payload, "incident_firing": others})
    return out


def busy(session: Session, *, rows: list[NotifyDelivery], now: datetime) -> set[tuple[int, int]]:
    """(channel id, incident id) of ``rows`` whose incident has rows leased by another worker
    now (being sent): left for a later tick, so two workers never post one incident's message
    twice. One statement; none for rows of no incident."""
    pairs: set[tuple[int, int]] = set()
    for row in rows:
        if row.incident_id is not None:
            pairs.add((row.channel_id, row.incident_id))
    if not pairs:
        return set()
    found = session.execute(
        select(NotifyDelivery.channel_id, NotifyDelivery.incident_id)
        .where(
            NotifyDelivery.incident_id.in_(sorted({i for _, i in pairs})),
            NotifyDelivery.status == "queued",
            NotifyDelivery.leased_until > now,
        )
        .distinct()
    )
    return {(c, i) for c, i in found if i is not None and (c, i) in pairs}
