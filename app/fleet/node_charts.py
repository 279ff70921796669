"""The node page's chart section in the viewer's time zone: range, bucketed samples, figures
and event marks, as template context. Used by ``GET /nodes/{hostname}``."""

from __future__ import annotations

from datetime import datetime, tzinfo
from typing import Any

from fastapi import Request
from sqlalchemy.orm import Session

from app.fleet import chart_marks, charts
from app.fleet.schemas import SamplesOut, SeriesOut
from app.fleet.service import NodeView
from app.metrics import service as metrics_service
from app.viewer_time import viewer_tz


def zoned_samples(
    session: Session, *, view: NodeView, window: charts.ChartRange, zone: tzinfo
) -> SamplesOut:
    """The chart metrics of every GPU of the node over ``window``, buckets of 2 h and more on
    the wall clock of ``zone``, shaped as the samples API answers (``?tz=`` there)."""
    series = metrics_service.node_series(
        session,
        node=view.node,
        metrics=list(charts.CHART_METRICS),
        start=window.start,
        end=window.end,
        step_s=window.step_s,
        zone=zone,
    )
    return SamplesOut(
        hostname=view.node.hostname,
        start=window.start,
        end=window.end,
        step_s=window.step_s,
        metrics=list(charts.CHART_METRICS),
        series=[
            SeriesOut(
                gpu_uuid=s.gpu_uuid,
                gpu_index=s.gpu_index,
                gpu_name=s.gpu_name,
                t=s.times,
                values=s.values,
            )
            for s in series
        ],
    )


def chart_context(
    request: Request,
    session: Session,
    *,
    view: NodeView,
    now: datetime,
    preset: str | None,
    start: str | None,
    end: str | None,
) -> dict[str, Any]:
    """``window``, ``presets``, ``figures``, ``custom_start``/``custom_end`` (inputs in the
    viewer's zone), ``zone`` and ``tz_fixed`` for ``fleet/node.html``. ``tz_fixed`` gives the
    zone pickers a custom range as UTC instants, so switching zones keeps the same window.

    Raises:
        BadRequest: a bad ``?tz=``, range preset or start/end (the page answers 400).
    """
    zone = viewer_tz(request)
    window = charts.resolve_chart_range(
        preset=preset or None,
        start=start or None,
        end=end or None,
        now=now,
        zone=zone,
        raw_from=charts.raw_from(request.app.state.settings, now),
    )
    samples = zoned_samples(session, view=view, window=window, zone=zone)
    marks = chart_marks.list_chart_marks(
        session,
        node_id=view.node.id,
        start=window.start,
        end=window.end,
        gpu_index_by_id={g.gpu.id: g.gpu.index for g in view.gpus},
        zone=zone,
    )
    return {
        "window": window,
        "presets": list(charts.PRESETS),
        "figures": charts.build_figures(samples, zone=zone, marks=marks),
        "custom_start": charts.local_input(window.start, zone),
        "custom_end": charts.local_input(window.end, zone),
        "zone": zone,
        "tz_fixed": {}
        if window.live
        else {"start": window.start.isoformat(), "end": window.end.isoformat()},
    }
