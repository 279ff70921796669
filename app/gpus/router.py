"""JSON API of one GPU: ``/api/v1/nodes/{hostname}/gpus/{gpu}`` and its samples."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request

from app.db import SessionDep, utcnow
from app.fleet import charts as fleet_charts
from app.fleet import router as fleet_router
from app.fleet import service as fleet_service
from app.fleet.schemas import GpuOut, SamplesOut
from app.gpus import pages as gpu_pages
from app.gpus import service as gpu_service
from app.gpus.charts import GPU_CHART_METRICS
from app.gpus.detail import get_gpu_detail
from app.gpus.schemas import GpuDetailOut, GpuEventOut
from app.health.rules import rules_from_settings
from app.metrics import service as metrics_service
from app.nvlinks.schemas import NvlinkOut

api = APIRouter(prefix="/api/v1", tags=["gpus"])

GpuKey = Annotated[str, "a GPU index on the node or its UUID (case-insensitive)"]


@api.get("/nodes/{hostname}/gpus/{gpu}", response_model=GpuDetailOut, summary="One GPU in detail")
def get_gpu(
    request: Request,
    session: SessionDep,
    hostname: str,
    gpu: GpuKey,
    range_: Annotated[
        str | None, Query(alias="range", description="15m, 1h, 6h, 24h, 7d or 30d (events)")
    ] = None,
    start: Annotated[str | None, Query(description="RFC 3339; with end, instead of range")] = None,
    end: Annotated[str | None, Query(description="RFC 3339, default now")] = None,
) -> GpuDetailOut:
    """The GPU ``gpu`` (index or UUID) of node ``hostname``: identity, latest values with N/A
    reasons, health with reasons, the newest reading of each NVLink and its events over the
    range (default the last hour). 404 naming the node or GPU; 400 for a bad range."""
    now = utcnow()
    window = fleet_charts.resolve_chart_range(
        preset=range_ or None,
        start=start or None,
        end=end or None,
        now=now,
        raw_from=fleet_charts.raw_from(request.app.state.settings, now),
    )
    detail = get_gpu_detail(
        session,
        hostname=hostname,
        key=gpu,
        rules=rules_from_settings(request.app.state.settings),
        start=window.start,
        end=window.end,
        now=now,
    )
    g = detail.gpu.gpu
    node = detail.view.node
    return GpuDetailOut(
        hostname=node.hostname,
        node_freshness=detail.view.freshness,
        driver_version=node.driver_version,
        cuda_version=node.cuda_version,
        gpu=GpuOut.from_view(detail.gpu),
        health=detail.health,
        node_state=detail.node_health.state,
        node_reasons=detail.node_reasons,
        nvlinks=[
            NvlinkOut(
                gpu_uuid=g.uuid,
                gpu_index=g.index,
                link=link.link,
                sampled_at=link.sampled_at,
                state=link.state,
                speed_gbps=link.speed_gbps,
                remote_pci_bus_id=link.remote_pci_bus_id,
                remote_device_type=link.remote_device_type,
                tx_bytes_per_s=link.tx_bytes_per_s,
                rx_bytes_per_s=link.rx_bytes_per_s,
                crc_errors=link.crc_errors,
                replay_errors=link.replay_errors,
                recovery_errors=link.recovery_errors,
            )
            for link in detail.links
        ],
        start=window.start,
        end=window.end,
        events=[GpuEventOut.from_row(e) for e in detail.events],
    )


@api.get(
    "/nodes/{hostname}/gpus/{gpu}/samples",
    response_model=SamplesOut,
    summary="One GPU's samples over a range",
)
def get_gpu_samples(
    request: Request,
    session: SessionDep,
    hostname: str,
    gpu: GpuKey,
    start: Annotated[datetime | None, Query(description="RFC 3339, default end − 1 h")] = None,
    end: Annotated[datetime | None, Query(description="RFC 3339, default now")] = None,
    metrics: Annotated[
        str | None, Query(description="comma-separated metric names; default the GPU charts'")
    ] = None,
    step_s: Annotated[
        int | None, Query(ge=0, le=86400, description="0 = raw; default: from range")
    ] = None,
    tz: Annotated[
        str | None, Query(description="IANA zone whose midnight buckets of 2 h+ align to; UTC")
    ] = None,
) -> SamplesOut:
    """The GPU's samples, downsampled like ``/api/v1/nodes/{hostname}/samples`` (the GPU page's
    charts refresh from here, with the viewer's ``tz``); one series, or none when the GPU has no
    samples in the range. 422 naming ``metrics``, ``step_s``, ``start``, ``end`` or ``tz``."""
    zone = fleet_router.parse_zone_param(tz)
    names = list(GPU_CHART_METRICS) if metrics is None else fleet_router.parse_metrics(metrics)
    start, end = fleet_router.resolve_range(start, end)
    raw_from = fleet_charts.raw_from(request.app.state.settings, utcnow())
    step = step_s
    if step is None:
        start, end = fleet_charts.to_whole_minutes(start, end, raw_from)
        step = metrics_service.choose_step_s(start, end, raw_from=raw_from)
    view = fleet_service.get_node_view(session, hostname=hostname, stale_after_s=0)
    chosen = gpu_service.resolve_gpu(view, key=gpu)
    return gpu_service.series_of_gpu(
        session,
        node=view.node,
        gpu=chosen.gpu,
        metrics=names,
        start=start,
        end=end,
        step_s=step,
        zone=zone,
    )


#: What :mod:`app.main` registers: the JSON API above and the HTML pages.
router = APIRouter()
router.include_router(api)
router.include_router(gpu_pages.router)
