"""Every dcgm-exporter endpoint configured now or scraped before, with its latest outcome: what
``GET /api/v1/dcgm/endpoints`` and the ``/dcgm`` page show."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from app.config import Settings
from app.db import utcnow
from app.dcgm import service as dcgm_service
from app.dcgm.jobs import configured_targets
from app.dcgm.schemas import EndpointOut, EndpointsOut
from app.dcgm.targets import TargetsError, shown_url


def listing(session: Session, *, settings: Settings, job: Any = None) -> EndpointsOut:
    """The endpoints by URL. ``job``: the running :class:`app.dcgm.jobs.ScrapeJob`, whose last
    run's file error is reported where the file reads well now (None: no job here)."""
    targets_error = None
    try:
        configured = {t.url for t in configured_targets(settings)}
    except TargetsError as exc:
        targets_error = str(exc)
        # The job scrapes the file's last good targets meanwhile: they are still configured.
        kept = (job.last_good_file if job is not None else None) or []
        configured = set(settings.dcgm_endpoints) | {t.url for t in kept}
    if targets_error is None and job is not None:
        targets_error = job.targets_error
    rows = {row.url: row for row in dcgm_service.list_endpoints(session)}
    endpoints = []
    for url in sorted(configured | rows.keys()):
        row = rows.get(url)
        if row is None:
            endpoints.append(EndpointOut(url=shown_url(url), configured=True))
            continue
        endpoints.append(
            EndpointOut.model_validate(
                {
                    "url": shown_url(url),
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
