"""The rows of incident messages, queried and queued (:mod:`app.notify.incident_messages` builds
and sends the messages): what a message last told of its incident (:func:`digest`); the
``incident`` rows queued when an incident closes or grows without a new alert
(:func:`enqueue_changes`, run with the repeat scan); the incidents another worker is sending
(:func:`busy`); the alerts of an incident still firing on a channel that cannot edit
(:func:`with_firing_counts`, for PagerDuty's resolve); the incident of a first page queued
before that incident opened (:func:`attach_late`)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from app.incidents import service as incidents_service
from app.notify.models import NotifyChannel, NotifyDelivery, NotifyIncidentMessage

CLOSED = "closed"
CHANGED = "changed"


def digest(row: incidents_service.IncidentRow) -> str:
    """What a message tells of its incident beyond its alerts: ``gpus=1,3 xids=79,154
    state=unhealthy fatal=1`` (compared to find changes)."""
    i = row.incident
    gpus = ",".join(str(g) for g in i.gpu_indexes)
    xids = ",".join(str(x) for x in i.xids)
    return f"gpus={gpus} xids={xids} state={i.state} fatal={int(bool(i.job_fatal))}"[:512]


def enqueue_changes(session: Session, *, now: datetime, quiet_s: float, deadline_s: float) -> int:
    """Queue an ``incident`` row for each message (of an enabled, working channel) whose
    incident closed, or changed beyond its alerts, since it was last told (delivered), unless
    one is queued already; returns how many.
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
        # One at a time; after a failure, the next try waits out a deadline's length, so a
        # refusal for good (a 400) is retried hourly rather than at every scan.
        waiting = session.scalar(
            select(NotifyDelivery.id)
            .where(
                NotifyDelivery.incident_id == message.incident_id,
                NotifyDelivery.channel_id == message.channel_id,
                NotifyDelivery.kind == "incident",
                or_(
                    NotifyDelivery.status == "queued",
                    (NotifyDelivery.status == "failed")
                    & (NotifyDelivery.created_at > now - timedelta(seconds=deadline_s)),
                ),
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
        # ``seen`` and ``closed_told_at`` are set when the row is delivered
        # (incident_messages.remember): a row that fails (the service down past its
        # deadline) is queued again by a later scan, so a close is never lost.
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


def attach_late(session: Session, rows: list[NotifyDelivery]) -> int:
    """Give each claimed first page (``firing``, never sent) of no incident the incident its
    node has now for the moment it was queued, as :mod:`app.notify.outbox` would have: an
    alert can fire before the event of the same fault opens the incident (the kernel-log
    line in a later batch), and would otherwise page apart from the incident's message.
    One statement per queueing moment. Returns how many rows joined an incident."""
    late: dict[datetime, list[NotifyDelivery]] = {}
    for row in rows:
        first_page = row.kind == "firing" and row.attempts == 0 and row.message_id is None
        if first_page and row.incident_id is None and row.instance_id is not None:
            late.setdefault(row.created_at, []).append(row)
    joined = 0
    for at, some in late.items():
        keys = {key for key in map(_key, some) if key is not None}
        found = incidents_service.incidents_of_alerts(session, keys=keys, at=at)
        for row in some:
            key = _key(row)
            incident_id = found.get(key) if key is not None else None
            if incident_id is not None:
                row.incident_id = incident_id
                row.payload = {**row.payload, "incident_id": incident_id}
                joined += 1
    return joined


def _key(row: NotifyDelivery) -> tuple[str, bool] | None:
    """(hostname, test) of a row's alert labels, None without a hostname."""
    labels = (row.payload or {}).get("labels") or {}
    hostname = labels.get("hostname")
    return (str(hostname), str(labels.get("test")) == "true") if hostname else None
