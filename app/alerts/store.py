"""Rule CRUD, YAML-style bulk apply and the edit preview. Services flush, never commit."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.alerts.context import fingerprint, load_context
from app.alerts.evaluator import condition_of, instance_labels, texts
from app.alerts.inhibition import InhibitApplyReport
from app.alerts.kinds import observe
from app.alerts.lifecycle import InstanceState, Timing, step
from app.alerts.models import AlertEvent, AlertInstance, AlertRule
from app.alerts.spec import RuleSpec
from app.audit import service as audit
from app.db import utcnow
from app.errors import Conflict, NotFound
from app.health.rules import HealthRules


def stored_form(spec: RuleSpec) -> dict[str, Any]:
    """The JSON kept in ``alert_rule.spec`` (aliases, durations in seconds)."""
    return spec.model_dump(mode="json", by_alias=True)


def spec_of(rule: AlertRule) -> RuleSpec:
    """The validated spec of a stored rule."""
    return RuleSpec.model_validate(rule.spec)


def audit_state(rule: AlertRule) -> dict[str, Any]:
    """What the audit trail keeps of a rule before and after a change: its stored spec
    document (name, condition, severity, owner_team, enabled …) and its source."""
    return {"spec": rule.spec, "source": rule.source}


def list_rules(session: Session) -> list[AlertRule]:
    """Every rule, by name."""
    return list(session.scalars(select(AlertRule).order_by(AlertRule.name)))


def get_rule(session: Session, *, name: str) -> AlertRule:
    """The rule called ``name``.

    Raises:
        NotFound: no such rule.
    """
    rule = session.scalars(select(AlertRule).where(AlertRule.name == name)).one_or_none()
    if rule is None:
        raise NotFound(f"no alert rule named {name!r}")
    return rule


def _fill(rule: AlertRule, spec: RuleSpec, source: str, now: datetime) -> None:
    rule.name, rule.kind, rule.severity = spec.name, spec.condition.kind, spec.severity
    rule.owner_team, rule.enabled = spec.owner_team, spec.enabled
    rule.spec, rule.source, rule.updated_at = stored_form(spec), source, now


def create_rule(session: Session, *, spec: RuleSpec, source: str = "api") -> AlertRule:
    """Store a new rule.

    Raises:
        Conflict: a rule with this name exists.
    """
    if session.scalars(select(AlertRule.id).where(AlertRule.name == spec.name)).first():
        raise Conflict(f"an alert rule named {spec.name!r} already exists")
    now = utcnow()
    rule = AlertRule(created_at=now)
    _fill(rule, spec, source, now)
    session.add(rule)
    session.flush()
    audit.note_change("rule", rule.name, before=None, after=audit_state(rule))
    return rule


def update_rule(
    session: Session, *, name: str, spec: RuleSpec, source: str | None = None
) -> AlertRule:
    """Replace rule ``name`` by ``spec`` (which may rename it). Its instances stay: a changed
    condition is judged at the next evaluation.

    Raises:
        NotFound: no rule ``name``. Conflict: the new name is another rule's.
    """
    rule = get_rule(session, name=name)
    if (
        spec.name != name
        and session.scalars(select(AlertRule.id).where(AlertRule.name == spec.name)).first()
    ):
        raise Conflict(f"an alert rule named {spec.name!r} already exists")
    before = audit.snapshot(audit_state(rule))
    _fill(rule, spec, source or rule.source, utcnow())
    session.flush()
    audit.note_change("rule", name, before=before, after=audit_state(rule))
    return rule


def set_enabled(session: Session, *, name: str, enabled: bool) -> AlertRule:
    """Enable or disable rule ``name``. Disabling ends its instances at once, with their
    events: pending ones become ``inactive``, firing ones ``resolved``.

    Raises:
        NotFound: no such rule.
    """
    rule = get_rule(session, name=name)
    before = audit.snapshot(audit_state(rule))
    spec = spec_of(rule).model_copy(update={"enabled": enabled})
    now = utcnow()
    _fill(rule, spec, rule.source, now)
    if not enabled:
        _end_instances(session, rule=rule, severity=spec.severity, now=now)
    session.flush()
    audit.note_change("rule", name, before=before, after=audit_state(rule))
    return rule


def _end_instances(session: Session, *, rule: AlertRule, severity: str, now: datetime) -> None:
    active = session.scalars(
        select(AlertInstance).where(
            AlertInstance.rule_id == rule.id, AlertInstance.state.in_(("pending", "firing"))
        )
    )
    for inst in active:
        to = "resolved" if inst.state == "firing" else "inactive"
        session.add(
            AlertEvent(
                instance_id=inst.id,
                rule_id=rule.id,
                at=now,
                from_state=inst.state,
                to_state=to,
                value=inst.value,
                severity=severity,
                labels=inst.labels,
                summary=inst.summary,
                silenced=inst.silenced,
                acked=inst.acked,
            )
        )
        inst.state, inst.active_since, inst.acked, inst.last_evaluated_at = to, None, False, now
        if to == "resolved":
            inst.resolved_at = now


def delete_rule(session: Session, *, name: str) -> None:
    """Delete rule ``name`` with its instances and events.

    Raises:
        NotFound: no such rule.
    """
    rule = get_rule(session, name=name)
    before = audit.snapshot(audit_state(rule))
    session.delete(rule)
    session.flush()
    audit.note_change("rule", name, before=before, after=None)


@dataclass
class ApplyReport:
    """Rule names ``fleetwatch rules apply`` created, updated and left unchanged; ``inhibit``
    the same for the inhibition rules."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    inhibit: InhibitApplyReport = field(default_factory=InhibitApplyReport)


