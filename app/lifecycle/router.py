"""``/api/v1/nodes/{hostname}/lifecycle``: a node's lifecycle state, history and actions, and
the transitions that quarantine it and return it to service; ``/api/v1/lifecycle``: the nodes
out of service."""

from __future__ import annotations

from fastapi import APIRouter, Request
from sqlalchemy.orm import Session

from app import wakeups
from app.api_params import IdPath
from app.db import SessionDep, WriteSessionDep
from app.fleet import service as fleet_service
from app.fleet.models import Node
from app.lifecycle import service
from app.lifecycle.schemas import (
    ActionOut,
    AutomationOut,
    BreakerOut,
    BreakerResetIn,
    DecisionOut,
    LifecycleIn,
    LifecycleOut,
    OutOfServiceOut,
    RetryIn,
    TransitionMadeOut,
    TransitionOut,
)
from app.remediation import automation
from app.remediation import service as remediation

router = APIRouter(prefix="/api/v1", tags=["lifecycle"])


def lifecycle_out(session: Session, node: Node, backends: remediation.Backends) -> LifecycleOut:
    """The node's :class:`LifecycleOut`."""
    now = service.current(session, node.id)
    return LifecycleOut(
        hostname=node.hostname,
        state=now.state,
        since=now.since,
        reason=now.reason,
        cause=now.cause,
        cause_ref=now.cause_ref,
        actor=now.actor,
        managed=backends.acted_on,
        transitions=[
            TransitionOut.model_validate(row, from_attributes=True)
            for row in service.history(session, node.id)
        ],
        actions=[
            ActionOut.model_validate(row, from_attributes=True)
            for row in remediation.actions_of(session, node.id)
        ],
    )


@router.get("/lifecycle", response_model=list[OutOfServiceOut])
def list_out_of_service(session: SessionDep) -> list[OutOfServiceOut]:
    """Every node (not retired) out of service now, longest out first, in one statement: a
    node not listed is ``in_service``."""
    return [
        OutOfServiceOut.model_validate(row, from_attributes=True)
        for row in service.out_of_service_nodes(session)
    ]


@router.get("/nodes/{hostname}/lifecycle", response_model=LifecycleOut)
def get_lifecycle(session: SessionDep, request: Request, hostname: str) -> LifecycleOut:
    """The node's lifecycle state (``in_service`` for a node that never left it), its last 50
    transitions and actions. 404 if unknown."""
    node = fleet_service.get_node_by_hostname(session, hostname=hostname)
    return lifecycle_out(session, node, remediation.Backends.of(request.app.state.settings))


@router.post(
    "/nodes/{hostname}/lifecycle",
    response_model=TransitionMadeOut,
    responses={
        404: {"description": "No node has that hostname"},
        409: {"description": "Retired, in that state already, or not a next state of it"},
    },
)
def post_lifecycle(
    session: WriteSessionDep, request: Request, hostname: str, body: LifecycleIn
) -> TransitionMadeOut:
    """Move the node to ``to_state``. Leaving ``in_service`` drains it in every scheduler
    Fleetwatch manages (Slurm: ``scontrol update … State=DRAIN Reason="fleetwatch: <reason>"``),
    entering it resumes it; the actions are logged ``pending`` and run at once after the commit
    (``dry_run``: logged, never run). The answer lists them as logged; ``GET …/lifecycle``
    shows how they ended."""
    node = fleet_service.get_node_by_hostname(session, hostname=hostname)
    changed = service.transition(
        session,
        node=node,
        to_state=body.to_state,
        reason=body.reason,
        cause=body.cause,
        cause_ref=body.cause_ref,
        actor=body.actor,
        backends=remediation.Backends.of(request.app.state.settings),
        dry_run=body.dry_run,
    )
    if any(a.status == remediation.PENDING for a in changed.actions):
        wakeups.signal_on_commit(session, wakeups.ACTIONS_CHANNEL)
    return TransitionMadeOut(
        hostname=node.hostname,
        transition=TransitionOut.model_validate(changed.transition, from_attributes=True),
        actions=[ActionOut.model_validate(a, from_attributes=True) for a in changed.actions],
    )


def automation_out(session: Session, limits: automation.Limits) -> AutomationOut:
    """The breaker and the newest 50 decisions."""
    gate = automation.breaker_state(session)
    return AutomationOut(
        breaker=BreakerOut(
            open=gate.open,
            opened_at=gate.opened_at,
            reason=gate.reason,
            reset_at=gate.reset_at,
            reset_by=gate.reset_by,
            max_nodes=limits.max_nodes,
            max_pct=limits.max_pct,
            window_s=limits.window_s,
            group_label=limits.group_label,
        ),
        decisions=[
            DecisionOut.model_validate(d, from_attributes=True) for d in automation.recent(session)
        ],
    )


@router.get("/automation", response_model=AutomationOut)
def get_automation(session: SessionDep, request: Request) -> AutomationOut:
    """The automatic-quarantine circuit breaker (with its limits) and the newest 50 decisions
    of rules with an ``action``."""
    return automation_out(session, automation.Limits.of(request.app.state.settings))


@router.post("/automation/breaker/reset", response_model=AutomationOut)
def reset_breaker(
    session: WriteSessionDep, request: Request, body: BreakerResetIn
) -> AutomationOut:
    """Close the circuit breaker: automatic quarantines go on (a person decided the burst had
    a cause now dealt with)."""
    automation.reset_breaker(session, actor=body.actor)
    return automation_out(session, automation.Limits.of(request.app.state.settings))


@router.post(
    "/actions/{action_id}/retry",
    response_model=ActionOut,
    responses={404: {"description": "No such action"}, 409: {"description": "Not retriable"}},
)
def retry_action(
    session: WriteSessionDep, request: Request, action_id: IdPath, body: RetryIn
) -> ActionOut:
    """Log a failed scheduler action again (a new pending action, its command built with the
    current settings); it runs at once after the commit. 409 if it did not fail, a newer action
    of its node and system came since, or its system is not managed now."""
    action = remediation.retry(
        session,
        action_id=action_id,
        actor=body.actor,
        backends=remediation.Backends.of(request.app.state.settings),
    )
    wakeups.signal_on_commit(session, wakeups.ACTIONS_CHANNEL)
    return ActionOut.model_validate(action, from_attributes=True)
