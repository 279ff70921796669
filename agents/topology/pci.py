"""PCI bus ids in their two spellings, and nvidia-smi's PCI distance codes from sysfs paths.

NVML (``nvmlDeviceGetPciInfo().busId``) writes ``00000000:18:00.0``: an 8-hex-digit domain,
upper-case hex. sysfs (``/sys/bus/pci/devices``) writes ``0000:18:00.0``: a 4-digit domain (wider
only when the domain needs it, e.g. Intel VMD's ``10000``), lower-case. The kernel log writes
``PCI:0000:18:00`` (no function) or ``0000:18:00.0``.

The distance codes follow nvidia-smi's ``topo -m`` legend:

- ``PIX``  = Connection traversing at most a single PCIe bridge
- ``PXB``  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
- ``PHB``  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
- ``NODE`` = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges
  within a NUMA node
- ``SYS``  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_BUS_ID = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):(?P<device>[0-9a-fA-F]{1,2})"
    r"(?:\.(?P<function>[0-7]))?$"
)


def _parts(bus_id: str) -> tuple[int, int, int, int] | None:
    text = bus_id.strip()
    if text[:4].upper() == "PCI:":
        text = text[4:]
    match = _BUS_ID.match(text)
    if match is None:
        return None
    return (
        int(match["domain"] or "0", 16),
        int(match["bus"], 16),
        int(match["device"], 16),
        int(match["function"] or "0", 16),
    )


def nvml_bus_id(bus_id: str) -> str | None:
    """``bus_id`` in NVML's spelling (``00000000:18:00.0``); ``None`` if it is not a PCI address.

    Accepts the kernel log's ``PCI:0000:18:00`` and ``18:00`` (function 0, domain 0), sysfs'
    ``0000:18:00.0`` and NVML's own form."""
    parts = _parts(bus_id)
    if parts is None:
        return None
    domain, bus, device, function = parts
    return f"{domain:08X}:{bus:02X}:{device:02X}.{function:X}"


def sysfs_bus_id(bus_id: str) -> str | None:
    """``bus_id`` as sysfs names the device (``0000:18:00.0``); ``None`` if it is not one."""
    parts = _parts(bus_id)
    if parts is None:
        return None
    domain, bus, device, function = parts
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function:x}"


def pci_distance(
    path_a: Sequence[str],
    path_b: Sequence[str],
    numa_a: int | None,
    numa_b: int | None,
) -> str:
    """The nvidia-smi code for the PCIe path between two devices.

    ``path_a`` and ``path_b`` are the components of their resolved sysfs device paths below
    ``/sys/devices``, host bridge first: ``["pci0000:00", "0000:00:01.0", "0000:01:00.0"]``.
    A PCIe switch shows there as two bridges (its upstream port, then the downstream port the
    device hangs from) and counts as one hop, as NVML and NCCL count it: under the same switch
    (or the same bridge port, like the two functions of a dual-port NIC) is ``PIX``, through
    several switches ``PXB``, only through the host bridge ``PHB``. Devices under different host
    bridges are ``NODE`` when their NUMA nodes are equal (both unknown counts as equal:
    single-socket machines report ``-1``), else ``SYS``.
    """
    if not path_a or not path_b or path_a[0] != path_b[0]:
        return "NODE" if numa_a == numa_b else "SYS"
    if len(path_a) > 2 and path_a[:-1] == path_b[:-1]:
        return "PIX"  # functions of one card, or devices on the same bridge port
    above_a, above_b = _switches(path_a), _switches(path_b)
    common = next((switch for switch in above_a if switch in above_b), None)
    if common is None:
        return "PHB"
    hops = above_a.index(common) + above_b.index(common) + 1
    return "PIX" if hops == 1 else "PXB"


def _switches(path: Sequence[str]) -> list[str]:
    """The switches above a device, nearest first, named by their upstream port: going up two
    components at a time (downstream port, upstream port) until the host bridge. A device on a
    root port has none (NCCL's ``ncclTopoGetXmlFromSys`` walks sysfs the same way)."""
    found = []
    index = len(path) - 3
    while index > 0:
        found.append(path[index])
        index -= 2
    return found
