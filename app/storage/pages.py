"""``/storage``: the fleet's disks, NFS mounts and InfiniBand ports — charts over a range (top N
series plus the rest summarised) and "now" tables, filtered by labels, hostname and a
device/mount substring, every choice in the URL."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import SessionDep, utcnow
from app.errors import BadRequest
from app.fleet.charts import PRESETS, ChartRange, raw_from
from app.fleet.pages import LABEL_COLUMNS, SLOW_IO_S
from app.series.rollups import specs as rollup_specs
from app.storage import charts, fleet_now
from app.storage import fleet_service as fs
from app.storage.series import ChartData
from app.viewer_time import TZ_PARAM, viewer_tz
from app.web import render

router = APIRouter(include_in_schema=False)

TOP_CHOICES = (5, 10, 20)
MEASURES = {"mean": "mean over the range", "max": "peak in the range"}
Labels = Annotated[list[str], Query()]


@dataclass(frozen=True)
class StorageFilters:
    """The page's URL state: hostname search ``q``, ``label=k=v`` filters, ``match`` (device or
    mount point substring), ``top`` series per chart, ranking measure ``by``, and the range
    (``range`` preset or ``start``/``end``)."""

    q: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    match: str = ""
    top: int = 10
    by: str = "mean"
    range: str | None = None
    start: str | None = None
    end: str | None = None

    @classmethod
    def parse(cls, **raw: Any) -> StorageFilters:
        """From the query parameters.

        Raises:
            BadRequest: ``label`` without ``=``, ``top`` not one of 5/10/20, unknown ``by``.
        """
        labels = []
        for item in raw.get("label") or []:
            key, sep, value = item.strip().partition("=")
            if not item.strip():
                continue
            if not sep or not key.strip():
                raise BadRequest(f"label: expected key=value, got {item.strip()!r}")
            labels.append((key.strip(), value.strip()))
        top = raw.get("top") or "10"
        if top not in {str(n) for n in TOP_CHOICES}:
            raise BadRequest(f"top: one of {', '.join(map(str, TOP_CHOICES))}, got {top!r}")
        by = raw.get("by") or "mean"
        if by not in MEASURES:
            raise BadRequest(f"by: one of {', '.join(MEASURES)}, got {by!r}")
        return cls(
            q=(raw.get("q") or "").strip()[:253],
            labels=tuple(dict(labels).items()),
            match=(raw.get("match") or "").strip()[:512],
            top=int(top),
            by=by,
            range=raw.get("range") or None,
            start=raw.get("start") or None,
            end=raw.get("end") or None,
        )

    def query(self, **changes: Any) -> str:
        """The URL query string of this state with ``changes`` (field=value) applied; a preset
        range drops ``start``/``end`` and the other way round."""
        state = replace(self, **changes)
        params: list[tuple[str, str]] = []
        if state.start:
            params += [("start", state.start)] + ([("end", state.end)] if state.end else [])
        elif state.range:
            params.append(("range", state.range))
        if state.q:
            params.append(("q", state.q))
        params += [("label", f"{k}={v}") for k, v in state.labels]
        if state.match:
            params.append(("match", state.match))
        if state.top != 10:
            params.append(("top", str(state.top)))
        if state.by != "mean":
            params.append(("by", state.by))
        return "?" + urlencode(params) if params else ""


def _filters(
    range_: str | None,
    start: str | None,
    end: str | None,
    q: str | None,
    label: list[str],
    match: str | None,
    top: str | None,
    by: str | None,
) -> StorageFilters:
    return StorageFilters.parse(
        range=range_, start=start, end=end, q=q, label=label, match=match, top=top, by=by
    )


def _chart_query(scope: fs.NodeScope, window: ChartRange, f: StorageFilters) -> fs.Query:
    by: fs.Measure = "max" if f.by == "max" else "mean"
    return fs.Query(scope, window.start, window.end, window.step_s, f.match, f.top, by)


def _now_context(
    session: Session,
    scope: fs.NodeScope,
    f: StorageFilters,
    now: datetime,
    totals: dict[str, list[fs.CounterTotal]],
) -> dict[str, Any]:
    return {
        "slowest": fleet_now.slowest_mounts(session, scope, now, match=f.match),
        "busiest": fleet_now.busiest_devices(session, scope, now, match=f.match),
        "retransmits": [t for t in totals["nfs_retransmits"] if t.total > 0],
        "ports": fleet_now.port_problems(session, scope, now, totals["ib_errors"], match=f.match),
        "slow_io_s": SLOW_IO_S,
        "now": now,
    }


def _context(
    session: Session, f: StorageFilters, *, with_charts: bool, settings: Settings
) -> tuple[dict[str, Any], dict[str, ChartData]]:
    """The template context, and the charts' data when ``with_charts`` (else only the counter
    totals the tables need are read)."""
    rollup_specs.keep_marks(session)
    now = utcnow()
    window = charts.resolve_range(
        preset=f.range, start=f.start, end=f.end, now=now, raw_from=raw_from(settings, now)
    )
    scope = fs.select_nodes(session, labels=dict(f.labels), search=f.q)
    query = _chart_query(scope, window, f)
    if not with_charts:
        query = replace(query, top_n=0)
    data, totals = chart_data(session, query, gauges=with_charts)
    context = {
        "filters": f,
        "window": window,
        "scope": scope,
        "nav": "storage",
        **_now_context(session, scope, f, now, totals),
    }
    return context, data


def chart_data(
    session: Session, query: fs.Query, *, gauges: bool = True
) -> tuple[dict[str, ChartData], dict[str, list[fs.CounterTotal]]]:
    """Every chart's data by metric (the gauges of a table read together; none when not
    ``gauges``), and each counter metric's per-series totals."""
    by_table: dict[Any, list[fs.Metric]] = {}
    data: dict[str, ChartData] = {}
    totals: dict[str, list[fs.CounterTotal]] = {}
    for spec in charts.CHARTS:
        metric = fs.METRICS[spec.metric]
        if metric.counter:
            data[metric.name], totals[metric.name] = fs.counter_chart(session, metric, query)
        elif gauges:
            by_table.setdefault(metric.source.name, []).append(metric)
    for metrics in by_table.values():
        data.update(fs.gauge_charts(session, metrics, query))
    return data, totals


