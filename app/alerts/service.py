"""Alert instances (list, detail with transitions), acknowledgements and silences."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.alerts.models import AlertAck, AlertEvent, AlertInstance, AlertRule, AlertSilence
from app.alerts.silences import Mutes, active_silences, matches
from app.alerts.spec import SEVERITIES, RuleSpec
from app.audit import service as audit
from app.db import utcnow
from app.errors import BadRequest, NotFound
from app.maintenance import service as maintenance


def list_alerts(
    session: Session,
    *,
    states: list[str] | None = None,
    rule: str | None = None,
    severity: str | None = None,
    owner_team: str | None = None,
    limit: int = 500,
) -> list[tuple[AlertInstance, AlertRule]]:
    """Instances with their rule, newest change first; ``states`` defaults to pending and
    firing."""
    stmt = (
        select(AlertInstance, AlertRule)
        .join(AlertRule, AlertRule.id == AlertInstance.rule_id)
        .where(AlertInstance.state.in_(states or ["pending", "firing"]))
    )
    if rule:
        stmt = stmt.where(AlertRule.name == rule)
    if severity:
        stmt = stmt.where(AlertRule.severity == severity)
    if owner_team:
        stmt = stmt.where(AlertRule.owner_team == owner_team)
    stmt = stmt.order_by(AlertInstance.last_evaluated_at.desc(), AlertInstance.id).limit(limit)
    return [(i, r) for i, r in session.execute(stmt)]


def alerts_of_host(
    session: Session, *, hostname: str, since: datetime, until: datetime, limit: int = 100
) -> list[tuple[AlertInstance, AlertRule, datetime]]:
    """Instances of ``hostname`` (its node or GPUs, label ``hostname``) that turned pending or
    firing between ``since`` and ``until`` (their transitions, so an alert resolved since is
    found too), with the first such time, oldest first: what an incident over that span
    caused."""
    first = func.min(AlertEvent.at).label("first_at")
    started = (
        select(AlertEvent.instance_id, first)
        .where(
            AlertEvent.labels["hostname"].as_string() == hostname,
            AlertEvent.to_state.in_(("pending", "firing")),
            AlertEvent.at >= since,
            AlertEvent.at <= until,
        )
        .group_by(AlertEvent.instance_id)
        .subquery("started")
    )
    stmt = (
        select(AlertInstance, AlertRule, started.c.first_at)
        .join(started, started.c.instance_id == AlertInstance.id)
        .join(AlertRule, AlertRule.id == AlertInstance.rule_id)
        .order_by(started.c.first_at, AlertInstance.id)
        .limit(limit)
    )
    return [(i, r, at) for i, r, at in session.execute(stmt)]


def get_alert(session: Session, *, alert_id: int) -> tuple[AlertInstance, AlertRule]:
    """One instance and its rule.

    Raises:
        NotFound: no such instance.
    """
    row = session.execute(
        select(AlertInstance, AlertRule)
        .join(AlertRule, AlertRule.id == AlertInstance.rule_id)
        .where(AlertInstance.id == alert_id)
    ).first()
    if row is None:
        raise NotFound(f"no alert with id {alert_id}")
    return row[0], row[1]


def list_events(session: Session, *, alert_id: int) -> list[AlertEvent]:
    """The transitions of one instance, oldest first."""
    return list(
        session.scalars(
            select(AlertEvent)
            .where(AlertEvent.instance_id == alert_id)
            .order_by(AlertEvent.at, AlertEvent.id)
        )
    )


def list_acks(session: Session, *, alert_id: int) -> list[AlertAck]:
    """The acknowledgements of one instance, oldest first."""
    return list(
        session.scalars(
            select(AlertAck).where(AlertAck.instance_id == alert_id).order_by(AlertAck.at)
        )
    )


def ack(session: Session, *, alert_id: int, owner: str, note: str) -> AlertAck:
    """Acknowledge a pending or firing instance: it stays acknowledged until it resolves.

    Raises:
        NotFound: no such instance. BadRequest: it is not pending or firing.
    """
    inst, _ = get_alert(session, alert_id=alert_id)
    if inst.state not in ("pending", "firing"):
        raise BadRequest(f"alert {alert_id} is {inst.state}; only pending or firing alerts")
    record = AlertAck(instance_id=inst.id, owner=owner, note=note, at=utcnow())
    inst.acked = True
    session.add(record)
    session.flush()
    return record


def silence_audit_state(silence: AlertSilence) -> dict[str, Any]:
    """What the audit trail keeps of a silence before and after a change."""
    return {
        "matchers": silence.matchers,
        "starts_at": silence.starts_at,
        "ends_at": silence.ends_at,
        "created_by": silence.created_by,
        "comment": silence.comment,
        "team": silence.team,
    }


def get_silence(session: Session, *, silence_id: int) -> AlertSilence:
    """Silence ``silence_id``.

    Raises:
        NotFound: no such silence.
    """
    silence = session.get(AlertSilence, silence_id)
    if silence is None:
        raise NotFound(f"no silence with id {silence_id}")
    return silence


def silence_rules_team(session: Session, *, matchers: list[dict[str, str]]) -> str | None:
    """The team whose alerts a silence mutes when its ``alertname`` matchers select only rules
    of that one team: the rules whose name satisfies every ``alertname`` matcher all have
    ``owner_team`` T → T. ``None`` when there is no ``alertname`` matcher (it may mute any
    rule's alerts), it selects no rule, or the rules are of several teams or of none."""
    by_name = [m for m in matchers if m.get("name") == "alertname"]
    if not by_name:
        return None
    teams = {
        rule.owner_team
        for rule in session.scalars(select(AlertRule))
        if matches(by_name, {"alertname": rule.name})
    }
    if len(teams) != 1:
        return None
    return teams.pop()


def create_silence(
    session: Session,
    *,
    matchers: list[dict[str, str]],
    starts_at: datetime,
    ends_at: datetime,
    created_by: str,
    comment: str,
    team: str | None = None,
) -> AlertSilence:
    """A silence owned by ``team`` (``None``: shared); active instances it matches are marked
    silenced now (the evaluator keeps the mark up to date afterwards).

    Raises:
        BadRequest: ``ends_at`` is not after ``starts_at``.
    """
    if ends_at <= starts_at:
        raise BadRequest("ends_at must be after starts_at")
    silence = AlertSilence(
        matchers=matchers,
        starts_at=starts_at,
        ends_at=ends_at,
        created_by=created_by,
        comment=comment,
        created_at=utcnow(),
        team=team,
    )
    session.add(silence)
    if starts_at <= utcnow():
        for inst in _active(session):
            if matches(matchers, inst.labels):
                inst.silenced = True
    session.flush()
    audit.note_change("silence", silence.id, before=None, after=silence_audit_state(silence))
    return silence


def _active(session: Session) -> list[AlertInstance]:
    return list(
        session.scalars(select(AlertInstance).where(AlertInstance.state.in_(("pending", "firing"))))
    )


def list_silences(session: Session, *, include_expired: bool = False) -> list[AlertSilence]:
    """Silences, newest first (only those not yet ended unless ``include_expired``)."""
    stmt = select(AlertSilence).order_by(AlertSilence.created_at.desc(), AlertSilence.id.desc())
    if not include_expired:
        stmt = stmt.where(AlertSilence.ends_at > utcnow())
    return list(session.scalars(stmt))


def expire_silence(session: Session, *, silence_id: int) -> AlertSilence:
    """End a silence now (``ends_at`` = now); instances it alone muted are unmarked.

    Raises:
        NotFound: no such silence.
    """
    silence = get_silence(session, silence_id=silence_id)
    now = utcnow()
    before = audit.snapshot(silence_audit_state(silence))
    if silence.ends_at > now:
        silence.ends_at = now
    session.flush()
    refresh_silenced(session, now=now)
    audit.note_change("silence", silence.id, before=before, after=silence_audit_state(silence))
    return silence


def refresh_silenced(session: Session, *, now: datetime | None = None) -> None:
    """Mark each active instance silenced or not by the silences and maintenance windows in
    force at ``now`` (the evaluator does so at its next evaluation; this is at once, after a
    silence or window ended or began)."""
    now = now or utcnow()
    mutes = Mutes(
        active_silences(session, now=now),
        frozenset(maintenance.hosts_in_maintenance(session, now=now)),
    )
    for inst in _active(session):
        inst.silenced = mutes.mute(inst.labels or {})
    session.flush()


def silence_matches(session: Session, *, matchers: list[dict[str, Any]]) -> list[int]:
    """Ids of the active instances ``matchers`` would mute (for a silence preview)."""
    return [i.id for i in _active(session) if matches(matchers, i.labels)]


@dataclass(frozen=True)
class ActionFiring:
    """An alert of a rule with an ``action`` that turned firing (:class:`AlertEvent`)."""

    event_id: int
    instance_id: int
    at: datetime
    rule: str
    action: str
    mode: str
    labels: dict[str, Any]
    silenced: bool


def action_firings(session: Session, *, since: datetime, handled: Any) -> list[ActionFiring]:
    """The alerts that turned firing at or after ``since`` whose rule asks for an ``action``,
    oldest first, leaving out the events whose id ``handled`` (a column of event ids, e.g.
    the decisions') holds. Rules whose stored spec no longer validates are left out."""
    actions: dict[int, tuple[str, str, str]] = {}
    for rule in session.scalars(select(AlertRule).where(AlertRule.enabled.is_(True))):
        if not (rule.spec or {}).get("action"):
            continue
        try:
            spec = RuleSpec.model_validate(rule.spec)
        except ValueError:
            continue
        if spec.action is not None:
            actions[rule.id] = (rule.name, spec.action, spec.action_mode)
    if not actions:
        return []
    rows = session.scalars(
        select(AlertEvent)
        .where(
            AlertEvent.rule_id.in_(actions),
            AlertEvent.to_state == "firing",
            AlertEvent.at >= since,
            AlertEvent.id.not_in(select(handled)),
        )
        .order_by(AlertEvent.id)
    )
    return [
        ActionFiring(
            event_id=e.id,
            instance_id=e.instance_id,
            at=e.at,
            rule=actions[e.rule_id][0],
            action=actions[e.rule_id][1],
            mode=actions[e.rule_id][2],
            labels=dict(e.labels or {}),
            silenced=bool(e.silenced),
        )
        for e in rows
    ]


def firing_by_severity(session: Session) -> dict[str, int]:
    """Firing alert instances per rule severity (``critical``, ``warning``, ``info``, every
    one present), silenced, acknowledged and inhibited ones included: one ``GROUP BY``."""
    counts = dict.fromkeys(SEVERITIES, 0)
    stmt = (
        select(AlertRule.severity, func.count())
        .join(AlertInstance, AlertInstance.rule_id == AlertRule.id)
        .where(AlertInstance.state == "firing")
        .group_by(AlertRule.severity)
    )
    for severity, count in session.execute(stmt):
        counts[severity] = counts.get(severity, 0) + count
    return counts
