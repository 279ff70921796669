"""Fleetwatch's gauges, computed at each scrape through the services that own the data: nodes
per health state (:func:`app.health.current.count_stored_states`) and firing alerts per
severity (:func:`app.alerts.service.firing_by_severity`). One statement each; every state and
severity is served, 0 included, so a series never vanishes when its count drops to none."""

from __future__ import annotations

from datetime import datetime

from prometheus_client.core import GaugeMetricFamily
from sqlalchemy.orm import Session

from app.alerts import service as alert_service
from app.health import current as health_current


def families(session: Session, *, stale_after_s: float, now: datetime) -> list[GaugeMetricFamily]:
    """``fleetwatch_nodes{state}`` and ``fleetwatch_alerts_firing{severity}`` as of ``now``."""
    nodes = GaugeMetricFamily(
        "fleetwatch_nodes",
        "Nodes (not retired, in service or not) per stored health state, staleness applied "
        "(a node not evaluated yet is unknown).",
        labels=["state"],
    )
    states = health_current.count_stored_states(session, stale_after_s=stale_after_s, now=now)
    for state, count in states.items():
        nodes.add_metric([state], count)
    alerts = GaugeMetricFamily(
        "fleetwatch_alerts_firing",
        "Firing alerts per rule severity (silenced, acknowledged and inhibited ones included).",
        labels=["severity"],
    )
    for severity, count in alert_service.firing_by_severity(session).items():
        alerts.add_metric([severity], count)
    return [nodes, alerts]
