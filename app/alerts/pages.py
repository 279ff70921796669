"""Alert pages: ``/alerts`` (active tabs and resolved history, filters in the URL, 5 s htmx
refresh), ``/alerts/{id}`` (labels, texts, transitions, acknowledgements, ack form), the nav
badge and the fleet overview's firing summary. Silences and rules live in
:mod:`app.alerts.page_silences` and :mod:`app.alerts.page_rules`, included here."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import pass_context
from jinja2.runtime import Context
from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from app.access.middleware import acting_name, note_audit
from app.alerts import inhibition, page_rules, page_silences
from app.alerts import service as alert_service
from app.alerts.alert_chart import alert_chart
from app.alerts.models import AlertInstance, AlertRule
from app.alerts.page_views import (
    HISTORY_RANGES,
    SEVERITIES,
    TABS,
    AlertFilters,
    AlertRow,
    entity_of,
    parse_id,
    resolved_history,
    row_of,
    runbook_link,
    with_inhibitors,
)
from app.alerts.schemas import storable_text
from app.db import SessionDep, WriteSessionDep, session_scope, utcnow
from app.errors import BadRequest
from app.forms import Form, read_form
from app.ingest.fields import plain_text
from app.lifecycle import pages as lifecycle_pages
from app.viewer_time import tz_query, viewer_tz
from app.web import is_htmx, render, templates

log = logging.getLogger(__name__)
router = APIRouter(include_in_schema=False)
router.include_router(page_silences.router)
router.include_router(page_rules.router)

SEVERITY_ORDER = {s: i for i, s in enumerate(SEVERITIES)}
STATES_OF_TAB = {"active": ["firing", "pending"], "firing": ["firing"], "pending": ["pending"]}
SUMMARY_TOP = 8
#: The most alerts a node or GPU page lists.
ENTITY_ALERTS_SHOWN = 200


def _filters(
    tab: str | None = None,
    team: str | None = None,
    severity: str | None = None,
    rule: str | None = None,
    q: str | None = None,
    range_: Annotated[str | None, Query(alias="range")] = None,
) -> AlertFilters:
    return AlertFilters.parse(
        {"tab": tab, "team": team, "severity": severity, "rule": rule, "q": q, "range": range_}
    )


FiltersDep = Annotated[AlertFilters, Depends(_filters)]


def _sorted(rows: list[AlertRow]) -> list[AlertRow]:
    """Firing before pending, then by severity, then oldest first."""
    return sorted(
        rows,
        key=lambda r: (
            r.state != "firing",
            SEVERITY_ORDER.get(r.severity, 9),
            r.since.timestamp() if r.since else 0.0,
            r.id,
        ),
    )


def list_context(session: Session, request: Request, f: AlertFilters) -> dict[str, Any]:
    """The context of the list partial: filtered rows and counts per team and severity (of
    the tab before the team/severity/rule/text filters)."""
    now = utcnow()
    if f.tab == "resolved":
        every = resolved_history(session, since=f.history_start(now))
    else:
        pairs = alert_service.list_alerts(session, states=STATES_OF_TAB[f.tab], limit=5000)
        every = with_inhibitors(session, _sorted([row_of(i, r) for i, r in pairs]))
    rows = [r for r in every if f.keep(r)]
    return {
        "filters": f,
        "rows": rows,
        "total": len(every),
        "by_team": sorted(Counter(r.owner_team for r in every).items()),
        "by_severity": [(s, n) for s in SEVERITIES if (n := sum(r.severity == s for r in every))],
        "now": now,
        "tz": tz_query(request),
        "history_ranges": HISTORY_RANGES,
    }


@router.get("/alerts", response_class=HTMLResponse)
def alerts_page(request: Request, session: SessionDep, f: FiltersDep) -> HTMLResponse:
    """Firing/pending/resolved alerts with filters; every choice is in the URL."""
    rules = list(session.scalars(select(AlertRule.name).order_by(AlertRule.name)))
    context = list_context(session, request, f)
    return render(
        request,
        "alerts/page.html",
        {**context, "nav": "alerts", "tabs": TABS, "severities": SEVERITIES, "rule_names": rules},
    )


@router.get("/alerts/_list", response_class=HTMLResponse)
def alerts_list(request: Request, session: SessionDep, f: FiltersDep) -> HTMLResponse:
    """The list and counts alone (htmx refresh); pushes the page URL of these filters."""
    response = render(request, "alerts/_list.html", list_context(session, request, f))
    if is_htmx(request) and request.query_params.get("push"):
        response.headers["HX-Push-Url"] = "/alerts" + f.query(tz_query(request))
    return response


def firing_count(session: Session) -> int:
    """The number of firing alerts (one ``COUNT`` on the indexed state column)."""
    return session.scalar(select(func.count()).where(AlertInstance.state == "firing")) or 0


def nav_counts(session: Session) -> tuple[int, int]:
    """(firing alerts that still page someone: neither silenced, acknowledged nor inhibited;
    the other firing ones) — what the nav badge shows apart. Three statements at most."""
    firing = session.execute(
        select(
            AlertInstance.id, AlertInstance.labels, AlertInstance.silenced, AlertInstance.acked
        ).where(AlertInstance.state == "firing")
    ).all()
    open_ones = {r.id: r.labels or {} for r in firing if not r.silenced and not r.acked}
    muted = inhibition.inhibitors(session, open_ones) if open_ones else {}
    attention = len(open_ones) - len(muted)
    return attention, len(firing) - attention


def _read_factory(context: Context) -> Any:
    request = context.get("request")
    state = getattr(getattr(request, "app", None), "state", None)
    return getattr(state, "read_session_factory", None)


@pass_context
def _nav_firing_count(context: Context) -> tuple[int, int] | None:
    """Template global for the nav badge: :func:`nav_counts` now, or None without a request or
    when the database cannot answer (logged: a badge must never break the page, error pages
    included)."""
    factory = _read_factory(context)
    if factory is None:
        return None
    try:
        with session_scope(factory) as session:
            return nav_counts(session)
    except SQLAlchemyError:
        log.warning("nav badge: could not count firing alerts", exc_info=True)
        return None


@pass_context
def _firing_summary(context: Context) -> dict[str, Any] | None:
    """Template global for the fleet overview's alerts panel (``alerts/_summary.html``):
    :func:`summary_context`, or None without a request."""
    factory = _read_factory(context)
    if factory is None:
        return None
    with session_scope(factory) as session:
        return summary_context(session)


def entity_rows(session: Session, *, hostname: str, gpu_uuid: str | None = None) -> list[AlertRow]:
    """The pending and firing alerts of a node (label ``hostname``: its own, its GPUs', disks'
    and ports') or of one of its GPUs (``gpu_uuid``), firing first, worst and oldest first,
    each with what inhibits it."""
    stmt = (
        select(AlertInstance, AlertRule)
        .join(AlertRule, AlertRule.id == AlertInstance.rule_id)
        .where(
            AlertInstance.state.in_(("pending", "firing")),
            AlertInstance.labels["hostname"].as_string() == hostname,
        )
        .limit(ENTITY_ALERTS_SHOWN)
    )
    if gpu_uuid is not None:
        stmt = stmt.where(AlertInstance.labels["gpu_uuid"].as_string() == gpu_uuid)
    rows = [row_of(i, r) for i, r in session.execute(stmt)]
    return with_inhibitors(session, _sorted(rows))


@pass_context
def _entity_alerts(
    context: Context, hostname: str, gpu_uuid: str | None = None
) -> list[AlertRow] | None:
    """Template global for the node and GPU pages' alert lists: :func:`entity_rows`, or None
    without a request or when the database cannot answer (logged: the list must never break
    the page)."""
    factory = _read_factory(context)
    if factory is None:
        return None
    try:
        with session_scope(factory) as session:
            return entity_rows(session, hostname=hostname, gpu_uuid=gpu_uuid)
    except SQLAlchemyError:
        log.warning("entity alerts: could not read %s's alerts", hostname, exc_info=True)
        return None


templates.env.globals["firing_alert_count"] = _nav_firing_count
templates.env.globals["entity_alerts"] = _entity_alerts
templates.env.globals["firing_alerts_summary"] = _firing_summary


def summary_context(session: Session) -> dict[str, Any]:
    """Firing alerts for a summary: ``total``, ``counts`` [(severity, n)], the first
    :data:`SUMMARY_TOP` ``rows`` (worst and oldest first) and ``now``."""
    pairs = alert_service.list_alerts(session, states=["firing"], limit=5000)
    rows = with_inhibitors(session, _sorted([row_of(i, r) for i, r in pairs]))
    counts = [(s, n) for s in SEVERITIES if (n := sum(r.severity == s for r in rows))]
    return {"rows": rows[:SUMMARY_TOP], "total": len(rows), "counts": counts, "now": utcnow()}


@router.get("/alerts/_summary", response_class=HTMLResponse)
def alerts_summary(request: Request, session: SessionDep) -> HTMLResponse:
    """The fleet overview's panel alone: firing alerts by severity, the top few, a link."""
    return render(request, "alerts/_summary.html", {"summary": summary_context(session)})


@router.get("/alerts/{alert_id}", response_class=HTMLResponse)
def alert_detail(request: Request, session: SessionDep, alert_id: str) -> HTMLResponse:
    """One alert: labels, summary and description, transitions, acknowledgements, ack form
    and a "silence like this" link (400 for a non-numeric id, 404 for an unknown one)."""
    return _detail(request, session, parse_id(alert_id, "alert id"))


def _detail(
    request: Request,
    session: Session,
    alert_id: int,
    *,
    errors: dict[str, str] | None = None,
    typed: dict[str, str] | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    inst, rule = alert_service.get_alert(session, alert_id=alert_id)
    matchers = [("alertname", rule.name)] + [
        (k, str(inst.labels[k]))
        for k in ("hostname", "gpu_uuid", "device", "mountpoint", "port")
        if inst.labels.get(k)
    ]
    silence_query = urlencode([("matcher", f"{k}={v}") for k, v in matchers])
    now = utcnow()
    chart = alert_chart(
        session,
        inst=inst,
        rule=rule,
        settings=request.app.state.settings,
        now=now,
        zone=viewer_tz(request),
    )
    return render(
        request,
        "alerts/detail.html",
        {
            "chart": chart,
            "nav": "alerts",
            "row": with_inhibitors(session, [row_of(inst, rule)])[0],
            "inst": inst,
            "rule": rule,
            "entity": entity_of(inst.labels),
            "runbook": runbook_link(rule.spec, inst.id),
            "events": alert_service.list_events(session, alert_id=alert_id),
            "acks": alert_service.list_acks(session, alert_id=alert_id),
            "silence_href": f"/silences?{silence_query}",
            "quarantine": lifecycle_pages.alert_recommendation(
                session,
                alert_id=inst.id,
                rule=rule.name,
                spec=rule.spec or {},
                labels=inst.labels or {},
                state=inst.state,
                summary=inst.summary,
            ),
            "errors": errors or {},
            "typed": typed or {},
            "now": utcnow(),
        },
        status_code,
    )


@router.post("/alerts/{alert_id}/ack", response_model=None)
def ack_alert(
    request: Request,
    session: WriteSessionDep,
    alert_id: str,
    form: Annotated[Form, Depends(read_form)],
) -> Response:
    """Acknowledge (owner, note) and go back to the alert; 422 with the error beside the
    field when the owner is missing or a field is too long."""
    number = parse_id(alert_id, "alert id")
    owner, note = acting_name(request, form.one("owner")), (form.get("note") or [""])[0]
    errors = {}
    if not owner:
        errors["owner"] = "who is handling this alert (required)"
    elif len(owner) > 128:
        errors["owner"] = "at most 128 characters"
    if len(note) > 4096:
        errors["note"] = "at most 4096 characters"
    for name, value, check in (("owner", owner, plain_text), ("note", note, storable_text)):
        try:
            check(value)
        except ValueError as exc:  # NUL: PostgreSQL refuses it, so every backend does
            errors.setdefault(name, str(exc))
    if errors:
        typed = {"owner": owner, "note": note}
        return _detail(request, session, number, errors=errors, typed=typed, status_code=422)
    try:
        alert_service.ack(session, alert_id=number, owner=owner, note=note)
    except BadRequest as exc:
        return _detail(request, session, number, errors={"owner": exc.detail}, status_code=400)
    note_audit(request, after={"owner": owner, "note": note})
    tz = tz_query(request)
    return RedirectResponse(f"/alerts/{number}{'?' + tz if tz else ''}", status_code=303)
