"""``/reliability`` (page), ``/reliability.csv`` and ``GET /api/v1/reliability``: the figures
of :mod:`app.reliability.service` over ``?range=7d|30d|90d`` grouped by ``?group=<label>``."""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response

from app.db import SessionDep, utcnow
from app.errors import BadRequest
from app.reliability import service
from app.web import render

router = APIRouter()

RANGES = {"7d": 7, "30d": 30, "90d": 90}
DEFAULT_RANGE = "30d"
DEFAULT_GROUP = "cluster"
_LABEL = re.compile(r"[A-Za-z0-9_.\-/]{1,128}")

RangeQuery = Annotated[str | None, Query(alias="range", description="7d, 30d or 90d")]
GroupQuery = Annotated[str | None, Query(description="the node label that groups nodes")]


def _report(session: Any, range_: str | None, group: str | None) -> service.Report:
    preset = range_ or DEFAULT_RANGE
    if preset not in RANGES:
        raise BadRequest(f"range: expected one of {', '.join(RANGES)}, got {preset[:40]!r}")
    label = group or DEFAULT_GROUP
    if not _LABEL.fullmatch(label):
        raise BadRequest("group: a label name of 1-128 letters, digits, '_', '.', '-', '/'")
    end = utcnow()
    return service.report(
        session, start=end - timedelta(days=RANGES[preset]), end=end, group_label=label
    )


def _row(g: service.GroupFigures) -> dict[str, Any]:
    return {
        "group": g.group,
        "nodes": g.nodes,
        "node_hours": round(g.node_hours, 2),
        "out_of_service_hours": round(g.out_hours, 2),
        "maintenance_hours": round(g.maintenance_hours, 2),
        "availability_pct": None if g.availability_pct is None else round(g.availability_pct, 3),
        "incidents": g.incidents,
        "interruptions": g.interruptions,
        "mtbi_h": None if g.mtbi_h is None else round(g.mtbi_h, 1),
        "repairs": g.repairs,
        "mttr_h": None if g.mttr_h is None else round(g.mttr_h, 2),
    }


@router.get("/api/v1/reliability", tags=["reliability"])
def reliability_api(
    session: SessionDep, range_: RangeQuery = None, group: GroupQuery = None
) -> dict[str, Any]:
    """Availability, interruptions, MTBI, MTTR per group and for the fleet, and the failure
    taxonomy (docs/remediation.md, "Reliability"). 400 naming ``range`` or ``group``."""
    report = _report(session, range_, group)
    return {
        "start": report.start.isoformat(),
        "end": report.end.isoformat(),
        "group_label": report.group_label,
        "fleet": _row(report.fleet),
        "groups": [_row(g) for g in report.groups],
        "taxonomy": [
            {"category": name, "incidents": n, "share_pct": round(pct, 1)}
            for name, n, pct in report.taxonomy
        ],
    }


@router.get("/reliability.csv", include_in_schema=False)
def reliability_csv(
    session: SessionDep, range_: RangeQuery = None, group: GroupQuery = None
) -> Response:
    """The groups' figures (and the fleet's, last) as CSV."""
    report = _report(session, range_, group)
    out = io.StringIO()
    rows = [_row(g) for g in report.groups] + [_row(report.fleet)]
    writer = csv.DictWriter(out, fieldnames=list(_row(report.fleet)), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        # A label value starting with =, +, - or @ would be a formula in a spreadsheet.
        if str(row["group"])[:1] in ("=", "+", "-", "@"):
            row["group"] = "'" + str(row["group"])
        writer.writerow(row)
    label = report.group_label.replace("/", "_")
    name = f"fleetwatch-reliability-{label}-{range_ or DEFAULT_RANGE}.csv"
    return Response(
        out.getvalue(),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


@router.get("/reliability", response_class=HTMLResponse, include_in_schema=False)
def reliability_page(
    request: Request, session: SessionDep, range_: RangeQuery = None, group: GroupQuery = None
) -> HTMLResponse:
    """The reliability view: a table per group, bar charts of availability and the taxonomy."""
    report = _report(session, range_, group)
    charts = {
        "availability": {
            "x": [g.group for g in report.groups],
            "y": [g.availability_pct for g in report.groups],
            "title": "Availability, % of node-hours in service",
        },
        "taxonomy": {
            "x": [name for name, _, _ in report.taxonomy],
            "y": [n for _, n, _ in report.taxonomy],
            "title": "Incidents by failed component",
        },
    }
    return render(
        request,
        "reliability/page.html",
        {
            "nav": "reliability",
            "report": report,
            "rows": [_row(g) for g in report.groups],
            "fleet": _row(report.fleet),
            "charts": charts,
            "ranges": list(RANGES),
            "range": range_ or DEFAULT_RANGE,
            "group": report.group_label,
        },
    )
