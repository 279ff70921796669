"""Fault kinds the simulator can inject, and the kernel-log text of the Xids it produces.

The message formats are those of real ``NVRM: Xid`` lines in ``shared/fixtures/xid/`` (file
named per code below), with this node's PCI address, pid and process name filled in.
"""

from __future__ import annotations

import random

#: Faults of the GPU collector (``SimulatedCollector.inject``).
GPU_FAULT_KINDS: tuple[str, ...] = (
    "gpu_lost",
    "xid",
    "thermal_throttle",
    "agent_stop",
    "nvlink_down",
    "off_bus",
    "nvml_hang",
    "xid_repeat",
    "lost_at_start",
)
#: Faults of the node around the GPUs (``SimulatedHostSource.inject``).
HOST_FAULT_KINDS: tuple[str, ...] = ("ib_port_down", "ib_flap", "storage_slow")
FAULT_KINDS: tuple[str, ...] = GPU_FAULT_KINDS + HOST_FAULT_KINDS

#: How long each kind of fault lasts when ``--random-faults`` or ``--fault`` injects it, seconds
#: (a range to draw from): a lost GPU until its reset, a down NVLink until it is retrained, a
#: down InfiniBand port until its cable is reseated.
FAULT_SPANS_S: dict[str, tuple[float, float]] = {
    "gpu_lost": (180.0, 300.0),
    "xid": (180.0, 300.0),  # used by Xid 79 only: the GPU comes back after a reset
    "agent_stop": (60.0, 120.0),
    "thermal_throttle": (120.0, 240.0),
    "nvlink_down": (180.0, 300.0),
    "off_bus": (180.0, 300.0),
    "nvml_hang": (120.0, 240.0),
    "xid_repeat": (0.0, 0.0),  # instantaneous: the repeats come at the next samples
    "lost_at_start": (0.0, 0.0),  # for good (until the agent restarts with the GPU back)
    "ib_port_down": (120.0, 240.0),
    "ib_flap": (60.0, 180.0),
    "storage_slow": (120.0, 240.0),
}
#: What ``--random-faults`` picks from (Xids twice as often as the rest).
RANDOM_FAULT_KINDS: tuple[str, ...] = (
    "xid",
    "xid",
    "thermal_throttle",
    "gpu_lost",
    "agent_stop",
    "nvlink_down",
    "ib_port_down",
    "storage_slow",
)


def random_fault_kind(rng: random.Random, *, has_nvlink: bool) -> str:
    """A kind from :data:`RANDOM_FAULT_KINDS`, leaving out ``nvlink_down`` on a node without
    NVLink."""
    return rng.choice([k for k in RANDOM_FAULT_KINDS if has_nvlink or k != "nvlink_down"])


#: How many times ``xid_repeat`` logs its Xid (one per sample), and its Xid unless named.
XID_REPEATS = 3
XID_REPEAT_DEFAULT = 48
#: What a hung NVML call on one GPU makes the agent report (agents/collectors/nvml.py).
NVML_HANG_ERROR = (
    "GPU {index} ({uuid}): nvmlDeviceGetUtilizationRates timed out after 5 s (still hung from "
    "an earlier round); no sample"
)


def fallen_off_bus_line(pci_bus_id: str) -> str:
    """The kernel line of a GPU that fell off the bus without an Xid (driver R535+ prints it
    before, or instead of, Xid 79; agents/kernel/xid.py reads it as ``gpu_fallen_off_bus``)."""
    return f"NVRM: GPU at {xid_pci_address(pci_bus_id)}: GPU has fallen off the bus."


#: The Xids ``--random-faults`` picks from.
RANDOM_XIDS: tuple[int, ...] = (13, 31, 48, 79, 94, 119)

#: Xids after which the application on the GPU dies (its job ends in the simulator).
APP_FATAL_XIDS = frozenset({13, 31, 43, 45, 94})

# nvmlClocksEventReason* bits (pynvml: nvmlClocksEventReasonGpuIdle = 0x1 …).
CLOCKS_EVENT_REASON_GPU_IDLE = 0x1
CLOCKS_EVENT_REASON_SW_POWER_CAP = 0x4
CLOCKS_EVENT_REASON_SW_THERMAL_SLOWDOWN = 0x20
CLOCKS_EVENT_REASON_HW_THERMAL_SLOWDOWN = 0x40

