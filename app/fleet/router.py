"""JSON API of the fleet: ``/api/v1/nodes``, ``/api/v1/nodes/{hostname}`` and its samples, and
retiring a node (``…/retire``) or returning it (``…/return``)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated
from zoneinfo import ZoneInfo

from fastapi import APIRouter, Query, Request
from fastapi.exceptions import RequestValidationError

from app.db import SessionDep, WriteSessionDep, utcnow
from app.fleet import charts, retire
from app.fleet import service as fleet_service
from app.fleet.schemas import (
    NodeDetailOut,
    NodeRetiredOut,
    NodeSummaryOut,
    RetireIn,
    SamplesOut,
    SeriesOut,
)
from app.metrics import service as metrics_service
from app.metrics.catalog import METRIC_NAMES, METRICS_BY_NAME
from app.timebounds import checked_utc
from app.viewer_time import DEFAULT_ZONE, parse_zone

router = APIRouter(prefix="/api/v1", tags=["fleet"])

DEFAULT_CHART_METRICS = ("util_gpu_pct", "mem_used_bytes", "power_w", "temp_c")
MAX_RANGE = timedelta(days=31)


def parse_label_filters(raw: list[str]) -> dict[str, str]:
    """``["cluster=a", "team=llm"]`` → ``{"cluster": "a", "team": "llm"}``.

    Raises:
        RequestValidationError: an entry without ``=`` (loc ``query.label``).
    """
    labels: dict[str, str] = {}
    for item in raw:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise RequestValidationError(
                [
                    {
                        "loc": ("query", "label"),
                        "msg": f"expected KEY=VALUE, got {item!r}",
                        "type": "value_error",
                    }
                ]
            )
        labels[key] = value
    return labels


@router.get("/nodes", response_model=list[NodeSummaryOut], summary="List nodes with freshness")
def list_nodes(
    request: Request,
    session: SessionDep,
    label: Annotated[list[str], Query(description="KEY=VALUE, repeatable (all must match)")] = [],  # noqa: B006
    q: Annotated[str | None, Query(max_length=253, description="hostname substring")] = None,
    retired: Annotated[
        bool, Query(description="true: the retired nodes instead of the fleet")
    ] = False,
) -> list[NodeSummaryOut]:
    """Every node in service (the retired ones with ``retired=true``) with its labels,
    freshness (fresh / stale / never_seen), GPU count, last sample time and current mean
    utilization and hottest temperature."""
    views = fleet_service.list_nodes(
        session,
        stale_after_s=request.app.state.settings.stale_after_s,
        labels=parse_label_filters(label),
        search=q,
        retired=retired,
    )
    return [NodeSummaryOut.from_view(v) for v in views]


@router.get("/nodes/{hostname}", response_model=NodeDetailOut, summary="One node with its GPUs")
def get_node(request: Request, session: SessionDep, hostname: str) -> NodeDetailOut:
    """A node with versions, skew, and each GPU with its latest values. 404 if unknown."""
    view = fleet_service.get_node_view(
        session, hostname=hostname, stale_after_s=request.app.state.settings.stale_after_s
    )
    return NodeDetailOut.from_view(view)


def parse_metrics(raw: str | None) -> list[str]:
    """Comma-separated metric names, default the four chart metrics.

    Raises:
        RequestValidationError: an unknown metric name (loc ``query.metrics``).
    """
    if not raw:
        return list(DEFAULT_CHART_METRICS)
    names = [n.strip() for n in raw.split(",") if n.strip()]
    unknown = [n for n in names if n not in METRICS_BY_NAME]
    if unknown or not names:
        raise RequestValidationError(
            [
                {
                    "loc": ("query", "metrics"),
                    "msg": f"unknown metric(s) {unknown}; known: {', '.join(METRIC_NAMES)}",
                    "type": "value_error",
                }
            ]
        )
    return list(dict.fromkeys(names))


def parse_zone_param(raw: str | None) -> ZoneInfo:
    """``?tz=`` → ``ZoneInfo`` (UTC when absent).

    Raises:
        RequestValidationError: not an IANA zone name (loc ``query.tz``).
    """
    if raw is None or not raw.strip():
        return DEFAULT_ZONE
    try:
        return parse_zone(raw)
    except ValueError as exc:
        raise RequestValidationError(
            [{"loc": ("query", "tz"), "msg": str(exc), "type": "value_error"}]
        ) from None


def resolve_range(start: datetime | None, end: datetime | None) -> tuple[datetime, datetime]:
    """Default ``[now − 1 h, now]``; naive times are refused, ``start`` must precede ``end`` and
    the span may not exceed 31 days.

    Raises:
        RequestValidationError: naming ``start`` or ``end``.
    """
    checked: dict[str, datetime | None] = {"start": start, "end": end}
    for name, value in checked.items():
        if value is None:
            continue
        try:
            checked[name] = checked_utc(value)
        except ValueError as exc:
            raise RequestValidationError(
                [{"loc": ("query", name), "msg": str(exc), "type": "value_error"}]
            ) from None
    start, end = checked["start"], checked["end"]
    end = end or utcnow()
    start = start or end - timedelta(hours=1)
    if start >= end:
        raise RequestValidationError(
            [{"loc": ("query", "start"), "msg": "start must be before end", "type": "value_error"}]
        )
    if end - start > MAX_RANGE:
        raise RequestValidationError(
            [{"loc": ("query", "start"), "msg": "range longer than 31 days", "type": "value_error"}]
        )
    return start, end


@router.get(
    "/nodes/{hostname}/samples", response_model=SamplesOut, summary="GPU samples over a range"
)
def node_samples(
    request: Request,
    session: SessionDep,
    hostname: str,
    start: Annotated[datetime | None, Query(description="RFC 3339, default end − 1 h")] = None,
    end: Annotated[datetime | None, Query(description="RFC 3339, default now")] = None,
    metrics: Annotated[str | None, Query(description="comma-separated metric names")] = None,
    step_s: Annotated[
        int | None, Query(ge=0, le=86400, description="0 = raw; default: from range")
    ] = None,
    tz: Annotated[
        str | None, Query(description="IANA zone whose midnight buckets of 2 h+ align to; UTC")
    ] = None,
) -> SamplesOut:
    """Samples of every GPU of the node, downsampled (avg for gauges, max for counters) to a step
    chosen from the range unless ``step_s`` is given; steps of 2 h and more start at midnight
    of ``tz`` (the viewer's zone, so a DST day has 23 or 25 hours)."""
    zone = parse_zone_param(tz)
    names = parse_metrics(metrics)
    start, end = resolve_range(start, end)
    node = fleet_service.get_node_by_hostname(session, hostname=hostname)
    raw_from = charts.raw_from(request.app.state.settings, utcnow())
    step = step_s
    if step is None:
        start, end = charts.to_whole_minutes(start, end, raw_from)
        step = metrics_service.choose_step_s(start, end, raw_from=raw_from)
    series = metrics_service.node_series(
        session, node=node, metrics=names, start=start, end=end, step_s=step, zone=zone
    )
    return SamplesOut(
        hostname=hostname,
        start=start,
        end=end,
        step_s=step,
        metrics=names,
        series=[
            SeriesOut(
                gpu_uuid=s.gpu_uuid,
                gpu_index=s.gpu_index,
                gpu_name=s.gpu_name,
                t=s.times,
                values=s.values,
            )
            for s in series
        ],
    )


@router.post(
    "/nodes/{hostname}/retire",
    response_model=NodeRetiredOut,
    summary="Retire a node (take it out of the fleet)",
)
def retire_node(session: WriteSessionDep, hostname: str, body: RetireIn) -> NodeRetiredOut:
    """Retire a decommissioned, replaced or renamed node: its tokens are revoked, it leaves the
    fleet's lists, counts and health, its alerts resolve at the next evaluation; its history
    stays. A batch under a new token (``fleetwatch token create``) brings it back. 404 if
    unknown."""
    node, revoked = retire.retire(session, hostname=hostname, reason=body.reason)
    return NodeRetiredOut(
        hostname=node.hostname,
        retired_at=node.retired_at,
        retired_reason=node.retired_reason,
        tokens_revoked=revoked,
    )


@router.post(
    "/nodes/{hostname}/return",
    response_model=NodeRetiredOut,
    summary="Return a retired node to the fleet",
)
def return_node(session: WriteSessionDep, hostname: str) -> NodeRetiredOut:
    """Bring a retired node back (its agent needs a new token if its were revoked). 404 if
    unknown."""
    node = retire.return_to_service(session, hostname=hostname)
    return NodeRetiredOut(hostname=node.hostname, retired_at=None, retired_reason=None)
