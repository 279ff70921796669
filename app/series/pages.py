"""``/admin/store``: the sample store's tables by tier — size, rows, samples, bytes per value and
recent ingest rate — as ``fleetwatch storage stats`` prints them."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from app.db import SessionDep
from app.series.stats import RATE_WINDOW_S, table_stats
from app.web import render

router = APIRouter(include_in_schema=False)


@router.get("/admin/store", response_class=HTMLResponse)
def store_page(request: Request, session: SessionDep) -> HTMLResponse:
    """Every sample table by tier on Postgres; on SQLite, why there is nothing to show."""
    backend = session.get_bind().dialect.name
    rows = table_stats(session) if backend == "postgresql" else []
    settings = request.app.state.settings
    context = {
        "nav": None,
        "rows": rows,
        "backend": backend,
        "rate_window_s": RATE_WINDOW_S,
        "compact_after_s": settings.compact_after_s,
        "raw_retention_days": settings.raw_retention_days,
        "minute_days": settings.rollup_minute_retention_days,
        "minutes_after_days": settings.compact_minutes_after_days,
        "host_minutes_after_days": settings.compact_host_minutes_after_days,
        "hour_days": settings.rollup_hour_retention_days,
    }
    return render(request, "series/store.html", context)
