"""Inhibition (Alertmanager ``inhibit_rules`` semantics): which alerts are muted because another
alert is firing, and the stored inhibition rules.

An alert *T* is inhibited when an enabled rule's ``target_matchers`` match *T*'s labels and an
alert *S* other than *T* is ``firing`` whose labels match the rule's ``source_matchers`` and
carry *T*'s values of every ``equal`` label (a label absent on both is equal). As in
Alertmanager, an alert matching both sides of a rule is not inhibited by an alert that also
matches both sides of it (no two alerts mute each other through one rule); a silenced source
still inhibits; a self-test alert (label ``test`` ``true``) inhibits only self-test alerts.
Inhibition is decided when a notification is about to be sent
(:mod:`app.notify.worker`): an inhibited alert still fires, shows and can be acknowledged, it
only pages nobody.

Unlike Alertmanager, the end of an inhibition does not page the target at once: the target was
part of the fault its source paged for (a lost GPU's Xid 79 stays a critical finding of health
for its event window, 24 h, after the GPU is back), so a second page minutes later for the same
fault is what inhibition exists to prevent. A target still firing is paged at its route's
``repeat_interval_s``, like any unacknowledged alert, and one that fires anew is paged then.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.alerts.inhibit_spec import InhibitRuleSpec
from app.alerts.models import AlertInhibitRule, AlertInstance, AlertRule
from app.alerts.silences import matches
from app.audit import service as audit
from app.db import utcnow

#: How an inhibited delivery's status reason starts (:meth:`Inhibitor.reason`).
REASON_PREFIX = "inhibited by "


@dataclass(frozen=True)
class Inhibitor:
    """Why an alert is inhibited: the firing alert (instance id, its ``alertname``) and the
    rule."""

    source_id: int
    source_alertname: str
    rule: str

    def reason(self) -> str:
        """One line for a delivery's status and the alert page."""
        return f"{REASON_PREFIX}{self.source_alertname} (alert {self.source_id}, rule {self.rule})"


def enabled_specs(session: Session) -> list[InhibitRuleSpec]:
    """The enabled inhibition rules, by name."""
    rows = session.scalars(
        select(AlertInhibitRule)
        .where(AlertInhibitRule.enabled.is_(True))
        .order_by(AlertInhibitRule.name)
    )
    return [InhibitRuleSpec.model_validate(r.spec) for r in rows]


def _matchers(spec_matchers: Iterable[Any]) -> list[dict[str, str]]:
    return [m.model_dump() for m in spec_matchers]


def inhibitors(session: Session, targets: Mapping[int, Mapping[str, Any]]) -> dict[int, Inhibitor]:
    """The inhibited alerts among ``targets`` (instance id → labels), each with what inhibits
    it (the first rule by name, then the lowest source id). Two statements at most: the
    rules, then the firing alerts of the rules a source can be."""
    rules = enabled_specs(session)
    if not rules or not targets:
        return {}
    wanted: dict[int, list[tuple[InhibitRuleSpec, list[dict[str, str]], list[dict[str, str]]]]]
    wanted = {}
    for spec in rules:
        target_m, source_m = _matchers(spec.target_matchers), _matchers(spec.source_matchers)
        for inst_id, labels in targets.items():
            if matches(target_m, _text(labels)):
                wanted.setdefault(inst_id, []).append((spec, source_m, target_m))
    if not wanted:
        return {}
    sources = _firing_sources(session, [m for entries in wanted.values() for _, m, _ in entries])
    found: dict[int, Inhibitor] = {}
    for inst_id, entries in wanted.items():
        labels = _text(targets[inst_id])
        for spec, source_m, target_m in entries:
            both = matches(source_m, labels)
            hit = _first_source(inst_id, labels, spec.equal, source_m, target_m, both, sources)
            if hit is not None:
                found[inst_id] = Inhibitor(hit[0], hit[1].get("alertname", ""), spec.name)
                break
    return found