def apply_specs(session: Session, *, specs: list[tuple[RuleSpec, str]]) -> ApplyReport:
    """Create or update each (spec, source) by name; a rule whose stored document already
    equals the spec is left untouched, wherever it came from (so applying twice changes
    nothing)."""
    report = ApplyReport()
    for spec, source in specs:
        rule = session.scalars(select(AlertRule).where(AlertRule.name == spec.name)).one_or_none()
        if rule is None:
            create_rule(session, spec=spec, source=source)
            report.created.append(spec.name)
        elif rule.spec == stored_form(spec):
            report.unchanged.append(spec.name)
        else:
            update_rule(session, name=spec.name, spec=spec, source=source)
            report.updated.append(spec.name)
    return report


def preview(
    session: Session, *, spec: RuleSpec, health_rules: HealthRules, now: datetime | None = None
) -> list[dict[str, Any]]:
    """Which entities the rule matches now and the state each would be in after an evaluation
    now (from the stored instance of a rule of the same name, when there is one). Writes
    nothing. Entities whose condition is false and that have no active instance are left out."""
    now = now or utcnow()
    ctx = load_context(session, now=now, health_rules=health_rules)
    rule = session.scalars(select(AlertRule).where(AlertRule.name == spec.name)).one_or_none()
    instances: dict[str, AlertInstance] = {}
    if rule is not None:
        instances = {
            i.fingerprint: i
            for i in session.scalars(
                select(AlertInstance).where(
                    AlertInstance.rule_id == rule.id,
                    AlertInstance.state.in_(("pending", "firing")),
                )
            )
        }
    observed = {fingerprint(spec.name, o.identity): o for o in observe(ctx, spec)}
    timing = Timing(spec.for_s, spec.keep_firing_for_s)
    out = []
    for fp in sorted(set(observed) | set(instances)):
        obs, inst = observed.get(fp), instances.get(fp)
        prev = (
            InstanceState(
                inst.state,  # type: ignore[arg-type]
                inst.active_since,
                inst.last_active_at,
                inst.fired_at,
                inst.resolved_at,
            )
            if inst
            else InstanceState()
        )
        new, _ = step(prev, condition=condition_of(spec, obs), timing=timing, now=now)
        labels = instance_labels(spec, obs) if obs else dict(inst.labels if inst else {})
        out.append(
            {
                "fingerprint": fp,
                "entity": obs.entity if obs else labels.get("hostname", ""),
                "labels": labels,
                "value": obs.value if obs else None,
                "condition": None if obs is None else obs.met,
                "state": new.state,
                "summary": texts(spec, obs, labels)[0] if obs else (inst.summary if inst else ""),
            }
        )
    return out


def longest_sample_windows_s(session: Session) -> dict[str, float]:
    """Per rule target (``gpu``, ``disk``, ``mount``, ``nfs``, ``nic``), the longest span of
    its sample rows an enabled rule reads, seconds: threshold and rate windows, and for ``gpu``
    ``after`` of metric absence; targets without such rules are left out.

    The store keeps that much raw (:mod:`app.series.jobs`): rule windows scan raw rows."""
    longest: dict[str, float] = {}

    def reads(target: str, seconds: float) -> None:
        longest[target] = max(longest.get(target, 0.0), seconds)

    for rule in session.scalars(select(AlertRule).where(AlertRule.enabled.is_(True))):
        cond = spec_of(rule).condition
        if cond.kind in ("threshold", "rate") and cond.target:
            reads(cond.target, float(cond.window))
        elif cond.kind == "absence" and cond.target == "metric":
            reads("gpu", float(cond.after or 0.0))
    return longest
