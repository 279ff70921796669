"""Alert events become delivery rows (the outbox), in the transaction that wrote the events.

Rules, after Alertmanager's: a ``→ firing`` event is queued for every matching route unless the
instance is silenced, after the route's ``group_wait_s`` (joining a group already waiting, so
alerts of one group that fire together go out in one message); a ``firing → resolved`` event is
queued at once, per alert, to every channel that was told it fired; pending and inactive
transitions send nothing. :func:`enqueue_repeats` re-queues alerts still firing, neither
silenced nor acknowledged, every ``repeat_interval_s``; to an Alertmanager channel every firing
alert not silenced is re-posted at least every third of its ``resolve_timeout_s``, so it never
shows resolved there while it fires.

Each row carries its alert's incident (:func:`app.incidents.service.incidents_of_alerts`: the
node's incident around the firing; a resolve or repeat keeps the incident of the alert's
firing row), so a channel that edits messages tells one incident in one message
(:mod:`app.notify.incident_messages`) and the others group by it (PagerDuty's ``dedup_key``,
the ``incident`` label).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select, text, update
from sqlalchemy.orm import Session

from app import wakeups
from app.alerts.models import AlertEvent, AlertInstance, AlertRule
from app.db import utcnow
from app.incidents import service as incidents_service
from app.notify.channels.alertmanager import repost_interval_s
from app.notify.models import NotifyChannel, NotifyDelivery, NotifyRoute

DEFAULT_GROUP_BY = ("alertname", "cluster")
DEFAULT_GROUP_WAIT_S = 5.0
#: Group wait of a route that carries only critical alerts, unless it names one.
CRITICAL_GROUP_WAIT_S = 0.0
DEFAULT_REPEAT_INTERVAL_S = 4 * 3600.0
#: Retries stop this long after a row was queued (the ``notify_deadline_s`` setting).
DEADLINE_S = 3600.0
#: Advisory lock key of the repeat scan ("fleetwatch repeats"), arbitrary but fixed.
REPEAT_LOCK_KEY = 0x466C5752_45504541


def alert_team(labels: Mapping[str, Any]) -> str | None:
    """The team an alert belongs to: its rule's ``owner_team``, else the node's ``team`` label."""
    return str(labels.get("owner_team") or labels.get("team") or "") or None


def route_matches(route: NotifyRoute, *, labels: Mapping[str, Any], severity: str) -> bool:
    """Whether ``route`` takes an alert with these labels and severity."""
    if route.team is not None and route.team != alert_team(labels):
        return False
    return not route.severities or severity in route.severities


def group_labels(route: NotifyRoute, labels: Mapping[str, Any]) -> dict[str, str]:
    """The ``group_by`` labels' values (missing labels are empty, as in Alertmanager)."""
    return {name: str(labels.get(name, "")) for name in route.group_by}


def group_key(route: NotifyRoute, labels: Mapping[str, Any]) -> str:
    """Alertmanager-style group key: ``<route id>:{name="value",…}``."""
    inner = ",".join(f'{k}="{v}"' for k, v in group_labels(route, labels).items())
    return f"{route.id}:{{{inner}}}"


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None


def payload_of(
    event: AlertEvent | None,
    inst: AlertInstance,
    rule: AlertRule,
    *,
    status: str,
    route: NotifyRoute,
    incident_id: int | None = None,
) -> dict[str, Any]:
    """The notice to send, frozen at queue time (JSON): what :func:`app.notify.notices` turns
    into an :class:`~app.notify.channels.base.AlertNotice`; ``incident_id`` its incident."""
    labels = dict(event.labels if event is not None else inst.labels)
    spec = rule.spec or {}
    return {
        "alert_id": inst.id,
        "fingerprint": inst.fingerprint,
        "rule_name": rule.name,
        "status": status,
        "severity": event.severity if event is not None else rule.severity,
        "team": alert_team(labels),
        "labels": {k: str(v) for k, v in labels.items()},
        "summary": event.summary if event is not None else inst.summary,
        "description": inst.description,
        "value": event.value if event is not None else inst.value,
        "starts_at": _iso(inst.fired_at or (event.at if event is not None else None)),
        "ends_at": _iso(event.at) if status == "resolved" and event is not None else None,
        "runbook_url": spec.get("runbook_url"),
        "runbook": spec.get("runbook"),
        "group_labels": group_labels(route, labels),
        "incident_id": incident_id,
    }


def active_routes(session: Session) -> list[tuple[NotifyRoute, NotifyChannel]]:
    """Routes whose channel is enabled and not broken, oldest first."""
    stmt = (
        select(NotifyRoute, NotifyChannel)
        .join(NotifyChannel, NotifyChannel.id == NotifyRoute.channel_id)
        .where(NotifyChannel.enabled, NotifyChannel.broken.is_(False))
        .order_by(NotifyRoute.id)
    )
    return [(r, c) for r, c in session.execute(stmt)]


