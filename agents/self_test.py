"""The alert-path self-test: a synthetic Xid from this node, marked ``test``.

``fleetwatch-agent --once --inject-test-xid 79 [--inject-gpu 0]`` sends one batch holding a
made-up NVRM Xid line for one GPU of the node, flagged ``"test": true``. The server takes it
through health, the default rules, incidents and notifications, every step marked TEST, for
its self-test window (15 minutes), after which it clears by itself; it never counts as a real
fault (escalation, repeat offenders, event rules). An SRE runs it after each upgrade to prove
the path from a node to the on-call channel (docs/health.md, "Self-test"). As DCGM's error
injection and gpud's ``inject-fault`` do, but never touching the GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from agents.payload import EventDict, GpuInfo, make_event


def self_test_xid_event(
    inventory: Sequence[GpuInfo], *, xid: int, gpu_index: int, now: datetime
) -> EventDict:
    """The self-test event: an Xid ``xid`` line for the GPU of ``inventory`` at ``gpu_index``,
    in the kernel's form, marked ``test``.

    Raises:
        ValueError: no GPU of that index (the message lists the indexes there are).
    """
    gpu = next((g for g in inventory if g["index"] == gpu_index), None)
    if gpu is None:
        there = ", ".join(str(g["index"]) for g in inventory) or "none"
        raise ValueError(f"--inject-gpu {gpu_index}: no GPU of that index (the node has {there})")
    message = (
        f"NVRM: Xid ({_kernel_address(gpu.get('pci_bus_id'))}): {xid}, fleetwatch self-test "
        "from fleetwatch-agent --inject-test-xid: not a real fault"
    )
    event = make_event(
        "xid", now, gpu_uuid=gpu["uuid"], pci_bus_id=gpu.get("pci_bus_id"), xid=xid, message=message
    )
    event["test"] = True
    return event


def _kernel_address(bus_id: str | None) -> str:
    """NVML's ``00000000:18:00.0`` as NVRM prints it, ``PCI:0000:18:00``."""
    parts = (bus_id or "").split(":")
    if len(parts) != 3:
        return "PCI:unknown"
    domain, bus, device = parts[0][-4:], parts[1], parts[2].split(".")[0]
    return f"PCI:{domain}:{bus}:{device}".lower().replace("pci:", "PCI:")
