"""Every reason a health check can give (``ReasonOut.code``), with the state it sets and what it
means: the one list the default alert pack is held against, so that every finding that makes a
node or GPU Degraded or Unhealthy also pages (``tests/app/test_health_reasons_paged.py`` fails
for a code no default rule covers).

The checks (:mod:`app.health.checks`, :mod:`app.health.service`) name codes only through the
constants here. Xid reasons are one family, ``xid_<n>`` (:func:`xid_code`), whose state comes
from the Xid lists in force (:class:`app.health.rules.HealthRules`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from app.health.rules import State


@dataclass(frozen=True)
class Reason:
    """A reason code: ``level`` where it is reported (a node's own reasons, or a GPU's),
    ``state`` the state it sets (for the Xid family: the worst), ``meaning`` in words."""

    code: str
    level: Literal["node", "gpu"]
    state: State
    meaning: str


STALE = "stale"
GPU_LOST = "gpu_lost"
GPU_MISSING = "gpu_missing"
GPU_UNRESPONSIVE = "gpu_unresponsive"
REMAPPED_ROWS_FAILURE = "remapped_rows_failure"
REMAPPED_ROWS_PENDING = "remapped_rows_pending"
PCIE_DOWNTRAINED = "pcie_downtrained"
THERMAL_THROTTLE = "thermal_throttle"
POWER_THROTTLE = "power_throttle"
NVLINK_DOWN = "nvlink_down"
IB_PORT_DOWN = "ib_port_down"
IB_PORT_FLAPPING = "ib_port_flapping"
STORAGE_LATENCY_HIGH = "storage_latency_high"
CLOCK_SKEW = "clock_skew"
#: The Xid family, as a health rule's ``codes`` pattern names it.
XID_FAMILY = "xid_*"

REASONS: tuple[Reason, ...] = (
    Reason(STALE, "node", State.UNKNOWN, "no telemetry for longer than stale_after_s, or never"),
    Reason(
        GPU_LOST,
        "gpu",
        State.UNHEALTHY,
        "GPU lost or fallen off the bus (NVML state, or a lost event; node-level when the "
        "event names no known GPU)",
    ),
    Reason(GPU_MISSING, "gpu", State.UNHEALTHY, "GPU absent from the node's latest inventory"),
    Reason(
        GPU_UNRESPONSIVE,
        "gpu",
        State.UNHEALTHY,
        "no sample from the GPU for stale_after_s while the node's other GPUs report (an "
        "NVML call on it hangs or fails)",
    ),
    Reason(
        XID_FAMILY,
        "gpu",
        State.UNHEALTHY,
        "an Xid in the event window (Unhealthy or Degraded per the Xid lists)",
    ),
    Reason(REMAPPED_ROWS_FAILURE, "gpu", State.UNHEALTHY, "row remapping failed"),
    Reason(REMAPPED_ROWS_PENDING, "gpu", State.DEGRADED, "remapped rows wait for a GPU reset"),
    Reason(PCIE_DOWNTRAINED, "gpu", State.DEGRADED, "PCIe link below its maximum"),
    Reason(THERMAL_THROTTLE, "gpu", State.DEGRADED, "thermal throttling sustained"),
    Reason(POWER_THROTTLE, "gpu", State.DEGRADED, "power throttling sustained"),
    Reason(NVLINK_DOWN, "gpu", State.UNHEALTHY, "an NVLink reads down"),
    Reason(IB_PORT_DOWN, "node", State.UNHEALTHY, "an InfiniBand/RoCE port left ACTIVE"),
    Reason(
        IB_PORT_FLAPPING,
        "node",
        State.DEGRADED,
        "an InfiniBand/RoCE port went down and up again repeatedly (link_downed_count)",
    ),
    Reason(STORAGE_LATENCY_HIGH, "node", State.DEGRADED, "a disk's wait or an NFS RTT is high"),
    Reason(
        CLOCK_SKEW,
        "node",
        State.UNKNOWN,
        "the node's clock is off the server's by more than future_tolerance_s: ahead, its "
        "readings are refused; behind, they are stored at the wrong times",
    ),
)
CODES = {reason.code: reason for reason in REASONS}


def xid_code(xid: int) -> str:
    """The reason code of ``xid``: ``xid_<n>``, of the :data:`XID_FAMILY`."""
    return f"xid_{xid}"


def names_a_reason(code: str) -> bool:
    """Whether a rule's ``code`` can match a reason: a registered code, ``xid_<n>`` (``n``
    without leading zeros, as the checks write it), or a prefix ending in ``*`` of one of
    those (``xid_*``, ``gpu_*``)."""
    if code.endswith("*"):
        prefix = code[:-1]
        if prefix.startswith("xid_"):
            digits = prefix[4:]
            return digits == "" or (digits.isdigit() and digits[0] != "0")
        return bool(prefix) and any(c.startswith(prefix) for c in (*CODES, "xid_"))
    family = family_of(code)
    return family is not None and (family.code != XID_FAMILY or not code[4:].startswith("0"))


def family_of(code: str) -> Reason | None:
    """The registered reason ``code`` belongs to (an ``xid_<n>`` to the Xid family); None for
    a code no check gives."""
    if code in CODES:
        return CODES[code]
    if code.startswith("xid_") and code[4:].isdigit():
        return CODES[XID_FAMILY]
    return None
