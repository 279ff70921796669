"""JSON API of alerting: ``/api/v1/rules`` (CRUD, enable/disable, preview), ``/api/v1/alerts``
(list, detail, ack) and ``/api/v1/silences`` (create, list, expire)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response

from app.alerts import service as alert_service
from app.alerts import store
from app.alerts.models import AlertInstance, AlertRule, AlertSilence
from app.alerts.schemas import (
    AckIn,
    AckOut,
    AlertDetailOut,
    AlertEventOut,
    AlertOut,
    PreviewEntity,
    RuleOut,
    SilenceIn,
    SilenceOut,
)
from app.alerts.spec import RuleSpec
from app.api_params import IdPath
from app.db import SessionDep, WriteSessionDep, utcnow
from app.health.rules import rules_from_settings

router = APIRouter(prefix="/api/v1", tags=["alerts"])


def rule_out(rule: AlertRule) -> RuleOut:
    """A stored rule as the API shows it."""
    return RuleOut(
        id=rule.id,
        name=rule.name,
        kind=rule.kind,
        severity=rule.severity,
        owner_team=rule.owner_team,
        enabled=rule.enabled,
        source=rule.source,
        created_at=rule.created_at,
        updated_at=rule.updated_at,
        spec=store.spec_of(rule).document(),
    )


def alert_out(inst: AlertInstance, rule: AlertRule) -> AlertOut:
    """An instance as the API shows it."""
    spec = rule.spec
    return AlertOut(
        id=inst.id,
        rule=rule.name,
        severity=rule.severity,
        owner_team=rule.owner_team,
        fingerprint=inst.fingerprint,
        state=inst.state,
        labels=inst.labels,
        value=inst.value,
        summary=inst.summary,
        description=inst.description,
        runbook_url=spec.get("runbook_url"),
        runbook=spec.get("runbook"),
        active_since=inst.active_since,
        fired_at=inst.fired_at,
        resolved_at=inst.resolved_at,
        last_evaluated_at=inst.last_evaluated_at,
        silenced=inst.silenced,
        acked=inst.acked,
    )


@router.get("/rules", response_model=list[RuleOut], summary="Alert rules")
def list_rules(session: SessionDep) -> list[RuleOut]:
    """Every rule, by name."""
    return [rule_out(r) for r in store.list_rules(session)]


@router.post("/rules", response_model=RuleOut, status_code=201, summary="Create a rule")
def create_rule(session: WriteSessionDep, spec: RuleSpec) -> RuleOut:
    """Create a rule (409 if the name is taken; 422 names the wrong field)."""
    return rule_out(store.create_rule(session, spec=spec))


@router.post("/rules/preview", response_model=list[PreviewEntity], summary="Preview a rule")
def preview_rule(request: Request, session: SessionDep, spec: RuleSpec) -> list[PreviewEntity]:
    """Validate a rule and show which entities it matches now and the state each would be in
    (nothing is stored)."""
    rows = store.preview(
        session, spec=spec, health_rules=rules_from_settings(request.app.state.settings)
    )
    return [PreviewEntity(**row) for row in rows]


@router.get("/rules/{name}", response_model=RuleOut, summary="One rule")
def get_rule(session: SessionDep, name: str) -> RuleOut:
    """One rule (404 if unknown)."""
    return rule_out(store.get_rule(session, name=name))


@router.put("/rules/{name}", response_model=RuleOut, summary="Replace a rule")
def update_rule(session: WriteSessionDep, name: str, spec: RuleSpec) -> RuleOut:
    """Replace rule ``name`` (the body may rename it)."""
    return rule_out(store.update_rule(session, name=name, spec=spec, source="api"))


@router.post("/rules/{name}/{action}", response_model=RuleOut, summary="Enable or disable")
def enable_rule(
    session: WriteSessionDep, name: str, action: Literal["enable", "disable"]
) -> RuleOut:
    """Enable or disable a rule; disabling ends its pending and firing alerts now."""
    return rule_out(store.set_enabled(session, name=name, enabled=action == "enable"))


@router.delete("/rules/{name}", status_code=204, summary="Delete a rule")
def delete_rule(session: WriteSessionDep, name: str) -> Response:
    """Delete a rule with its alerts and their history."""
    store.delete_rule(session, name=name)
    return Response(status_code=204)


@router.get("/alerts", response_model=list[AlertOut], summary="Alerts")
def list_alerts(
    session: SessionDep,
    state: Annotated[
        list[Literal["pending", "firing", "resolved", "inactive"]],
        Query(description="repeatable; default pending and firing"),
    ] = [],  # noqa: B006
    rule: str | None = None,
    severity: Literal["critical", "warning", "info"] | None = None,
    owner_team: str | None = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = 500,
) -> list[AlertOut]:
    """Alert instances, most recently evaluated first."""
    rows = alert_service.list_alerts(
        session,
        states=list(state) or None,
        rule=rule,
        severity=severity,
        owner_team=owner_team,
        limit=limit,
    )
    return [alert_out(i, r) for i, r in rows]


@router.get("/alerts/{alert_id}", response_model=AlertDetailOut, summary="One alert")
def get_alert(session: SessionDep, alert_id: IdPath) -> AlertDetailOut:
    """An instance with its transitions (oldest first) and acknowledgements."""
    inst, rule = alert_service.get_alert(session, alert_id=alert_id)
    return AlertDetailOut(
        **alert_out(inst, rule).model_dump(),
        events=[
            AlertEventOut.model_validate(e)
            for e in alert_service.list_events(session, alert_id=alert_id)
        ],
        acks=[
            AckOut.model_validate(a) for a in alert_service.list_acks(session, alert_id=alert_id)
        ],
    )


@router.post("/alerts/{alert_id}/ack", response_model=AckOut, status_code=201, summary="Ack")
def ack_alert(session: WriteSessionDep, alert_id: IdPath, body: AckIn) -> AckOut:
    """Acknowledge a pending or firing alert (owner and note); held until it resolves."""
    return AckOut.model_validate(
        alert_service.ack(session, alert_id=alert_id, owner=body.owner, note=body.note)
    )


@router.get("/silences", response_model=list[SilenceOut], summary="Silences")
def list_silences(session: SessionDep, include_expired: bool = False) -> list[SilenceOut]:
    """Silences not yet ended (all with ``include_expired``), newest first."""
    return [
        SilenceOut.model_validate(s)
        for s in alert_service.list_silences(session, include_expired=include_expired)
    ]


@router.post("/silences", response_model=SilenceOut, status_code=201, summary="Create a silence")
def create_silence(session: WriteSessionDep, body: SilenceIn) -> SilenceOut:
    """Mute alerts whose labels match every matcher, from ``starts_at`` (default now) to
    ``ends_at``."""
    silence: AlertSilence = alert_service.create_silence(
        session,
        matchers=[m.model_dump() for m in body.matchers],
        starts_at=body.starts_at or utcnow(),
        ends_at=body.ends_at,
        created_by=body.created_by,
        comment=body.comment,
    )
    return SilenceOut.model_validate(silence)


@router.post("/silences/{silence_id}/expire", response_model=SilenceOut, summary="Expire")
def expire_silence(session: WriteSessionDep, silence_id: IdPath) -> SilenceOut:
    """End a silence now."""
    return SilenceOut.model_validate(alert_service.expire_silence(session, silence_id=silence_id))