def _first_source(
    target_id: int,
    labels: Mapping[str, str],
    equal: list[str],
    source_m: list[dict[str, str]],
    target_m: list[dict[str, str]],
    target_is_source: bool,
    sources: list[tuple[int, dict[str, str]]],
) -> tuple[int, dict[str, str]] | None:
    for source_id, source_labels in sources:
        if source_id == target_id or not matches(source_m, source_labels):
            continue
        if source_labels.get("test") == "true" and labels.get("test") != "true":
            continue  # a self-test fault never mutes a real alert
        if any(source_labels.get(k, "") != labels.get(k, "") for k in equal):
            continue
        if target_is_source and matches(target_m, source_labels):
            continue  # Alertmanager: both sides of one rule never mute each other
        return source_id, source_labels
    return None


def _firing_sources(
    session: Session, source_matchers: list[list[dict[str, str]]]
) -> list[tuple[int, dict[str, str]]]:
    """(id, labels) of the firing alerts of every rule whose name some source's ``alertname``
    matchers admit (every rule's when a source names no ``alertname``), by id."""
    names = list(session.execute(select(AlertRule.id, AlertRule.name)))
    rule_ids: set[int] = set()
    for matchers in source_matchers:
        on_name = [m for m in matchers if m["name"] == "alertname"]
        rule_ids.update(rid for rid, name in names if matches(on_name, {"alertname": name}))
    if not rule_ids:
        return []
    rows = session.execute(
        select(AlertInstance.id, AlertInstance.labels)
        .where(AlertInstance.state == "firing", AlertInstance.rule_id.in_(rule_ids))
        .order_by(AlertInstance.id)
    )
    return [(i, _text(labels)) for i, labels in rows]


def _text(labels: Mapping[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in (labels or {}).items()}


# --- the stored rules --------------------------------------------------------------------


@dataclass
class InhibitApplyReport:
    """Inhibition rule names created, updated and left unchanged by an apply."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


def audit_state(rule: AlertInhibitRule) -> dict[str, Any]:
    """What the audit trail keeps of an inhibition rule before and after a change: its stored
    spec document (matchers, ``equal``, ``enabled``) and its source."""
    return {"spec": rule.spec, "source": rule.source}


def list_rules(session: Session) -> list[AlertInhibitRule]:
    """Every inhibition rule, by name."""
    return list(session.scalars(select(AlertInhibitRule).order_by(AlertInhibitRule.name)))


def get_rule(session: Session, name: str) -> AlertInhibitRule | None:
    """The rule named ``name``, or None."""
    return session.scalars(
        select(AlertInhibitRule).where(AlertInhibitRule.name == name)
    ).one_or_none()


def put_rule(
    session: Session, *, spec: InhibitRuleSpec, source: str = "api"
) -> tuple[AlertInhibitRule, str]:
    """Create or replace the rule of ``spec.name``; returns it and ``created``, ``updated`` or
    ``unchanged`` (the stored document equals ``spec``: nothing written)."""
    document = spec.document()
    rule = get_rule(session, spec.name)
    now = utcnow()
    if rule is None:
        rule = AlertInhibitRule(
            name=spec.name,
            enabled=spec.enabled,
            spec=document,
            source=source,
            created_at=now,
            updated_at=now,
        )
        session.add(rule)
        session.flush()
        audit.note_change("inhibit_rule", rule.name, before=None, after=audit_state(rule))
        return rule, "created"
    if rule.spec == document:
        return rule, "unchanged"
    before = audit_state(rule)
    rule.spec, rule.enabled, rule.source, rule.updated_at = document, spec.enabled, source, now
    session.flush()
    audit.note_change("inhibit_rule", rule.name, before=before, after=audit_state(rule))
    return rule, "updated"


def apply_specs(
    session: Session, *, specs: list[tuple[InhibitRuleSpec, str]]
) -> InhibitApplyReport:
    """:func:`put_rule` each (spec, source); applying twice changes nothing."""
    report = InhibitApplyReport()
    for spec, source in specs:
        _, outcome = put_rule(session, spec=spec, source=source)
        getattr(report, outcome).append(spec.name)
    return report


def delete_rule(session: Session, name: str) -> bool:
    """Delete the rule named ``name``; False when there is none."""
    rule = get_rule(session, name)
    if rule is None:
        return False
    before = audit_state(rule)
    session.delete(rule)
    session.flush()
    audit.note_change("inhibit_rule", name, before=before, after=None)
    return True
