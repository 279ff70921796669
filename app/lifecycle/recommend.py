"""When Fleetwatch recommends taking a node out of service, and the reason it gives.

An incident whose suggested repair drains the node or its GPU (:mod:`app.health.actions`:
``reset_gpu``, ``reboot_node``, ``inspect_hardware``) recommends quarantining the node while
it is in service: one click on the incident page accepts it (``recommend`` mode, the default
of issue 17's automation).
"""

from __future__ import annotations

#: Suggested repairs that need the node (or its GPU) drained first.
QUARANTINE_ACTIONS = frozenset({"reset_gpu", "reboot_node", "inspect_hardware"})


def recommends_quarantine(action_code: str) -> bool:
    """Whether a finding with this suggested repair recommends quarantining its node."""
    return action_code in QUARANTINE_ACTIONS


def incident_reason(incident_id: int, xids: list[int], gpus: list[int], action_text: str) -> str:
    """The reason of a quarantine for an incident, e.g. ``incident #12: Xid 79 on GPU 3 —
    Drain the node and reboot it`` (Slurm shows it after ``fleetwatch:``)."""
    what = []
    if xids:
        what.append("Xid " + ", ".join(str(x) for x in xids))
    if gpus:
        what.append(("GPU " if len(gpus) == 1 else "GPUs ") + ", ".join(str(g) for g in gpus))
    head = f"incident #{incident_id}" + (": " + " on ".join(what) if what else "")
    return f"{head} — {action_text}" if action_text else head
