"""``GET /api/v1/topology/drift`` and, through :mod:`app.topology.fleet_pages`, the ``/topology``
page: one router for :mod:`app.main` to include."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from app.db import SessionDep, utcnow
from app.topology import fleet_pages
from app.topology.drift import KINDS

router = APIRouter()
router.include_router(fleet_pages.router)


class DriftFindingOut(BaseModel):
    """One way a node differs from its group's majority (see :class:`app.topology.drift.
    DriftFinding`)."""

    hostname: str
    group: str
    kind: str = Field(description=f"one of {', '.join(KINDS)}")
    detail: str
    expected: str | None
    actual: str | None


class DriftGroupOut(BaseModel):
    """A comparison group (fabric, GPU count class, GPU model) and its majority signature;
    ``nvlink_type``, ``nic_count`` and ``numa_nodes`` are null where the nodes tie."""

    group: str
    fabric: str
    gpu_model: str | None
    gpu_count_class: int
    hostnames: list[str]
    nvlink_type: str | None
    nic_count: int | None
    numa_nodes: int | None
    conforming: int
    drifting: int
    partial: int


class DriftOut(BaseModel):
    """The fleet's topology drift as of ``generated_at``: every group, and the findings that
    pass the ``group`` and ``kind`` filters."""

    generated_at: datetime
    groups: list[DriftGroupOut]
    findings: list[DriftFindingOut]


@router.get(
    "/api/v1/topology/drift",
    response_model=DriftOut,
    tags=["topology"],
    summary="Nodes whose topology differs from the majority of their fabric group",
)
def get_drift(
    request: Request,
    session: SessionDep,
    group: Annotated[str | None, Query(description="exact group name")] = None,
    kind: Annotated[str | None, Query(description="finding kind")] = None,
) -> DriftOut:
    """Groups (fabric label ``ib_pod``/``pod``/``rack``/``cluster``, GPU count class, GPU
    model) with their majority signature, and the findings. 400 for an unknown ``kind``."""
    filters = fleet_pages.DriftFilters.parse(group, kind)
    drift = fleet_pages.fleet_drift(
        session, now=utcnow(), stale_after_s=request.app.state.settings.drift_stale_after_s
    )
    return DriftOut(
        generated_at=drift.at,
        groups=[
            DriftGroupOut(
                group=g.group,
                fabric=g.fabric,
                gpu_model=g.gpu_model,
                gpu_count_class=g.count_class,
                hostnames=list(g.hostnames),
                nvlink_type=g.nvlink_type,
                nic_count=g.nic_count,
                numa_nodes=g.numa_nodes,
                conforming=g.conforming,
                drifting=g.drifting,
                partial=g.partial,
            )
            for g in drift.groups
        ],
        findings=[DriftFindingOut(**vars(f)) for f in drift.findings if filters.keep(f)],
    )
