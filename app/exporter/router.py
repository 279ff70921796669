"""``GET /metrics``: the scrape endpoint for Prometheus (docs/metrics.md)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from app.db import SessionDep, utcnow
from app.exporter import service
from app.exporter.text import CONTENT_TYPE

router = APIRouter(tags=["metrics"])


@router.get(
    "/metrics",
    response_class=Response,
    summary="The fleet's GPU values (dcgm-exporter's names) and Fleetwatch's own metrics",
    responses={200: {"content": {CONTENT_TYPE: {}}}},
)
def get_metrics(request: Request, session: SessionDep) -> Response:
    """Every fresh GPU's newest values under dcgm-exporter's metric names, types, units and
    labels, then Fleetwatch's ``fleetwatch_*`` counters and gauges, in the Prometheus text
    format."""
    settings = request.app.state.settings
    body = service.exposition(
        session,
        stale_after_s=settings.stale_after_s,
        node_labels=settings.metrics_node_labels,
        now=utcnow(),
    )
    return Response(body, media_type=CONTENT_TYPE)
