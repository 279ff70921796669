"""What makes the alert evaluator run between its timer ticks, and which rules it then runs.

A stored batch that carries an event (Xid, GPU lost …) or a GPU that is not ``ok`` wakes the
evaluator (:func:`batch_wakes_alerts`, called by the ingest router after its commit); so does a
refresh of the stored health that changed a node's state (:class:`AlertingHealthRefresher`:
NVLink down, a GPU lost or missing, a critical Xid, as :mod:`app.health` sees them). A woken
evaluation runs only the rules such a change can make true (:func:`is_event_driven`); windowed
thresholds, rates, absence, drift and ``for`` expiry stay on the timer.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from app.alerts.spec import EventCondition, HealthCondition, RuleSpec, ThresholdCondition
from app.health import state as health_state
from app.health.jobs import HealthRefresher

#: Threshold metrics read from a GPU's or node's current state (not from a window of samples):
#: a batch that changes the state changes them.
STATE_METRICS = frozenset({"gpu_lost", "gpu_lost_count", "gpu_missing_count"})


def is_event_driven(spec: RuleSpec) -> bool:
    """Whether a stored batch can make the rule's condition true at once: ``event`` and
    ``health`` rules, and thresholds on :data:`STATE_METRICS`."""
    condition = spec.condition
    if isinstance(condition, EventCondition | HealthCondition):
        return True
    return isinstance(condition, ThresholdCondition) and condition.metric in STATE_METRICS


def batch_wakes_alerts(batch: Any, result: Any) -> bool:
    """Whether a stored batch should wake the evaluator: it stored an event, or it lists a GPU
    whose state is not ``ok``, or it left a known GPU out.

    Args:
        batch: the :class:`app.ingest.rows.ParsedBatch` (its ``head.gpus`` states).
        result: the :class:`app.ingest.schemas.IngestResult` of storing it.
    """
    if result.replayed:
        return False
    if result.events_stored or result.gpus_missing:
        return True
    return any(gpu.state != "ok" for gpu in batch.head.gpus)


#: A wake-up naming more nodes than this evaluates the whole fleet (a NOTIFY payload holds
#: at most 8,000 bytes; past a few hundred nodes one fleet read costs less anyway).
MAX_WAKE_NODES = 500
_PAYLOAD_PREFIX = "nodes:"
#: The largest node id (``node.id`` is a 32-bit integer).
MAX_NODE_ID = 2**31 - 1


def wake_payload(node_ids: Collection[int] | None) -> str:
    """The ``NOTIFY`` payload naming ``node_ids`` (``nodes:1,2,3``; empty: every node)."""
    if node_ids is None or len(node_ids) > MAX_WAKE_NODES:
        return ""
    return _PAYLOAD_PREFIX + ",".join(str(i) for i in sorted(node_ids))


def parse_wake_payload(payload: str) -> set[int] | None:
    """The nodes a :func:`wake_payload` names; None (every node) for an empty payload or one
    this version does not understand: anything but plain decimal ids that a node id can be
    (1 to 2³¹ − 1; any role that can connect may ``NOTIFY``). A wake-up is a hint: when in
    doubt, evaluate all."""
    if not payload.startswith(_PAYLOAD_PREFIX):
        return None
    parts = payload[len(_PAYLOAD_PREFIX) :].split(",")
    if not 0 < len(parts) <= MAX_WAKE_NODES:
        return None
    ids = set()
    for part in parts:
        if not (part.isascii() and part.isdigit() and len(part) <= 10):
            return None
        node_id = int(part)
        if not 0 < node_id <= MAX_NODE_ID:
            return None
        ids.add(node_id)
    return ids


class AlertingHealthRefresher(HealthRefresher):
    """The stored-health refresher (:class:`app.health.jobs.HealthRefresher`) that also calls
    ``on_change`` with the ids of the nodes whose health changed after a refresh that changed
    one, so health rules see the new state as soon as it is stored rather than at the
    evaluator's next tick (and evaluate those nodes only)."""

    def __init__(
        self, *args: Any, on_change: Callable[[Collection[int]], None], **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.on_change = on_change

    def run_once(self) -> health_state.RefreshReport | None:
        """One refresh (see the parent); ``on_change`` after its commit when a node changed."""
        report = super().run_once()
        if report is not None and report.changed:
            self.on_change(report.changed_ids)
        return report
