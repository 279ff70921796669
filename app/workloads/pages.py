"""``/jobs/slurm/{job_id}``: a job's page (its GPUs on each node, their events and the
incidents during its run)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from app.db import SessionDep, utcnow
from app.remediation.service import Backends
from app.web import render
from app.workloads import views

router = APIRouter(include_in_schema=False)


@router.get("/jobs/slurm/{job_id}", response_class=HTMLResponse)
def slurm_job_page(request: Request, session: SessionDep, job_id: str) -> HTMLResponse:
    """One Slurm job (422 page for an id that is not one, 404 for an unknown job, 503 where
    Slurm could not be asked and no incident captured it)."""
    settings = request.app.state.settings
    job = views.job_detail(
        session,
        job_id=job_id,
        backends=Backends.of(settings),
        quiet_s=settings.incident_quiet_s,
        now=utcnow(),
    )
    return render(request, "workloads/job.html", {"nav": "incidents", "job": job})
