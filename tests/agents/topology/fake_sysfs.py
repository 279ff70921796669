"""Fake ``/sys`` trees for the NIC topology tests, laid out like the real one.

Real sysfs: ``/sys/devices/pci0000:00/0000:00:01.0/…/0000:1a:00.0`` is the device directory,
``/sys/bus/pci/devices/0000:1a:00.0`` a symlink to it, and ``/sys/class/infiniband/mlx5_0/device``
a symlink to it too. A ``grep . /sys/class/infiniband/*/…`` listing (``path:value`` lines) gives
the files of each HCA but not where it sits on the PCI tree; :func:`place_device` adds that.
"""

from __future__ import annotations

import os
from pathlib import Path


def tree_from_listing(listing: str, sysfs: Path) -> list[str]:
    """Write each ``/sys/…:value`` line of ``listing`` as a file under ``sysfs``; return the
    HCA names, in listing order."""
    names: list[str] = []
    for line in listing.splitlines():
        if not line.startswith("/sys/"):
            continue
        path, _, value = line.partition(":")
        target = sysfs / path.removeprefix("/sys/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(value + "\n", encoding="utf-8")
        parts = Path(path).parts  # ('/', 'sys', 'class', 'infiniband', NAME, …)
        if parts[2:4] == ("class", "infiniband") and parts[4] not in names:
            names.append(parts[4])
    return names


def place_device(sysfs: Path, pci_path: str, *, numa_node: int = -1) -> str:
    """Create the device directory ``<sysfs>/devices/<pci_path>`` (``pci0000:00/…/addr``) with
    its ``numa_node`` and the ``bus/pci/devices/<addr>`` symlink; return the address."""
    device = sysfs / "devices" / pci_path
    device.mkdir(parents=True, exist_ok=True)
    (device / "numa_node").write_text(f"{numa_node}\n", encoding="ascii")
    address = device.name
    bus = sysfs / "bus" / "pci" / "devices"
    bus.mkdir(parents=True, exist_ok=True)
    link = bus / address
    if not link.is_symlink():
        link.symlink_to(os.path.relpath(device, bus))
    return address


def attach_hca(sysfs: Path, name: str, pci_path: str, *, numa_node: int = -1) -> None:
    """Place an HCA's PCI device and point ``class/infiniband/<name>/device`` at it."""
    place_device(sysfs, pci_path, numa_node=numa_node)
    hca = sysfs / "class" / "infiniband" / name
    hca.mkdir(parents=True, exist_ok=True)
    (hca / "device").symlink_to(os.path.relpath(sysfs / "devices" / pci_path, hca))
