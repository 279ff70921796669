"""The DCGM part of a scrape: every fresh GPU's newest values as dcgm-exporter's metrics.

A GPU is served when its newest sample reached the server (its clock) within the
``stale_after_s`` setting, as the pages judge a node fresh; a stale, lost or missing GPU's
last values are not repeated as if current. Two statements whatever the fleet's size: the
fresh GPUs with their newest sample and inventory (:func:`app.fleet.service.list_fresh_gpu_rows`)
and each GPU's last Xid (:func:`app.events.service.last_xid_by_gpu`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy.orm import Session

from app.events import service as event_service
from app.exporter import dcgm, labels
from app.exporter.text import Family, label_text
from app.fleet import service as fleet_service


def families(
    session: Session, *, stale_after_s: float, now: datetime, node_labels: Sequence[str]
) -> list[Family]:
    """One :class:`Family` per field of :data:`app.exporter.dcgm.FIELDS`, in that order, with a
    sample per fresh GPU that has the value (by hostname, then GPU index); ``node_labels``: the
    node label keys to export (the ``metrics_node_labels`` setting)."""
    rows = fleet_service.list_fresh_gpu_rows(
        session, metrics=dcgm.SAMPLE_METRICS, stale_after_s=stale_after_s, now=now
    )
    xids = event_service.last_xid_by_gpu(session) if rows else {}
    out = [Family(f.name, f.type, f.help) for f in dcgm.FIELDS]
    # ~40 fields × 8,000 GPUs: the loop's lookups hoisted out of it.
    plan = [
        (f.source, f.convert, family.samples) for f, family in zip(dcgm.FIELDS, out, strict=True)
    ]
    for row in rows:
        series = label_text(labels.gpu_labels(row, node_labels))
        row["last_xid"] = xids.get(row["gpu_id"], 0)
        for source, convert, samples in plan:
            value = row[source]
            if value is not None:
                samples.append((series, convert(value)))
    return out
