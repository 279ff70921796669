"""HTML page of one GPU (``/nodes/{hostname}/gpus/{gpu}``) and its 5 s htmx partial."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote, urlencode
from zoneinfo import ZoneInfo

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

from app.db import SessionDep, utcnow
from app.fleet import charts as fleet_charts
from app.fleet.chart_marks import dst_marks, event_mark
from app.gpus import charts as gpu_charts
from app.gpus import service as gpu_service
from app.gpus.detail import get_gpu_detail
from app.health.rules import rules_from_settings, xid_text
from app.metrics.catalog import METRICS_BY_NAME
from app.viewer_time import TZ_PARAM, viewer_tz
from app.web import render

router = APIRouter(include_in_schema=False)

RangeParam = Annotated[str | None, Query(alias="range")]


def range_query(window: fleet_charts.ChartRange, zone: ZoneInfo) -> str:
    """The URL query (``?range=6h`` or ``?start=…&end=…``, plus ``tz`` outside UTC) that asks
    for ``window`` again; the live partial is fetched with it so its error history covers the
    page's range in the page's zone."""
    params = (
        {"range": window.preset}
        if window.preset
        else {"start": window.start.isoformat(), "end": window.end.isoformat()}
    )
    if zone.key != "UTC":
        params[TZ_PARAM] = zone.key
    return "?" + urlencode(params)


def _context(
    request: Request, session: Session, hostname: str, gpu: str, window_args: dict[str, Any]
) -> dict[str, Any]:
    now = utcnow()
    zone = viewer_tz(request)
    window = fleet_charts.resolve_chart_range(
        now=now,
        zone=zone,
        raw_from=fleet_charts.raw_from(request.app.state.settings, now),
        **window_args,
    )
    detail = get_gpu_detail(
        session,
        hostname=hostname,
        key=gpu,
        rules=rules_from_settings(request.app.state.settings),
        start=window.start,
        end=window.end,
        now=now,
    )
    g = detail.gpu.gpu
    base = f"/nodes/{quote(detail.view.node.hostname, safe='')}/gpus/{quote(g.uuid, safe='')}"
    return {
        "detail": detail,
        "view": detail.view,
        "g": detail.gpu,
        "health": detail.health,
        "window": window,
        "range_query": range_query(window, zone),
        "zone": zone,
        "gpu_url": base,
        "metrics": METRICS_BY_NAME,
        "xid_text": xid_text,
        "now": now,
    }


def _window_args(range_: str | None, start: str | None, end: str | None) -> dict[str, Any]:
    return {"preset": range_ or None, "start": start or None, "end": end or None}


@router.get("/nodes/{hostname}/gpus/{gpu}", response_class=HTMLResponse)
def gpu_page(
    request: Request,
    session: SessionDep,
    hostname: str,
    gpu: str,
    range_: RangeParam = None,
    start: str | None = None,
    end: str | None = None,
) -> HTMLResponse:
    """One GPU (``gpu``: its index on the node or its UUID): identity, health with reasons, live
    values, NVLinks, processes, MIG instances, error history and charts over ``?range=1h`` or
    ``?start=…&end=…``. A friendly 404 page names an unknown node or GPU; 400 for a bad range."""
    context = _context(request, session, hostname, gpu, _window_args(range_, start, end))
    window: fleet_charts.ChartRange = context["window"]
    detail = context["detail"]
    zone = context["zone"]
    gpu_index = {detail.gpu.gpu.id: detail.gpu.gpu.index}
    marks = [event_mark(e, gpu_index) for e in detail.events]
    marks += dst_marks(window.start, window.end, zone)
    samples = gpu_service.series_of_gpu(
        session,
        node=detail.view.node,
        gpu=detail.gpu.gpu,
        metrics=list(gpu_charts.GPU_CHART_METRICS),
        start=window.start,
        end=window.end,
        step_s=window.step_s,
        zone=zone,
    )
    return render(
        request,
        "gpus/page.html",
        {
            **context,
            "presets": list(fleet_charts.PRESETS),
            "figures": gpu_charts.build_gpu_figures(samples, zone=zone, marks=marks),
            "ecc_increases": gpu_charts.counter_increases(samples),
            "custom_start": fleet_charts.local_input(window.start, zone),
            "custom_end": fleet_charts.local_input(window.end, zone),
        },
    )


@router.get("/nodes/{hostname}/gpus/{gpu}/_live", response_class=HTMLResponse)
def gpu_live_partial(
    request: Request,
    session: SessionDep,
    hostname: str,
    gpu: str,
    range_: RangeParam = None,
    start: str | None = None,
    end: str | None = None,
) -> HTMLResponse:
    """The GPU's health, live values, NVLinks, processes and events alone, for the 5 s refresh."""
    context = _context(request, session, hostname, gpu, _window_args(range_, start, end))
    return render(request, "gpus/_live.html", context)
