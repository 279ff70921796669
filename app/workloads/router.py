"""``GET /api/v1/jobs/slurm/{job_id}``: a job, the GPUs it used and their events during it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request

from app.db import SessionDep, utcnow
from app.remediation.service import Backends
from app.workloads import views
from app.workloads.schemas import JobOut
from app.workloads.slurm_jobs import JOB_ID_PATTERN

router = APIRouter(prefix="/api/v1", tags=["jobs"])

#: A Slurm job id in the URL path; anything else is FastAPI's 422 naming ``job_id``.
JobIdPath = Annotated[
    str,
    Path(
        pattern=JOB_ID_PATTERN,
        description="as squeue prints it: 41, 42_3 (array task), 43+1 (het job component)",
    ),
]


@router.get("/jobs/slurm/{job_id}", response_model=JobOut, summary="One Slurm job")
def get_slurm_job(request: Request, session: SessionDep, job_id: JobIdPath) -> JobOut:
    """The job from Slurm now (``scontrol show job -d``), else as incidents captured it;
    each node it ran on with the GPUs it used, their events during its run and the node's
    incidents then. 404 for a job neither knows; 503 where Slurm could not be asked and no
    capture knows it (``slurm_error`` says why when a capture answers instead)."""
    settings = request.app.state.settings
    return views.job_detail(
        session,
        job_id=job_id,
        backends=Backends.of(settings),
        quiet_s=settings.incident_quiet_s,
        now=utcnow(),
    )
