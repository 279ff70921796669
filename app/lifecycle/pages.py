"""The node page's lifecycle panel and its form (``POST /nodes/{hostname}/lifecycle``,
answered by a redirect back), and the incident page's recommendation."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse
from sqlalchemy import select
from sqlalchemy.orm import Session

from app import wakeups
from app.db import WriteSessionDep
from app.errors import BadRequest
from app.fleet import service as fleet_service
from app.fleet.models import Node
from app.forms import Form, back_path, read_form
from app.lifecycle import recommend, service, states
from app.maintenance import service as maintenance
from app.remediation import service as remediation
from app.viewer_time import tz_query

router = APIRouter(include_in_schema=False)


#: Transitions and actions listed on the node page.
SHOWN = 10


def panel_context(session: Session, node: Node, backends: remediation.Backends) -> dict[str, Any]:
    """What ``lifecycle/_panel.html`` shows of ``node``."""
    now = service.current(session, node.id)
    return {
        "lifecycle": now,
        "lifecycle_label": states.LABELS[now.state],
        "lifecycle_next": [
            (s, states.LABELS[s]) for s in states.STATES if s in states.NEXT[now.state]
        ],
        "lifecycle_history": service.history(session, node.id, limit=SHOWN),
        "lifecycle_actions": remediation.actions_of(session, node.id, limit=SHOWN),
        "lifecycle_managed": backends.acted_on,
        "maintenance_windows": maintenance.windows_of_node(session, node),
    }


def incident_recommendation(
    session: Session,
    *,
    hostname: str,
    incident_id: int,
    xids: list[int],
    gpus: list[int],
    action_code: str,
    action_text: str,
    test: bool,
) -> dict[str, Any]:
    """The incident page's lifecycle box: the node's state, and the quarantine it recommends
    (``reason`` prefilled) while the node is in service and the repair needs a drain. A
    self-test incident recommends nothing."""
    node = fleet_service.get_node_by_hostname(session, hostname=hostname)
    now = service.current(session, node.id)
    recommended = (
        not test
        and node.retired_at is None
        and now.state == states.IN_SERVICE
        and recommend.recommends_quarantine(action_code)
    )
    return {
        "node_state": now.state,
        "node_state_label": states.LABELS[now.state],
        "node_state_since": now.since,
        "recommended": recommended,
        "reason": recommend.incident_reason(incident_id, xids, gpus, action_text),
    }


def alert_recommendation(
    session: Session,
    *,
    alert_id: int,
    rule: str,
    spec: dict[str, Any],
    labels: dict[str, Any],
    state: str,
    summary: str,
) -> dict[str, Any] | None:
    """The alert page's quarantine offer: for a firing alert of a rule with ``action:
    quarantine`` whose node is in service (``recommend`` mode is accepted here in one click;
    the other modes show what automation decided). ``None``: nothing to offer."""
    hostname = labels.get("hostname")
    if spec.get("action") != "quarantine" or not isinstance(hostname, str):
        return None
    node = session.scalars(select(Node).where(Node.hostname == hostname)).one_or_none()
    if node is None or node.retired_at is not None:
        return None
    now = service.current(session, node.id)
    return {
        "hostname": hostname,
        "mode": spec.get("action_mode", "recommend"),
        "node_state": now.state,
        "node_state_label": states.LABELS[now.state],
        "offer": state == "firing"
        and now.state == states.IN_SERVICE
        and labels.get("test") != "true",
        "reason": f"alert {alert_id} ({rule}) firing: {summary}",
        "alert_id": alert_id,
    }


def _back(request: Request, hostname: str, back: str) -> RedirectResponse:
    tz = tz_query(request)
    node_page = f"/nodes/{quote(hostname, safe='')}{'?' + tz if tz else ''}#lifecycle"
    return RedirectResponse(back_path(back, node_page), status_code=303)


@router.post("/nodes/{hostname}/lifecycle")
def move_node(
    request: Request,
    session: WriteSessionDep,
    hostname: str,
    form: Annotated[Form, Depends(read_form)],
) -> RedirectResponse:
    """Move the node to the form's ``to_state`` with its ``reason`` (``cause`` / ``cause_ref``
    where an incident's recommendation sent them); 400 naming the field, 409 off the
    lifecycle, 404 for an unknown node."""
    node = fleet_service.get_node_by_hostname(session, hostname=hostname)
    cause = form.one("cause") or "person"
    if cause not in ("person", "incident", "alert"):
        raise BadRequest(f"cause: expected person, incident or alert, got {cause[:40]!r}")
    if len(form.one("cause_ref")) > service.MAX_CAUSE_REF:
        raise BadRequest(f"cause_ref: at most {service.MAX_CAUSE_REF} characters")
    try:
        changed = service.transition(
            session,
            node=node,
            to_state=form.one("to_state"),
            reason=form.one("reason"),
            cause=cause,
            cause_ref=form.one("cause_ref") or None,
            actor=form.one("actor") or "web",
            backends=remediation.Backends.of(request.app.state.settings),
            dry_run=form.one("dry_run") == "on",
        )
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    if any(a.status == remediation.PENDING for a in changed.actions):
        wakeups.signal_on_commit(session, wakeups.ACTIONS_CHANNEL)
    return _back(request, hostname, form.one("back"))