def _group_not_before(
    session: Session, *, channel_id: int, key: str, now: datetime, wait_s: float
) -> datetime:
    """Join a group that is still waiting (not yet sent), else wait ``wait_s`` from now."""
    waiting = session.scalar(
        select(func.min(NotifyDelivery.not_before)).where(
            NotifyDelivery.channel_id == channel_id,
            NotifyDelivery.group_key == key,
            NotifyDelivery.status == "queued",
            NotifyDelivery.kind == "firing",
            NotifyDelivery.attempts == 0,
            NotifyDelivery.not_before > now,
        )
    )
    return waiting if waiting is not None else now + timedelta(seconds=wait_s)


def _told_firing(session: Session, *, instance_id: int, channel_id: int) -> tuple[bool, int | None]:
    """Whether the channel's latest (not suppressed) row for the alert says it fires, and the
    incident that row belongs to (its resolve goes to the same incident message)."""
    latest = session.execute(
        select(NotifyDelivery.kind, NotifyDelivery.incident_id)
        .where(
            NotifyDelivery.instance_id == instance_id,
            NotifyDelivery.channel_id == channel_id,
            NotifyDelivery.status != "suppressed",
        )
        .order_by(NotifyDelivery.id.desc())
        .limit(1)
    ).first()
    if latest is None:
        return False, None
    return latest.kind in ("firing", "repeat"), latest.incident_id


def _incidents(session: Session, events: list[tuple[AlertEvent, str]], at: datetime) -> Any:
    """(hostname, test) → the incident id of the firing events' nodes at ``at``
    (:func:`app.incidents.service.incidents_of_alerts`): one statement for all of them."""
    keys = {
        (str(e.labels["hostname"]), str(e.labels.get("test")) == "true")
        for e, status in events
        if status == "firing" and (e.labels or {}).get("hostname")
    }
    return incidents_service.incidents_of_alerts(session, keys=keys, at=at)


def enqueue_events(
    session: Session, *, rule_id: int, at: datetime, deadline_s: float = DEADLINE_S
) -> int:
    """Turn the rule's events written at ``at`` and not yet seen by the notifier
    (``notified_at`` null) into delivery rows, and mark them seen (one ``UPDATE``). Flushes;
    the caller's transaction commits events and rows together. A rule firing on thousands of
    entities costs a few statements, not one per event. Returns the rows queued."""
    session.flush()
    unseen = (
        AlertEvent.rule_id == rule_id,
        AlertEvent.at == at,
        AlertEvent.notified_at.is_(None),
    )
    routes = active_routes(session)
    events = list(session.scalars(select(AlertEvent).where(*unseen).order_by(AlertEvent.id)))
    rule = session.get(AlertRule, rule_id)
    now = utcnow()
    session.execute(
        update(AlertEvent).where(*unseen).values(notified_at=now),
        execution_options={"synchronize_session": False},
    )
    wanted = [(e, s) for e in events if (s := _status_of(e)) and not (s == "firing" and e.silenced)]
    if not routes or not wanted or rule is None:
        return 0
    instances = {
        i.id: i
        for i in session.scalars(
            select(AlertInstance).where(AlertInstance.id.in_({e.instance_id for e, _ in wanted}))
        )
    }
    waits: dict[tuple[int, str], datetime] = {}
    incidents = _incidents(session, wanted, at)
    queued = 0
    for event, status in wanted:
        inst = instances.get(event.instance_id)
        if inst is None:
            continue
        labels = event.labels or {}
        incident_id = incidents.get(
            (str(labels.get("hostname")), str(labels.get("test")) == "true")
        )
        for route, channel in routes:
            if not route_matches(route, labels=event.labels, severity=event.severity):
                continue
            if status == "resolved":
                told, incident_id = _told_firing(
                    session, instance_id=inst.id, channel_id=channel.id
                )
                if not told:
                    continue
            key = group_key(route, event.labels)
            if status == "resolved":
                not_before = now
            else:
                if (channel.id, key) not in waits:
                    waits[(channel.id, key)] = _group_not_before(
                        session, channel_id=channel.id, key=key, now=now, wait_s=route.group_wait_s
                    )
                not_before = waits[(channel.id, key)]
            session.add(
                NotifyDelivery(
                    channel_id=channel.id,
                    route_id=route.id,
                    group_key=key,
                    instance_id=inst.id,
                    event_id=event.id,
                    kind=status,
                    status="queued",
                    payload=payload_of(
                        event, inst, rule, status=status, route=route, incident_id=incident_id
                    ),
                    attempts=0,
                    not_before=not_before,
                    deadline_at=now + timedelta(seconds=deadline_s),
                    created_at=now,
                    incident_id=incident_id,
                )
            )
            queued += 1
    session.flush()
    if queued:
        wakeups.signal_on_commit(session, wakeups.OUTBOX_CHANNEL)  # the worker, at commit
    return queued


def _status_of(event: AlertEvent) -> str | None:
    if event.to_state == "firing":
        return "firing"
    if event.to_state == "resolved" and event.from_state == "firing":
        return "resolved"
    return None


