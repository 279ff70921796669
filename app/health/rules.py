"""The default health mapping: which signal makes a GPU or node Degraded or Unhealthy, with the
source each rule comes from. Settings (``FLEETWATCH_HEALTH_*``) override the Xid lists and the
thresholds; :func:`rules_from_settings` builds the table in force.

Xid meanings and recommended actions are from NVIDIA's "Xid Errors" catalog (NVIDIA GPU
Deployment and Management Documentation, docs.nvidia.com/deploy/xid-errors); clock event reason
bits from the NVML API Reference, "Clocks Event Reasons" (``nvmlClocksEventReason*``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.config import Settings


class State(StrEnum):
    """A health state; :data:`SEVERITY` orders them for "worst of"."""

    HEALTHY = "healthy"
    DEGRADED = "degraded"
    UNKNOWN = "unknown"
    UNHEALTHY = "unhealthy"


#: Worst-of order: no data (unknown) ranks above a known degradation, below a known fault.
SEVERITY = {State.HEALTHY: 0, State.DEGRADED: 1, State.UNKNOWN: 2, State.UNHEALTHY: 3}


def worst(states: list[State], default: State = State.HEALTHY) -> State:
    """The most severe of ``states`` (``default`` when there are none)."""
    return max(states, key=SEVERITY.__getitem__, default=default)


#: Xids that make a GPU Unhealthy (NVIDIA "Xid Errors" catalog: reset or drain the GPU).
XID_UNHEALTHY: dict[int, str] = {
    48: "double-bit ECC error",
    62: "internal micro-controller halt",
    64: "ECC page retirement or row-remapping failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    95: "uncontained ECC error",
}
#: Xids that make a GPU Degraded (the GPU works but needs attention).
XID_DEGRADED: dict[int, str] = {
    63: "ECC page retirement or row-remapping recording event",
    94: "contained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "ECC unrecovered error",
    143: "GPU initialization failure",
}
#: Application Xids: listed as events, never a change of health (the catalog attributes them
#: to user code: 13 graphics engine exception, 31 GPU memory page fault, 43 GPU stopped
#: processing).
XID_IGNORED: dict[int, str] = {
    13: "graphics engine exception (application)",
    31: "GPU memory page fault (application)",
    43: "GPU stopped processing (application)",
    # The catalog's ROBUST_CHANNEL_PREEMPTIVE_REMOVAL (bucket WORKFLOW_XID_45: follow the Xid
    # it comes with): the driver tearing down channels after an earlier error, or because the
    # application was killed (Ctrl-C, SIGKILL, a GPU reset). Never a fault of its own.
    45: "preemptive cleanup after an earlier error or a killed application",
}
#: Xids that are informational once and a finding when repeated: Degraded when they come in
#: at least ``xid_watch_bursts`` separate bursts on one GPU within the event window. Xid 92,
#: EXCESSIVE_SBE_INTERRUPTS (catalog: immediate action IGNORE, investigatory action
#: CONTACT_SUPPORT): the corrected single-bit ECC rate is high; once is noise the hardware
#: corrected, again and again is memory wearing out.
XID_WATCHED: dict[int, str] = {
    92: "high single-bit ECC error rate",
}

#: ``clocks_event_reasons`` bits (NVML): thermal = SW thermal 0x20, HW thermal 0x40, HW slowdown
#: 0x8; power = SW power cap 0x4, HW power brake 0x80.
THERMAL_BITS = 0x20 | 0x40 | 0x8
POWER_BITS = 0x4 | 0x80
#: The power bits that make a GPU Degraded: the HW power brake (a PSU, the power shelf or the
#: rack's budget asserting it). The SW power cap (0x4) is the GPU at its power limit, as a
#: busy GPU runs under a training job's full load: normal, charted as ``power_throttled``,
#: never a health finding (it made busy GPUs Degraded, and would have paged, every minute).
HEALTH_POWER_BITS = 0x80
#: A single sample never makes throttling "sustained".
MIN_THROTTLE_SAMPLES = 3

#: Event kinds the agent sends for a GPU that NVML reports lost (``GPU_IS_LOST``).
LOST_EVENT_KINDS = frozenset({"gpu_lost", "gpu_fallen_off_bus"})
#: ``gpu.state`` values that are a lost GPU; ``missing`` (absent from the inventory) is its own.
LOST_GPU_STATES = frozenset({"lost", "unknown_error"})


@dataclass(frozen=True)
class HealthRules:
    """The mapping in force: Xid lists, windows and thresholds."""

    xid_unhealthy: frozenset[int]
    xid_degraded: frozenset[int]
    xid_ignored: frozenset[int]
    xid_watched: frozenset[int] = frozenset(XID_WATCHED)
    #: Separate bursts (``burst_quiet_s`` apart) within the event window that make a watched
    #: Xid a finding.
    xid_watch_bursts: int = 2
    stale_after_s: float = 120.0
    #: A node's clock further than this off the server's (its latest batch's ``sent_at``
    #: against the receive time) is a finding: ahead, ingest refuses its readings
    #: (``FLEETWATCH_FUTURE_TOLERANCE_S``).
    future_tolerance_s: float = 300.0
    event_window_s: float = 86400.0
    throttle_window_s: float = 60.0
    throttle_min_fraction: float = 0.8
    disk_wait_s: float = 0.05
    nfs_rtt_s: float = 0.1
    escalate_after: int = 2
    escalation_window_s: float = 7 * 86400.0
    #: Events closer than this are one burst (NVIDIA Fleet Intelligence: 3 minutes).
    burst_quiet_s: float = 180.0
    #: A burst (and an incident, :mod:`app.incidents`) spans at most this long
    #: (``FLEETWATCH_INCIDENT_MAX_S``): a storm that never pauses is a new one after it, so
    #: its repeats escalate and count as repeat offences.
    burst_max_s: float = 3600.0
    #: An ACTIVE IB port whose link went down this many times within ``ib_flap_window_s``
    #: (its link_downed_count) is flapping.
    ib_flap_downs: int = 2
    ib_flap_window_s: float = 3600.0
    #: A self-test event counts this long (not the event window): the test fault clears by
    #: itself, and its alerts resolve.
    self_test_window_s: float = 900.0

    def xid_state(self, xid: int, *, bursts: int = 1) -> State | None:
        """The state an Xid seen in ``bursts`` separate bursts (on one GPU, within the event
        window) causes; None for an ignored Xid, and for a watched one seen in fewer than
        ``xid_watch_bursts`` bursts. The lists are read Unhealthy, Degraded, ignored, watched,
        so moving an Xid to a more severe list is enough to override it. An Xid in no list is
        Degraded: an unclassified fault is never healthy."""
        if xid in self.xid_unhealthy:
            return State.UNHEALTHY
        if xid in self.xid_degraded:
            return State.DEGRADED
        if xid in self.xid_ignored:
            return None
        if xid in self.xid_watched:
            return State.DEGRADED if bursts >= self.xid_watch_bursts else None
        return State.DEGRADED


def xid_text(xid: int) -> str:
    """The catalog's short meaning of ``xid`` (empty when the table does not list it)."""
    return {**XID_WATCHED, **XID_DEGRADED, **XID_UNHEALTHY, **XID_IGNORED}.get(xid, "")


