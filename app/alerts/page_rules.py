"""``/rules``: the rule list (kind, team, severity, enabled, firing/pending counts), the YAML
editor with field-named errors and a "preview" of the entities a rule matches now, enable,
disable and delete with confirmation. Every change is a POST answered by a redirect."""

from __future__ import annotations

from typing import Annotated

import yaml
from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.access.middleware import require_team
from app.alerts import inhibition, store
from app.alerts.models import AlertInstance
from app.alerts.page_forms import RuleForm, parse_rule
from app.alerts.rule_reach import Kept, check_enabling
from app.db import SessionDep, WriteSessionDep
from app.errors import Conflict
from app.forms import Form, read_form
from app.health.rules import rules_from_settings
from app.viewer_time import tz_query
from app.web import render

router = APIRouter(include_in_schema=False)

NEW_RULE = """\
name: gpu-temperature-high
severity: warning
owner_team: gpu-ops
summary: "{hostname} GPU {gpu_index} at {value} °C"
description: ""
runbook: null
runbook_url: null
for: 5m
keep_firing_for: 0s
no_data: ok
scope:
  labels: {}
  nodes: []
  gpu_models: []
condition:
  kind: threshold
  target: gpu
  metric: temp_c
  aggregation: avg
  window: 2m
  op: ">"
  threshold: 85
"""


def _back(request: Request, path: str) -> RedirectResponse:
    tz = tz_query(request)
    return RedirectResponse(f"{path}{'?' + tz if tz else ''}", status_code=303)


@router.get("/rules", response_class=HTMLResponse)
def rules_page(request: Request, session: SessionDep) -> HTMLResponse:
    """Every rule with its firing and pending alert counts, then the inhibition rules."""
    counts: dict[tuple[int, str], int] = {
        (rule_id, state): n
        for rule_id, state, n in session.execute(
            select(AlertInstance.rule_id, AlertInstance.state, func.count())
            .where(AlertInstance.state.in_(("firing", "pending")))
            .group_by(AlertInstance.rule_id, AlertInstance.state)
        )
    }
    return render(
        request,
        "rules/page.html",
        {
            "nav": "alerts",
            "rules": store.list_rules(session),
            "counts": counts,
            "inhibit_rules": inhibition.list_rules(session),
        },
    )


def _editor(
    request: Request,
    form: RuleForm,
    *,
    original: str | None,
    preview: list[dict[str, object]] | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    return render(
        request,
        "rules/form.html",
        {"nav": "alerts", "form": form, "original": original, "preview": preview},
        status_code,
    )


@router.get("/rules/new", response_class=HTMLResponse)
def new_rule(request: Request, session: SessionDep) -> HTMLResponse:
    """The editor with an example rule."""
    return _editor(request, RuleForm(NEW_RULE), original=None)


@router.get("/rules/{name}/edit", response_class=HTMLResponse)
def edit_rule(request: Request, session: SessionDep, name: str) -> HTMLResponse:
    """The editor with rule ``name`` as YAML (404 if unknown)."""
    doc = store.spec_of(store.get_rule(session, name=name)).document()
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    return _editor(request, RuleForm(text), original=name)


def _submit(request: Request, session: Session, form: Form, original: str | None) -> Response:
    typed = parse_rule((form.get("document") or [""])[0], Kept.of(request.app.state.settings))
    if original is not None:
        store.get_rule(session, name=original)  # 404 before anything else
    if typed.spec is None:
        return _editor(request, typed, original=original, status_code=422)
    require_team(request, typed.spec.owner_team)
    try:
        if original is None:
            store.create_rule(session, spec=typed.spec)
        else:
            store.update_rule(session, name=original, spec=typed.spec, source="api")
    except Conflict as exc:
        typed.errors.append(("name", exc.detail))
        return _editor(request, typed, original=original, status_code=409)
    return _back(request, "/rules")


@router.post("/rules/_preview", response_class=HTMLResponse)
def preview_rule(
    request: Request, session: SessionDep, form: Annotated[Form, Depends(read_form)]
) -> HTMLResponse:
    """The editor again with what the typed rule matches now and the state each entity would
    be in (``store.preview``, read-only: nothing is stored); ``original`` is the rule being
    edited, if any."""
    typed = parse_rule((form.get("document") or [""])[0], Kept.of(request.app.state.settings))
    original = form.one("original") or None
    if typed.spec is None:
        return _editor(request, typed, original=original, status_code=422)
    rows = store.preview(
        session, spec=typed.spec, health_rules=rules_from_settings(request.app.state.settings)
    )
    return _editor(request, typed, original=original, preview=rows)


@router.post("/rules", response_model=None)
def create_rule(
    request: Request, session: WriteSessionDep, form: Annotated[Form, Depends(read_form)]
) -> Response:
    """Create a rule; the editor again with 422 (errors naming the field) or 409 (name taken)."""
    return _submit(request, session, form, None)


@router.post("/rules/{name}", response_model=None)
def update_rule(
    request: Request,
    session: WriteSessionDep,
    name: str,
    form: Annotated[Form, Depends(read_form)],
) -> Response:
    """Replace rule ``name`` (404 if unknown); errors as for :func:`create_rule`."""
    return _submit(request, session, form, name)


@router.post("/rules/{name}/enable", response_model=None)
def enable_rule(request: Request, session: WriteSessionDep, name: str) -> Response:
    """Enable rule ``name`` (409 while it reads further back than the server keeps)."""
    check_enabling(session, name=name, kept=Kept.of(request.app.state.settings))
    store.set_enabled(session, name=name, enabled=True)
    return _back(request, "/rules")


@router.post("/rules/{name}/disable", response_model=None)
def disable_rule(request: Request, session: WriteSessionDep, name: str) -> Response:
    """Disable rule ``name`` (its pending and firing alerts end now)."""
    store.set_enabled(session, name=name, enabled=False)
    return _back(request, "/rules")


@router.get("/rules/{name}/delete", response_class=HTMLResponse)
def confirm_delete(request: Request, session: SessionDep, name: str) -> HTMLResponse:
    """Ask before deleting rule ``name`` (404 if unknown)."""
    rule = store.get_rule(session, name=name)
    active = session.scalar(
        select(func.count()).where(
            AlertInstance.rule_id == rule.id, AlertInstance.state.in_(("firing", "pending"))
        )
    )
    return render(request, "rules/delete.html", {"nav": "alerts", "rule": rule, "active": active})


@router.post("/rules/{name}/delete", response_model=None)
def delete_rule(request: Request, session: WriteSessionDep, name: str) -> Response:
    """Delete rule ``name`` with its alerts and their history."""
    store.delete_rule(session, name=name)
    return _back(request, "/rules")