# Text after "pid=…, name=…, "; {…} fields are filled per occurrence.
_XID_TEXT: dict[int, str] = {
    # xid/xid13-sm-warp-exception-storm-dmesg-iso.log
    13: "Graphics SM Global Exception on (GPC {gpc}, TPC {tpc}, SM {sm}): Multiple Warp Errors",
    # xid/rtx4090-xid31-mmu-fault-host0-with-uuid-serial-lines.log
    31: (
        "Ch 00000030, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC{gpc} GPCCLIENT_T1_{tpc} "
        "faulted @ 0x{hi:x}_{lo:08x}. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ"
    ),
    # xid/xid13-sm-warp-exception-storm-dmesg-iso.log (the Xid 43 follow-up line)
    43: "Ch 00000008",
    # xid/xid45-caused-by-previous-xid145-149-nvlink.log
    45: "Ch 00000001",
    # xid/xid48-dbe-63-row-remap-94-contained-dmesg.log
    48: (
        "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer "
        "at physAddr 0x{addr:x} partition {gpc}, subpartition {sm}."
    ),
    63: "Row Remapper: New row (0x{addr:016x}) marked for remapping, reset gpu to activate.",
    94: "Contained: SM (0x1). RST: No, D-RST: No",
    # The classic NVLink error line; the link number is the one that went down.
    74: "NVLink: fatal error detected on link {link}(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
    # xid/h100-xe9680-xid119-gsp-rpc-timeout-dmesg.log
    119: (
        "Timeout after 6s of waiting for RPC response from GPU{index} GSP! "
        "Expected function 76 (GSP_RM_CONTROL) (0x20801813 0x4c)."
    ),
    # xid/xid51-bad-tsg-then-xid154-pf-flr-reset-required.log
    154: "GPU recovery action changed from 0x0 (None) to 0x1 (PF FLR)",
}

# Xids the driver reports without a process (fixtures print pid='<unknown>', name=<unknown>).
_NO_PROCESS_XIDS = frozenset({48, 63, 94, 154})


def xid_pci_address(pci_bus_id: str) -> str:
    """Return the ``PCI:DDDD:BB:DD`` form NVRM prints for ``pci_bus_id``.

    ``"00000000:18:00.0"`` → ``"PCI:0000:18:00"`` (domain cut to 4 digits, lower case, no
    function), as in the fixtures' Xid lines.
    """
    domain, bus, device_function = pci_bus_id.split(":")
    device = device_function.split(".")[0]
    return "PCI:" + f"{domain[-4:]}:{bus}:{device}".lower()


def xid_message(
    xid: int,
    pci_bus_id: str,
    *,
    gpu_index: int,
    rng: random.Random,
    process: tuple[int, str] | None = None,
    link: int = 0,
) -> str:
    """Return a kernel-log ``NVRM: Xid`` line for ``xid`` on the GPU at ``pci_bus_id``.

    ``process`` is ``(pid, name)`` of the job on the GPU, if any; ``link`` the NVLink of an
    Xid 74. Xid 79 has the bare format of
    ``xid/xid79-fallen-off-bus-then-xid154-os-reboot-gpu-is-lost.log``; unknown codes get a
    channel-only text like Xid 43.
    """
    address = xid_pci_address(pci_bus_id)
    if xid == 79:
        return f"NVRM: Xid ({address}): 79, GPU has fallen off the bus."
    if process is None or xid in _NO_PROCESS_XIDS:
        who = "pid='<unknown>', name=<unknown>"
    else:
        who = f"pid={process[0]}, name={process[1]}"
    template = _XID_TEXT.get(xid, "Ch {channel:08x}")
    text = template.format(
        gpc=rng.randrange(8),
        tpc=rng.randrange(9),
        sm=rng.randrange(2),
        addr=rng.randrange(0x10_0000_0000, 0x14_0000_0000),
        hi=rng.randrange(0x80),
        lo=rng.randrange(0x1_0000_0000) & ~0xFFF,
        index=gpu_index,
        channel=rng.randrange(1, 64),
        link=link,
    )
    return f"NVRM: Xid ({address}): {xid}, {who}, {text}"
