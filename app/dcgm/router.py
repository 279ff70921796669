"""``GET /api/v1/dcgm/endpoints``: the dcgm-exporter endpoints scraped in pull mode and how
their latest scrape went."""

from __future__ import annotations

from fastapi import APIRouter, Request

from app.db import SessionDep, utcnow
from app.dcgm import service as dcgm_service
from app.dcgm.jobs import configured_targets
from app.dcgm.schemas import EndpointOut, EndpointsOut
from app.dcgm.targets import TargetsError

router = APIRouter(prefix="/api/v1", tags=["dcgm"])


@router.get(
    "/dcgm/endpoints",
    response_model=EndpointsOut,
    summary="dcgm-exporter endpoints (pull mode): last scrape, series kept and skipped, pods",
)
def list_endpoints(request: Request, session: SessionDep) -> EndpointsOut:
    """Every endpoint configured now or scraped before: when it was last scraped, the error
    that stopped its latest scrape, the series stored and those skipped (with why), DCGM
    blanks stored as null, and the pods on its GPUs."""
    settings = request.app.state.settings
    targets_error = None
    try:
        configured = {t.url for t in configured_targets(settings)}
    except TargetsError as exc:
        targets_error = str(exc)
        configured = set(settings.dcgm_endpoints)
    job = getattr(request.app.state, "dcgm_job", None)
    if targets_error is None and job is not None:
        targets_error = job.targets_error
    rows = {row.url: row for row in dcgm_service.list_endpoints(session)}
    endpoints = []
    for url in sorted(configured | rows.keys()):
        row = rows.get(url)
        if row is None:
            endpoints.append(EndpointOut(url=url, configured=True))
            continue
        endpoints.append(
            EndpointOut.model_validate(
                {
                    "url": url,
                    "configured": url in configured,
                    "hostname": row.hostname,
                    "last_scrape_at": row.last_scrape_at,
                    "last_success_at": row.last_success_at,
                    "last_error": row.last_error,
                    "duration_s": row.duration_s,
                    "gpu_count": row.gpu_count,
                    "series_total": row.series_total,
                    "series_stored": row.series_stored,
                    "events_raised": row.events_raised or 0,
                    "skipped": row.skipped or [],
                    "blanks": row.blanks or [],
                    "workloads": row.workloads or [],
                }
            )
        )
    return EndpointsOut(
        scrape_interval_s=settings.dcgm_scrape_interval_s,
        targets_error=targets_error,
        checked_at=utcnow(),
        endpoints=endpoints,
    )
