"""JSON API of alerting: ``/api/v1/rules`` (CRUD, enable/disable, preview), ``/api/v1/alerts``
(list, detail, ack), ``/api/v1/silences`` (create, list, expire) and
``/api/v1/inhibit-rules`` (list, get, put, delete)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from sqlalchemy.orm import Session

from app.access.middleware import acting_name, note_audit, require_team
from app.alerts import inhibition, rule_reach, silence_teams, store
from app.alerts import service as alert_service
from app.alerts.inhibit_spec import InhibitRuleSpec
from app.alerts.models import AlertInhibitRule, AlertInstance, AlertRule, AlertSilence
from app.alerts.schemas import (
    AckIn,
    AckOut,
    AlertDetailOut,
    AlertEventOut,
    AlertOut,
    InhibitRuleOut,
    PreviewEntity,
    RuleOut,
    SilenceIn,
    SilenceOut,
)
from app.alerts.spec import RuleSpec
from app.api_params import IdPath
from app.db import SessionDep, WriteSessionDep, utcnow
from app.errors import NotFound
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


def alert_out(
    inst: AlertInstance, rule: AlertRule, inhibitor: inhibition.Inhibitor | None = None
) -> AlertOut:
    """An instance as the API shows it (``inhibitor``: what inhibits it now, if anything)."""
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
        inhibited_by=[] if inhibitor is None else [inhibitor.source_id],
    )


def _inhibitors(session: Session, instances: list[AlertInstance]) -> dict[int, Any]:
    """What inhibits each firing instance of ``instances`` now."""
    firing = {i.id: i.labels for i in instances if i.state == "firing"}
    return inhibition.inhibitors(session, firing)


@router.get("/rules", response_model=list[RuleOut], summary="Alert rules")
def list_rules(session: SessionDep) -> list[RuleOut]:
    """Every rule, by name."""
    return [rule_out(r) for r in store.list_rules(session)]


def _within_kept(request: Request, spec: RuleSpec) -> None:
    """422 naming each field of ``spec`` that reads further back than the server keeps
    (:mod:`app.alerts.rule_reach`)."""
    far = rule_reach.beyond(spec, rule_reach.Kept.of(request.app.state.settings))
    if far:
        raise RequestValidationError(
            [
                {"type": "value_error", "loc": ("body", *loc), "msg": message, "input": None}
                for loc, message in far
            ]
        )


@router.post("/rules", response_model=RuleOut, status_code=201, summary="Create a rule")
def create_rule(request: Request, session: WriteSessionDep, spec: RuleSpec) -> RuleOut:
    """Create a rule (409 if the name is taken; 422 names the wrong field, or a window longer
    than the server keeps what it reads)."""
    require_team(request, spec.owner_team)
    _within_kept(request, spec)
    return rule_out(store.create_rule(session, spec=spec))


@router.post("/rules/preview", response_model=list[PreviewEntity], summary="Preview a rule")
def preview_rule(request: Request, session: SessionDep, spec: RuleSpec) -> list[PreviewEntity]:
    """Validate a rule and show which entities it matches now and the state each would be in
    (nothing is stored)."""
    _within_kept(request, spec)
    rows = store.preview(
        session, spec=spec, health_rules=rules_from_settings(request.app.state.settings)
    )
    return [PreviewEntity(**row) for row in rows]


@router.get("/rules/{name}", response_model=RuleOut, summary="One rule")
def get_rule(session: SessionDep, name: str) -> RuleOut:
    """One rule (404 if unknown)."""
    return rule_out(store.get_rule(session, name=name))


@router.put("/rules/{name}", response_model=RuleOut, summary="Replace a rule")
def update_rule(request: Request, session: WriteSessionDep, name: str, spec: RuleSpec) -> RuleOut:
    """Replace rule ``name`` (the body may rename it; 422 as for a new rule)."""
    require_team(request, spec.owner_team)
    _within_kept(request, spec)
    return rule_out(store.update_rule(session, name=name, spec=spec, source="api"))


@router.post("/rules/{name}/{action}", response_model=RuleOut, summary="Enable or disable")
def enable_rule(
    request: Request, session: WriteSessionDep, name: str, action: Literal["enable", "disable"]
) -> RuleOut:
    """Enable or disable a rule; disabling ends its pending and firing alerts now. Enabling a
    rule that reads further back than the server keeps is a 409 naming the field."""
    if action == "enable":
        kept = rule_reach.Kept.of(request.app.state.settings)
        rule_reach.check_enabling(session, name=name, kept=kept)
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
    muted = _inhibitors(session, [i for i, _ in rows])
    return [alert_out(i, r, muted.get(i.id)) for i, r in rows]


@router.get("/alerts/{alert_id}", response_model=AlertDetailOut, summary="One alert")
def get_alert(session: SessionDep, alert_id: IdPath) -> AlertDetailOut:
    """An instance with its transitions (oldest first) and acknowledgements."""
    inst, rule = alert_service.get_alert(session, alert_id=alert_id)
    muted = _inhibitors(session, [inst])
    return AlertDetailOut(
        **alert_out(inst, rule, muted.get(inst.id)).model_dump(),
        events=[
            AlertEventOut.model_validate(e)
            for e in alert_service.list_events(session, alert_id=alert_id)
        ],
        acks=[
            AckOut.model_validate(a) for a in alert_service.list_acks(session, alert_id=alert_id)
        ],
    )


@router.post("/alerts/{alert_id}/ack", response_model=AckOut, status_code=201, summary="Ack")
def ack_alert(request: Request, session: WriteSessionDep, alert_id: IdPath, body: AckIn) -> AckOut:
    """Acknowledge a pending or firing alert (owner and note); held until it resolves. A
    logged-in user is recorded as the owner whatever ``owner`` says."""
    owner = acting_name(request, body.owner)
    done = AckOut.model_validate(
        alert_service.ack(session, alert_id=alert_id, owner=owner, note=body.note)
    )
    note_audit(request, after={"owner": done.owner, "note": done.note})
    return done


@router.get("/silences", response_model=list[SilenceOut], summary="Silences")
def list_silences(session: SessionDep, include_expired: bool = False) -> list[SilenceOut]:
    """Silences not yet ended (all with ``include_expired``), newest first."""
    return [
        SilenceOut.model_validate(s)
        for s in alert_service.list_silences(session, include_expired=include_expired)
    ]


@router.post("/silences", response_model=SilenceOut, status_code=201, summary="Create a silence")
def create_silence(request: Request, session: WriteSessionDep, body: SilenceIn) -> SilenceOut:
    """Mute alerts whose labels match every matcher, from ``starts_at`` (default now) to
    ``ends_at``. A logged-in user is recorded as ``created_by`` whatever the body says."""
    matchers = [m.model_dump() for m in body.matchers]
    team = silence_teams.choose_team(request, session, given=body.team, matchers=matchers)
    silence: AlertSilence = alert_service.create_silence(
        session,
        matchers=matchers,
        team=team,
        starts_at=body.starts_at or utcnow(),
        ends_at=body.ends_at,
        created_by=acting_name(request, body.created_by),
        comment=body.comment,
    )
    return SilenceOut.model_validate(silence)


@router.post("/silences/{silence_id}/expire", response_model=SilenceOut, summary="Expire")
def expire_silence(request: Request, session: WriteSessionDep, silence_id: IdPath) -> SilenceOut:
    """End a silence now (the audit row's before/after come from the service)."""
    return SilenceOut.model_validate(alert_service.expire_silence(session, silence_id=silence_id))


def inhibit_rule_out(rule: AlertInhibitRule) -> InhibitRuleOut:
    """A stored inhibition rule as the API shows it."""
    return InhibitRuleOut(
        name=rule.name,
        enabled=rule.enabled,
        source=rule.source,
        created_at=rule.created_at,
        updated_at=rule.updated_at,
        spec=rule.spec,
    )


@router.get("/inhibit-rules", response_model=list[InhibitRuleOut], summary="Inhibition rules")
def list_inhibit_rules(session: SessionDep) -> list[InhibitRuleOut]:
    """Every inhibition rule (Alertmanager ``inhibit_rules``), by name."""
    return [inhibit_rule_out(r) for r in inhibition.list_rules(session)]


@router.get("/inhibit-rules/{name}", response_model=InhibitRuleOut, summary="One inhibition rule")
def get_inhibit_rule(session: SessionDep, name: str) -> InhibitRuleOut:
    """One inhibition rule (404 if unknown)."""
    rule = inhibition.get_rule(session, name)
    if rule is None:
        raise NotFound(f"no inhibition rule named {name!r}")
    return inhibit_rule_out(rule)


@router.put(
    "/inhibit-rules/{name}",
    response_model=InhibitRuleOut,
    summary="Create or replace an inhibition rule",
    responses={201: {"description": "Created"}, 422: {"description": "A field is wrong"}},
)
def put_inhibit_rule(
    session: WriteSessionDep, response: Response, name: str, spec: InhibitRuleSpec
) -> InhibitRuleOut:
    """Create or replace inhibition rule ``name`` (201 when created; the body's ``name`` must
    be ``name``). Matchers in Alertmanager's text form (``alertname="gpu-lost"``) or as
    ``{name, op, value}``."""
    if spec.name != name:
        raise RequestValidationError(
            [
                {
                    "type": "value_error",
                    "loc": ("body", "name"),
                    "msg": f"the body's name {spec.name!r} is not the path's {name!r}",
                    "input": spec.name,
                }
            ]
        )
    rule, outcome = inhibition.put_rule(session, spec=spec, source="api")
    if outcome == "created":
        response.status_code = 201
    return inhibit_rule_out(rule)


@router.delete("/inhibit-rules/{name}", status_code=204, summary="Delete an inhibition rule")
def delete_inhibit_rule(session: WriteSessionDep, name: str) -> Response:
    """Delete inhibition rule ``name`` (404 if unknown); what it held back pages at the next
    repeat scan."""
    if not inhibition.delete_rule(session, name):
        raise NotFound(f"no inhibition rule named {name!r}")
    return Response(status_code=204)
