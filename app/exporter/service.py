"""One scrape: the DCGM families of every fresh GPU, then Fleetwatch's counters and gauges."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric
from sqlalchemy.orm import Session

from app.exporter import counters, gauges, gpus, text


class _Chain:
    """What ``generate_latest`` reads (anything with ``collect()``): the counters' source,
    then families computed at the scrape."""

    def __init__(self, source: Any, families: Iterable[Metric]) -> None:
        self.source = source
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.source.collect()
        yield from self.families


def exposition(
    session: Session, *, stale_after_s: float, node_labels: Sequence[str], now: datetime
) -> bytes:
    """The ``/metrics`` body (:data:`app.exporter.text.CONTENT_TYPE`) as of ``now``: four
    statements whatever the fleet's size (fresh GPUs, last Xids, health states, firing
    alerts)."""
    dcgm = text.render(
        gpus.families(session, stale_after_s=stale_after_s, now=now, node_labels=node_labels)
    )
    own = gauges.families(session, stale_after_s=stale_after_s, now=now)
    return dcgm.encode() + generate_latest(_Chain(counters.source(), own))
