"""PCI bus ids convert between the kernel's, sysfs' and NVML's spellings; the distance code
between two sysfs paths follows nvidia-smi's legend."""

from __future__ import annotations

import pytest

from agents.topology.pci import nvml_bus_id, pci_distance, sysfs_bus_id


@pytest.mark.parametrize(
    ("text", "nvml", "sysfs"),
    [
        ("PCI:0000:18:00", "00000000:18:00.0", "0000:18:00.0"),
        ("0000:b3:00.0", "00000000:B3:00.0", "0000:b3:00.0"),
        ("PCI:0018:01:00", "00000018:01:00.0", "0018:01:00.0"),
        ("00000000:9A:00.1", "00000000:9A:00.1", "0000:9a:00.1"),
        ("18:00", "00000000:18:00.0", "0000:18:00.0"),
        ("0000:10:1c", "00000000:10:1C.0", "0000:10:1c.0"),
        ("10000:e1:00.0", "00010000:E1:00.0", "10000:e1:00.0"),
    ],
)
def test_bus_ids_are_spelled_as_nvml_and_sysfs_spell_them(text: str, nvml: str, sysfs: str) -> None:
    assert nvml_bus_id(text) == nvml
    assert sysfs_bus_id(text) == sysfs


def test_text_that_is_not_a_bus_id_gives_none() -> None:
    assert nvml_bus_id("GPU-1234") is None
    assert sysfs_bus_id("0000:18") is None


ROOT = ["pci0000:00", "0000:00:01.0"]
SWITCH = [*ROOT, "0000:01:00.0"]


@pytest.mark.parametrize(
    ("a", "b", "numa", "code"),
    [
        ([*SWITCH, "0000:02:00.0", "0000:03:00.0"], [*SWITCH, "0000:02:01.0", "0000:04:00.0"],
         (0, 0), "PIX"),
        ([*SWITCH, "0000:02:00.0", "0000:03:00.0"],
         [*SWITCH, "0000:02:02.0", "0000:05:00.0", "0000:06:00.0", "0000:07:00.0"], (0, 0), "PXB"),
        ([*ROOT, "0000:01:00.0"], ["pci0000:00", "0000:00:02.0", "0000:02:00.0"], (0, 0), "PHB"),
        ([*ROOT, "0000:01:00.0"], ["pci0000:40", "0000:40:01.0", "0000:41:00.0"], (0, 0), "NODE"),
        ([*ROOT, "0000:01:00.0"], ["pci0000:40", "0000:40:01.0", "0000:41:00.0"], (None, None),
         "NODE"),
        ([*ROOT, "0000:01:00.0"], ["pci0000:80", "0000:80:01.0", "0000:81:00.0"], (0, 1), "SYS"),
        ([*ROOT, "0000:01:00.0"], [*ROOT, "0000:01:00.1"], (0, 0), "PIX"),
    ],
    ids=["same-switch", "nested-switch", "host-bridge", "numa-node", "numa-unknown", "sockets",
         "functions"],
)  # fmt: skip
def test_the_distance_code_counts_switches_as_nvidia_smi_does(
    a: list[str], b: list[str], numa: tuple[int | None, int | None], code: str
) -> None:
    assert pci_distance(a, b, *numa) == code
    assert pci_distance(b, a, numa[1], numa[0]) == code
