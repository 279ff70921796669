"""``GET /api/v1/dcgm/endpoints`` and the ``/dcgm`` page: the dcgm-exporter endpoints scraped
in pull mode and how their latest scrape went."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from app.db import SessionDep
from app.dcgm.listing import listing
from app.dcgm.schemas import EndpointsOut
from app.web import render

router = APIRouter(prefix="/api/v1", tags=["dcgm"])
pages = APIRouter(include_in_schema=False)


@router.get(
    "/dcgm/endpoints",
    response_model=EndpointsOut,
    summary="dcgm-exporter endpoints (pull mode): last scrape, series kept and skipped, pods",
)
def list_endpoints(request: Request, session: SessionDep) -> EndpointsOut:
    """Every endpoint configured now or scraped before: when it was last scraped, the error
    that stopped its latest scrape, the series stored and those skipped (with why), DCGM
    blanks stored as null, and the pods on its GPUs."""
    return listing(
        session,
        settings=request.app.state.settings,
        job=getattr(request.app.state, "dcgm_job", None),
    )


@pages.get("/dcgm", response_class=HTMLResponse)
def endpoints_page(request: Request, session: SessionDep) -> HTMLResponse:
    """The endpoints as a table: a down one first, each with its skipped series and pods."""
    found = listing(
        session,
        settings=request.app.state.settings,
        job=getattr(request.app.state, "dcgm_job", None),
    )
    ordered = sorted(found.endpoints, key=lambda e: (e.last_error is None, e.url))
    return render(request, "dcgm/page.html", {"nav": "dcgm", "found": found, "endpoints": ordered})
