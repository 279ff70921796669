"""How many NVIDIA GPUs a node has on PCI, from sysfs: what the driver should enumerate.

A GPU that fell off the bus or hit an unknown error before the agent started is absent from
NVML's and nvidia-smi's lists, so the inventory alone cannot tell it is missing; the PCI
device is usually still there (``lspci -d 10de:`` lists it). Counted from
``<sysfs>/bus/pci/devices/<address>/vendor`` (``0x10de``: NVIDIA) and ``class`` (``0x0300xx``
VGA or ``0x0302xx`` 3D controller: the GPUs; NVSwitches are bridges, ``0x0680xx``, and audio
functions ``0x0403xx``, not counted; nor SR-IOV virtual functions, which have a ``physfn``
link to their GPU).
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)

NVIDIA_VENDOR = 0x10DE
#: PCI base class 0x03 (display), subclasses 0x00 (VGA) and 0x02 (3D controller).
GPU_CLASSES = frozenset({0x0300, 0x0302})


def nvidia_gpu_count(sysfs: Path) -> int | None:
    """NVIDIA VGA/3D PCI functions under ``sysfs``; None when the PCI device list cannot be
    read (no sysfs, a container without it). A device whose files are unreadable or garbled
    is skipped with a log line, never the count."""
    addresses = nvidia_gpu_addresses(sysfs)
    return None if addresses is None else len(addresses)


def nvidia_gpu_addresses(sysfs: Path) -> list[str] | None:
    """The sysfs names (``0000:3b:00.0``) of the NVIDIA VGA/3D PCI functions under ``sysfs``,
    sorted; None when the PCI device list cannot be read."""
    devices = sysfs / "bus" / "pci" / "devices"
    try:
        entries = sorted(devices.iterdir())
    except OSError as exc:
        log.info("no PCI device list at %s (%s): the expected GPU count is unknown", devices, exc)
        return None
    found = []
    for entry in entries:
        try:
            vendor = int((entry / "vendor").read_text().strip(), 16)
            if vendor != NVIDIA_VENDOR:
                continue
            klass = int((entry / "class").read_text().strip(), 16)
        except (OSError, ValueError) as exc:
            log.info("PCI device %s skipped: %s", entry.name, exc)
            continue
        # An SR-IOV virtual function (a vGPU host's) is a slice of a GPU counted already.
        if klass >> 8 in GPU_CLASSES and not (entry / "physfn").exists():
            found.append(entry.name)
    return found