@router.get("/storage", response_class=HTMLResponse)
def storage_page(
    request: Request,
    session: SessionDep,
    range_: Annotated[str | None, Query(alias="range")] = None,
    start: str | None = None,
    end: str | None = None,
    q: str | None = None,
    label: Labels = [],  # noqa: B006
    match: str | None = None,
    top: str | None = None,
    by: str | None = None,
) -> Response:
    """Charts of disk, NFS and IB traffic, latency and errors over the range, and the "now"
    tables. 400 page for a bad parameter (named). A URL with blank or default parameters (what
    the filter form submits) is redirected to its short form, so links stay readable."""
    f = _filters(range_, start, end, q, label, match, top, by)
    canonical = f.query()
    if request.query_params.get(TZ_PARAM, "").strip():
        # A pasted ?tz= link keeps its zone (README "Time zones"), UTC included.
        zone = quote(viewer_tz(request).key, safe="")
        canonical += f"{'&' if canonical else '?'}{TZ_PARAM}={zone}"
    if request.url.query and f"?{request.url.query}" != canonical:
        return RedirectResponse(f"/storage{canonical}", status_code=303)
    context, data = _context(session, f, with_charts=True, settings=request.app.state.settings)
    window: ChartRange = context["window"]
    figures = [charts.build_figure(spec, data[spec.metric]) for spec in charts.CHARTS]
    has_data = any(not d.empty for d in data.values())
    return render(
        request,
        "storage/page.html",
        {
            **context,
            "figures": figures,
            "has_data": has_data,
            "presets": list(PRESETS),
            "top_choices": TOP_CHOICES,
            "measures": MEASURES,
            "label_columns": LABEL_COLUMNS,
            "custom_start": window.start.strftime("%Y-%m-%dT%H:%M"),
            "custom_end": window.end.strftime("%Y-%m-%dT%H:%M"),
        },
    )


@router.get("/storage/_now", response_class=HTMLResponse)
def storage_now_partial(
    request: Request,
    session: SessionDep,
    range_: Annotated[str | None, Query(alias="range")] = None,
    start: str | None = None,
    end: str | None = None,
    q: str | None = None,
    label: Labels = [],  # noqa: B006
    match: str | None = None,
    top: str | None = None,
    by: str | None = None,
) -> HTMLResponse:
    """The "now" tables alone, for the 5 s htmx refresh."""
    f = _filters(range_, start, end, q, label, match, top, by)
    context, _ = _context(session, f, with_charts=False, settings=request.app.state.settings)
    return render(request, "storage/_now.html", context)
