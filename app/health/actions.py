"""The suggested repair action of every health finding, with an escalation ladder.

Each reason code (:mod:`app.health.reasons`) maps to one action of a small vocabulary ordered
by how much it takes out of service (:data:`RANK`). Xids follow NVIDIA's Xid catalog
("Analyzing Xid Errors with the Xid Catalog", docs.nvidia.com/deploy/xid-errors, the
"Resolution Bucket (Immediate Action)" column: ``RESTART_APP``, ``RESET_GPU``, ``RESTART_BM``,
``CONTACT_SUPPORT``, ``WORKFLOW_NVLINK_ERR`` …); Xid 154 carries the driver's own recovery
action in its message ("GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot
Required)"), which wins over the table.

Escalation, as gpud escalates a reboot to hardware inspection after repeated reboots for the
same Xid and NVSentinel escalates a repeated Xid 48 on one GPU: the occurrences of the same
finding on the same GPU are counted as bursts (events closer than ``burst_quiet_s`` are one
burst, as NVIDIA Fleet Intelligence groups an Xid burst after 3 minutes of silence) within the
escalation window; when more than ``escalate_after`` bursts came before the current one, each
having been followed by the suggested repair, the repair did not hold: the action becomes
``inspect_hardware``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from app.health import reasons
from app.health.schemas import ActionOut

#: The vocabulary, least to most disruptive; :func:`strongest` picks by this rank.
RANK: dict[str, int] = {
    "watch": 0,
    "restart_app": 1,
    "investigate": 1,
    "check_agent": 2,
    "check_cooling": 2,
    "check_power": 2,
    "check_storage": 2,
    "check_fabric": 3,
    "reset_gpu": 4,
    "reboot_node": 5,
    "inspect_hardware": 6,
}

#: What each action asks, in words (a reason's own text may say more).
TITLES: dict[str, str] = {
    "watch": "No repair now: watch for a recurrence",
    "restart_app": "Restart the affected job; the GPU needs no repair",
    "investigate": "Look the finding up and run DCGM diagnostics if it recurs",
    "check_agent": "Check that the node is up and its agent runs",
    "check_cooling": "Check the node's cooling",
    "check_power": "Check the node's power feed",
    "check_storage": "Check the storage path",
    "check_fabric": "Check the link's cable, transceiver and switch port",
    "reset_gpu": "Drain the GPU's jobs and reset the GPU",
    "reboot_node": "Drain the node and reboot it",
    "inspect_hardware": "Drain the node for hardware inspection (DCGM diagnostics, then RMA)",
}

#: An action as the repair it stands for, in an escalation's words.
REPAIRS: dict[str, str] = {
    "restart_app": "job restart",
    "investigate": "look",
    "check_fabric": "link check",
    "reset_gpu": "GPU reset",
    "reboot_node": "reboot",
}

CATALOG = "NVIDIA Xid catalog"
NOT_LISTED = "Xid not in the catalog table"
FLEETWATCH = "Fleetwatch"


@dataclass(frozen=True)
class XidAction:
    """One Xid's entry: the catalog's immediate-action bucket, our action, the words, and how
    many earlier bursts escalate it (None: the ladder's default)."""

    bucket: str
    action: str
    text: str
    escalate_after: int | None = None
    #: False: repeats never escalate (Xid 154 reports a change of the driver's recovery
    #: action, not a fault of its own).
    counted: bool = True


#: Xid → catalog bucket and action, for the Xids Fleetwatch's health lists name and the common
#: application and NVLink ones. An Xid not listed gets :data:`UNLISTED_XID`.
XID_ACTIONS: dict[int, XidAction] = {
    8: XidAction("RESTART_APP", "restart_app", "GPU stopped processing: restart the job"),
    13: XidAction("RESTART_APP", "restart_app", "graphics engine exception: debug the job"),
    31: XidAction("RESTART_APP", "restart_app", "GPU memory page fault: debug the job"),
    43: XidAction("RESTART_APP", "restart_app", "GPU stopped processing: restart the job"),
    45: XidAction(
        "WORKFLOW_XID_45",
        "watch",
        "preemptive cleanup of the GPU's channels after an earlier Xid or a killed "
        "application: no repair of its own; follow the Xid it came with",
        counted=False,
    ),
    48: XidAction(
        "RESET_GPU",
        "reset_gpu",
        "double-bit ECC: drain the GPU and reset it (row remapping applies on reset)",
        escalate_after=1,
    ),
    61: XidAction("RESET_GPU", "reset_gpu", "micro-controller breakpoint: reset the GPU"),
    62: XidAction("RESET_GPU", "reset_gpu", "micro-controller halt: reset the GPU"),
    63: XidAction(
        "RESET_GPU",
        "reset_gpu",
        "row remapping recorded: reset the GPU when its jobs end to apply it",
    ),
    64: XidAction(
        "CONTACT_SUPPORT",
        "inspect_hardware",
        "row remapping failed: the GPU has no spare rows left; drain it for RMA",
    ),
    74: XidAction(
        "WORKFLOW_NVLINK_ERR",
        "reset_gpu",
        "NVLink error: reset the GPU; if the link errs again, check the NVSwitch tray",
    ),
    79: XidAction(
        "RESTART_BM",
        "reboot_node",
        "fallen off the bus: drain the node and power-cycle it (a GPU reset cannot reach it)",
    ),
    92: XidAction(
        "IGNORE",
        "watch",
        "high single-bit ECC error rate, corrected by the GPU: watch the ECC counters; "
        "repeated, it escalates (catalog investigatory action: CONTACT_SUPPORT)",
        escalate_after=1,
    ),
    94: XidAction(
        "RESTART_APP",
        "restart_app",
        "contained ECC error: restart the job; reset the GPU when idle to remap the row",
    ),
    95: XidAction("RESET_GPU", "reset_gpu", "uncontained ECC error: drain the GPU and reset it"),
    119: XidAction(
        "RESET_GPU", "reset_gpu", "GSP RPC timeout: reset the GPU (reboot if reset fails)"
    ),
    120: XidAction("RESET_GPU", "reset_gpu", "GSP error: reset the GPU (reboot if reset fails)"),
    140: XidAction("RESET_GPU", "reset_gpu", "unrecovered ECC error: drain and reset the GPU"),
    143: XidAction("RESTART_BM", "reboot_node", "GPU initialization failure: reboot the node"),
    **{
        xid: XidAction(
            "WORKFLOW_NVLINK5_ERR",
            "reset_gpu",
            "NVLink5 error: reset the GPU; if it recurs, check the NVLink cable cartridge/tray",
        )
        for xid in (144, 145, 146, 147, 148, 149, 150)
    },
    154: XidAction(
        "XID_154_EVAL",
        "reset_gpu",
        "the driver asks for a recovery action: follow it",
        counted=False,
    ),
}
UNLISTED_XID = XidAction(
    "",
    "investigate",
    "look the Xid up in NVIDIA's catalog; run dcgmi diag -r 2 if it recurs",
)
#: The longest driver's words of an Xid 154 message carried into an action's text.
MAX_WORDS = 80

#: Xid 154's recovery action codes (NVML ``nvmlDeviceGetGpuRecoveryAction``): 1 GPU reset
#: required, 2 node reboot required, 3 drain peer-to-peer, 4 drain and reset.
RECOVERY_ACTIONS: dict[int, str] = {
    0: "watch",
    1: "reset_gpu",
    2: "reboot_node",
    3: "reset_gpu",
    4: "reset_gpu",
}
_RECOVERY = re.compile(
    r"recovery action changed from\s+\S+(?:\s*\([^)]*\))?\s+to\s+0x([0-9a-fA-F]+)"
    r"(?:\s*\(([^)]*)\))?",
    re.IGNORECASE,
)

#: Reason code → (action, words) for every non-Xid reason (``tests`` hold that each code of
#: :data:`app.health.reasons.REASONS` has one).
REASON_ACTIONS: dict[str, tuple[str, str]] = {
    reasons.STALE: (
        "check_agent",
        "check the node answers and its fleetwatch-agent runs, then the network to the server",
    ),
    reasons.CLOCK_SKEW: (
        "check_agent",
        "fix the node's clock: NTP/chrony must run and be in sync (timedatectl; chronyc "
        "tracking); the agent's readings are refused or misdated until it is",
    ),
    reasons.GPU_LOST: (
        "reboot_node",
        "the GPU stopped answering: drain the node and power-cycle it (as for Xid 79)",
    ),
    reasons.GPU_MISSING: (
        "reboot_node",
        "the GPU left the inventory: reboot the node; still absent, reseat or replace it",
    ),
    reasons.GPU_UNRESPONSIVE: (
        "reset_gpu",
        "an NVML call on the GPU hangs: drain it and reset it (nvidia-smi -r); if the reset "
        "hangs too, reboot the node",
    ),
    reasons.REMAPPED_ROWS_FAILURE: (
        "inspect_hardware",
        "row remapping failed: the GPU has no spare rows left; drain it for RMA",
    ),
    reasons.REMAPPED_ROWS_PENDING: (
        "reset_gpu",
        "reset the GPU when its jobs end to apply the remapped rows",
    ),
    reasons.PCIE_DOWNTRAINED: (
        "check_fabric",
        "the PCIe link trained below its maximum: reseat the GPU or riser at the next "
        "maintenance (a reboot retrains the link)",
    ),
    reasons.THERMAL_THROTTLE: (
        "check_cooling",
        "check fans, airflow and inlet temperature; compare with the node's neighbours",
    ),
    reasons.POWER_THROTTLE: (
        "check_power",
        "the HW power brake is asserted: check PSUs, the power shelf and the rack's budget",
    ),
    reasons.NVLINK_DOWN: (
        "reset_gpu",
        "reset the GPU to retrain the link; if it stays down, check the NVSwitch tray or "
        "baseboard (NVIDIA WORKFLOW_NVLINK_ERR)",
    ),
    reasons.IB_PORT_DOWN: (
        "check_fabric",
        "reseat or replace the cable or transceiver, then check the switch port",
    ),
    reasons.IB_PORT_FLAPPING: (
        "check_fabric",
        "a port that keeps going down: replace its cable or transceiver, then watch "
        "link_downed_count stay flat",
    ),
    reasons.STORAGE_LATENCY_HIGH: (
        "check_storage",
        "check the disk's health (SMART, queue) or the NFS server and its network",
    ),
}
#: Reasons whose repeats escalate like Xids (counted from the same events).
COUNTED = frozenset({reasons.GPU_LOST})


#: Catalog Xids that leave the running jobs alone: the cleanup after an earlier error or a
#: killed application (45: the job was already ending), a row remapping recorded for the next
#: reset (63), a high single-bit ECC rate (92).
NOT_JOB_FATAL = frozenset({45, 63, 92})


def ends_jobs(xid: int) -> bool:
    """Whether Xid ``xid`` ends the jobs on its GPU: every catalog Xid that asks for a
    restart of the application or more (:data:`XID_ACTIONS`) but :data:`NOT_JOB_FATAL`; an
    Xid the table does not list is not claimed to."""
    return xid in XID_ACTIONS and xid not in NOT_JOB_FATAL


def bursts(times: Iterable[datetime], quiet_s: float, max_s: float | None = None) -> int:
    """How many bursts ``times`` (any order) make: a gap longer than ``quiet_s`` seconds
    starts a new one, and so does a time more than ``max_s`` seconds after its burst's first
    (a storm that never pauses is not one burst forever; ``None``: no limit). 0 for no
    times."""
    count, last, start = 0, None, None
    for at in sorted(times):
        new = last is None or (at - last).total_seconds() > quiet_s
        if not new and max_s is not None and start is not None:
            new = (at - start).total_seconds() > max_s
        if new:
            count += 1
            start = at
        last = at
    return count


def recovery_action(message: str | None) -> tuple[int, str] | None:
    """(code, driver's words) of an Xid 154 message's new recovery action, or None when the
    message has none in the known form."""
    if not message:
        return None
    m = _RECOVERY.search(message)
    if m is None:
        return None
    digits = m.group(1).lstrip("0") or "0"
    if len(digits) > 8:  # not a 32-bit code: garbage
        return None
    return int(digits, 16), (m.group(2) or "").strip()[:MAX_WORDS]


def suggest(
    code: str,
    *,
    occurrences: int = 0,
    escalate_after: int = 2,
    window_s: float = 7 * 86400,
    message: str | None = None,
    gpu: str | None = None,
) -> ActionOut:
    """The suggested action of a reason ``code`` (``xid_<n>`` included).

    ``occurrences`` are its bursts on the same GPU within the escalation window (the current
    one included; 0 when not counted); ``escalate_after`` earlier bursts (each presumably
    repaired) escalate a lesser action to ``inspect_hardware``. A catalog Xid whose entry sets
    its own ``escalate_after`` escalates from ``watch`` too (Xid 92: a high single-bit ECC
    rate again and again is memory wearing out). ``message`` is the newest event's text
    (Xid 154's recovery action). ``gpu`` names the GPU the bursts were counted on
    (:func:`gpu_words`: ``GPU 3 (GPU-8f…, PCI 0000:3b:00.0)``), so the escalation's text says
    which GPU wherever it is shown, a node's alert included. Unknown codes get ``investigate``.
    """
    escalate: int | None = escalate_after
    from_watch = False
    source = FLEETWATCH
    if code.startswith("xid_") and code[4:].isdigit():
        xid = int(code[4:])
        entry = XID_ACTIONS.get(xid, UNLISTED_XID)
        action, text = entry.action, entry.text
        source = f"{CATALOG}: {entry.bucket}" if entry.bucket else f"{FLEETWATCH}: {NOT_LISTED}"
        if entry.escalate_after is not None:
            escalate = min(escalate_after, entry.escalate_after)
            from_watch = True
        if not entry.counted:
            escalate = None
        found = recovery_action(message) if xid == 154 else None
        if found is not None:
            value, words = found
            action = RECOVERY_ACTIONS.get(value, "investigate")
            said = f"0x{value:x}" + (f" ({words})" if words else "")
            title = TITLES[action]
            text = f"the driver's recovery action is {said}: {title[0].lower()}{title[1:]}"
    elif code in REASON_ACTIONS:
        action, text = REASON_ACTIONS[code]
    else:
        action, text = "investigate", TITLES["investigate"][0].lower() + TITLES["investigate"][1:]
    earlier = max(occurrences - 1, 0)
    escalates = escalate is not None and earlier >= escalate
    lowest = 0 if from_watch else 1
    if escalates and lowest <= RANK[action] < RANK["inspect_hardware"]:
        where = gpu or "the same GPU"
        seen = f"seen in {occurrences} separate bursts within {_span(window_s)} on {where}"
        why = (
            "it keeps coming back"
            if action == "watch"
            else f"the {REPAIRS.get(action, 'repair')} it asks for does not hold"
        )
        return ActionOut(
            code="inspect_hardware",
            title=TITLES["inspect_hardware"],
            text=f"{seen}: {why}; drain for dcgmi diag -r 3, then RMA or NVIDIA support",
            source=f"{source}, escalated by {FLEETWATCH}",
            escalated_from=action,
            occurrences=occurrences,
        )
    return ActionOut(
        code=action,
        title=TITLES[action],
        text=text,
        source=source,
        occurrences=occurrences or None,
    )


def gpu_words(index: int | None, uuid: str | None, pci_bus_id: str | None) -> str:
    """A GPU as an action's text names it: ``GPU 3 (GPU-8f…, PCI 0000:3b:00.0)``, with what
    is known (``GPU 3``, ``the GPU at PCI 0000:3b:00.0``)."""
    known = [w for w in (uuid, f"PCI {pci_bus_id}" if pci_bus_id else None) if w]
    if index is not None:
        return f"GPU {index}" + (f" ({', '.join(known)})" if known else "")
    if uuid:
        return uuid + (f" (PCI {pci_bus_id})" if pci_bus_id else "")
    return f"the GPU at PCI {pci_bus_id}" if pci_bus_id else "the same GPU"


def _span(seconds: float) -> str:
    """A window in words: "7 days", "24 hours", "90 minutes"."""
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            n = int(seconds // size)
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return f"{seconds:g} s"


def strongest(actions: Iterable[ActionOut | None]) -> ActionOut | None:
    """The most disruptive of ``actions`` (the first of equals), None when there is none."""
    best: ActionOut | None = None
    for action in actions:
        if action is not None and (best is None or RANK[action.code] > RANK[best.code]):
            best = action
    return best


def sentence(action: ActionOut | None) -> str:
    """``action`` as the one line an alert or chat message carries ("" for none)."""
    if action is None:
        return ""
    return f"Suggested action: {action.text} ({action.source})."