DEFAULT_RULES = HealthRules(
    xid_unhealthy=frozenset(XID_UNHEALTHY),
    xid_degraded=frozenset(XID_DEGRADED),
    xid_ignored=frozenset(XID_IGNORED),
)


def rules_from_settings(settings: Settings) -> HealthRules:
    """The defaults with the ``health_*`` settings applied (a list setting replaces its list)."""

    def pick(value: list[int] | None, default: frozenset[int]) -> frozenset[int]:
        return default if value is None else frozenset(value)

    return HealthRules(
        xid_unhealthy=pick(settings.health_xid_unhealthy, DEFAULT_RULES.xid_unhealthy),
        xid_degraded=pick(settings.health_xid_degraded, DEFAULT_RULES.xid_degraded),
        xid_ignored=pick(settings.health_xid_ignored, DEFAULT_RULES.xid_ignored),
        stale_after_s=settings.stale_after_s,
        future_tolerance_s=settings.future_tolerance_s,
        event_window_s=settings.health_event_window_s,
        throttle_window_s=settings.health_throttle_window_s,
        throttle_min_fraction=settings.health_throttle_min_fraction,
        disk_wait_s=settings.health_disk_wait_s,
        nfs_rtt_s=settings.health_nfs_rtt_s,
        escalate_after=settings.health_escalate_after,
        escalation_window_s=settings.health_escalation_window_s,
        burst_max_s=settings.incident_max_s,
    )
