"""The alert page's chart: the rule's GPU metric for the alert's GPU around the firing, with the
threshold and the moment it became active. Only for threshold and rate rules on a GPU metric
(other kinds have no one series to draw)."""

from __future__ import annotations

from datetime import datetime, timedelta, tzinfo
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.alerts.models import AlertInstance, AlertRule
from app.config import Settings
from app.errors import NotFound
from app.fleet import charts
from app.fleet import service as fleet_service
from app.fleet.models import Gpu
from app.gpus import service as gpus_service
from app.metrics import service as metrics_service
from app.metrics.catalog import METRICS_BY_NAME

#: Drawn before the alert became active, and after it resolved.
AROUND = timedelta(minutes=30)
#: The longest range drawn (the newest part of a long-firing alert).
LONGEST = timedelta(hours=12)


def alert_chart(
    session: Session,
    *,
    inst: AlertInstance,
    rule: AlertRule,
    settings: Settings,
    now: datetime,
    zone: tzinfo,
) -> tuple[dict[str, Any], charts.ChartRange] | None:
    """(figure, its range) for ``inst``, or None when its rule is not a threshold or rate rule
    on a GPU metric, or its node or GPU is unknown."""
    condition = (rule.spec or {}).get("condition") or {}
    metric = METRICS_BY_NAME.get(str(condition.get("metric")))
    uuid = (inst.labels or {}).get("gpu_uuid")
    kind = condition.get("kind")
    if kind not in ("threshold", "rate") or condition.get("target") != "gpu":
        return None
    if metric is None or not uuid:
        return None
    try:
        node = fleet_service.get_node_by_hostname(session, hostname=str(inst.labels["hostname"]))
    except (NotFound, KeyError):
        return None
    began = inst.active_since or inst.fired_at or inst.last_evaluated_at
    end = min(now, (inst.resolved_at + AROUND) if inst.resolved_at else now)
    start = max(began - AROUND, end - LONGEST)
    gpu = session.scalar(select(Gpu).where(Gpu.node_id == node.id, Gpu.uuid == uuid))
    if gpu is None:
        return None
    raw_from = charts.raw_from(settings, now)
    start, end = charts.to_whole_minutes(start, end, raw_from)
    step = metrics_service.choose_step_s(start, end, raw_from=raw_from)
    samples = gpus_service.series_of_gpu(
        session,
        node=node,
        gpu=gpu,
        metrics=[metric.name],
        start=start,
        end=end,
        step_s=step,
        zone=zone,
    )
    spec = charts.ChartSpec(metric.name, metric.label, metric.unit)
    threshold = condition.get("threshold") if kind == "threshold" else None
    figure = charts.build_metric_figure(
        samples,
        spec,
        zone=zone,
        threshold=float(threshold) if isinstance(threshold, int | float) else None,
        at=began,
    )
    window = charts.ChartRange(start=start, end=end, preset=None, step_s=step)
    return figure, window