def enqueue_repeats(
    session: Session, *, now: datetime | None = None, deadline_s: float = DEADLINE_S
) -> int:
    """Queue a ``repeat`` row for each firing alert, neither silenced nor acknowledged, whose
    last firing/repeat row on a route is ``repeat_interval_s`` old at ``now`` and has nothing
    queued; for an Alertmanager channel, acknowledged alerts too, and after at most a third of
    its resolve timeout. The rows are due at once. On Postgres the scan holds a
    transaction-level advisory lock, so processes scanning at the same moment cannot both queue
    a repeat. Returns the rows queued."""
    now = now or utcnow()
    if session.get_bind().dialect.name == "postgresql":
        # Every server process scans; one at a time, so two never queue the same repeat.
        session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": REPEAT_LOCK_KEY})
    last = (
        select(
            NotifyDelivery.instance_id,
            NotifyDelivery.channel_id,
            NotifyDelivery.route_id,
            func.max(NotifyDelivery.created_at).label("last_at"),
        )
        .where(NotifyDelivery.kind.in_(("firing", "repeat")), NotifyDelivery.route_id.is_not(None))
        .group_by(NotifyDelivery.instance_id, NotifyDelivery.channel_id, NotifyDelivery.route_id)
        .subquery()
    )
    rows = session.execute(
        select(AlertInstance, AlertRule, NotifyRoute, NotifyChannel, last.c.last_at)
        .join(last, last.c.instance_id == AlertInstance.id)
        .join(NotifyRoute, NotifyRoute.id == last.c.route_id)
        .join(NotifyChannel, NotifyChannel.id == NotifyRoute.channel_id)
        .join(AlertRule, AlertRule.id == AlertInstance.rule_id)
        .where(
            AlertInstance.state == "firing",
            AlertInstance.silenced.is_(False),
            NotifyChannel.enabled,
            NotifyChannel.broken.is_(False),
        )
    ).all()
    queued, queued_at = 0, utcnow()
    for inst, rule, route, channel, last_at in rows:
        interval = route.repeat_interval_s
        if channel.kind == "alertmanager":
            interval = min(interval, repost_interval_s(channel.options or {}))
        elif inst.acked:
            continue
        if last_at + timedelta(seconds=interval) > now:
            continue
        if _has_queued(session, instance_id=inst.id, channel_id=route.channel_id):
            continue
        _, incident_id = _told_firing(session, instance_id=inst.id, channel_id=route.channel_id)
        session.add(
            _repeat_row(
                route, inst, rule, at=queued_at, deadline_s=deadline_s, incident_id=incident_id
            )
        )
        queued += 1
    session.flush()
    return queued + _enqueue_unheard(session, deadline_s=deadline_s)


def _enqueue_unheard(session: Session, *, deadline_s: float) -> int:
    """Alertmanager channels: queue a ``repeat`` row for each firing alert, not silenced, that a
    route to one takes but never posted (the route or channel is newer than the alert): an
    Alertmanager knows only what it is posted. Returns the rows queued."""
    routes = [(r, c) for r, c in active_routes(session) if c.kind == "alertmanager"]
    if not routes:
        return 0
    told = {
        (instance_id, route_id)
        for instance_id, route_id in session.execute(
            select(NotifyDelivery.instance_id, NotifyDelivery.route_id).where(
                NotifyDelivery.kind.in_(("firing", "repeat")),
                NotifyDelivery.route_id.in_([r.id for r, _ in routes]),
            )
        )
    }
    firing = session.execute(
        select(AlertInstance, AlertRule)
        .join(AlertRule, AlertRule.id == AlertInstance.rule_id)
        .where(AlertInstance.state == "firing", AlertInstance.silenced.is_(False))
    ).all()
    queued, queued_at = 0, utcnow()
    for route, _channel in routes:
        for inst, rule in firing:
            if (inst.id, route.id) in told:
                continue
            if not route_matches(route, labels=inst.labels or {}, severity=rule.severity):
                continue
            if _has_queued(session, instance_id=inst.id, channel_id=route.channel_id):
                continue
            session.add(_repeat_row(route, inst, rule, at=queued_at, deadline_s=deadline_s))
            session.flush()  # the next route's _has_queued sees it
            queued += 1
    return queued


def _repeat_row(
    route: NotifyRoute,
    inst: AlertInstance,
    rule: AlertRule,
    *,
    at: datetime,
    deadline_s: float,
    incident_id: int | None = None,
) -> NotifyDelivery:
    """A queued ``repeat`` row of the firing ``inst`` on ``route``, due at ``at``, of
    ``incident_id`` (the incident its first page belonged to)."""
    return NotifyDelivery(
        channel_id=route.channel_id,
        route_id=route.id,
        group_key=group_key(route, inst.labels),
        instance_id=inst.id,
        kind="repeat",
        status="queued",
        payload=payload_of(None, inst, rule, status="firing", route=route, incident_id=incident_id),
        attempts=0,
        not_before=at,
        deadline_at=at + timedelta(seconds=deadline_s),
        created_at=at,
        incident_id=incident_id,
    )


def _has_queued(session: Session, *, instance_id: int, channel_id: int) -> bool:
    return (
        session.scalar(
            select(NotifyDelivery.id)
            .where(
                NotifyDelivery.instance_id == instance_id,
                NotifyDelivery.channel_id == channel_id,
                NotifyDelivery.status == "queued",
            )
            .limit(1)
        )
        is not None
    )
