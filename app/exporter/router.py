"""``GET /metrics``: the scrape endpoint for Prometheus (docs/metrics.md)."""

from __future__ import annotations

import gzip

from fastapi import APIRouter, Request, Response

from app.db import SessionDep, utcnow
from app.exporter import service
from app.exporter.text import CONTENT_TYPE

router = APIRouter(tags=["metrics"])

#: gzip level of a scrape's body: 1, not the app's 6, for ~70 MB at 1,000 nodes × 8 GPUs
#: (300 ms instead of 700, 10.6 MB instead of 9.4; bench/metrics_scrape.py).
GZIP_LEVEL = 1


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
    if "gzip" not in request.headers.get("accept-encoding", ""):
        return Response(body, media_type=CONTENT_TYPE)
    # Compressed here, so the app's gzip middleware passes it on as it is.
    headers = {"Content-Encoding": "gzip", "Vary": "Accept-Encoding"}
    return Response(gzip.compress(body, GZIP_LEVEL), media_type=CONTENT_TYPE, headers=headers)
