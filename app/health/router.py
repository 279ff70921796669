"""JSON health API: ``/api/v1/health`` (fleet, clusters, groups, nodes) and one node's health."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from app.db import SessionDep
from app.fleet.router import parse_label_filters
from app.health import current as health_current
from app.health import service as health_service
from app.health.rules import HealthRules, rules_from_settings
from app.health.schemas import HealthOut, NodeHealthOut

router = APIRouter(prefix="/api/v1", tags=["health"])


def rules_of(request: Request) -> HealthRules:
    """The health rules in force for this app (defaults with its settings applied)."""
    return rules_from_settings(request.app.state.settings)


@router.get("/health", response_model=HealthOut, summary="Fleet health with its reasons")
def get_health(
    request: Request,
    session: SessionDep,
    label: Annotated[list[str], Query(description="KEY=VALUE, repeatable (all must match)")] = [],  # noqa: B006
) -> HealthOut:
    """Node counts per state (healthy, degraded, unhealthy, unknown) fleet-wide, per cluster and
    per group (IB pod, else rack), and each node's state with its reasons."""
    return health_current.list_health(
        session, rules=rules_of(request), labels=parse_label_filters(label) or None
    )


@router.get("/nodes/{hostname}/health", response_model=NodeHealthOut, summary="One node's health")
def get_node_health(request: Request, session: SessionDep, hostname: str) -> NodeHealthOut:
    """The node's state and reasons, and each GPU's. 404 for an unknown node."""
    return health_service.get_node_health(session, hostname=hostname, rules=rules_of(request))
