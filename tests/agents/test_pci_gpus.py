"""The GPUs a node should have, counted on PCI (sysfs), and sent as ``expected_gpu_count``:
NVIDIA VGA and 3D controllers only, an unreadable or garbled device skipped, no PCI list
unknown; ``--expected-gpus`` overrides the count."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.main import build_parser
from agents.payload import NodeInfo, build_node
from agents.pci_gpus import nvidia_gpu_count


def device(sysfs: Path, address: str, vendor: str, klass: str) -> None:
    path = sysfs / "bus" / "pci" / "devices" / address
    path.mkdir(parents=True)
    (path / "vendor").write_text(vendor + "\n")
    (path / "class").write_text(klass + "\n")


def test_counts_nvidia_vga_and_3d_controllers_only(tmp_path: Path) -> None:
    # An HGX board's 8 3D controllers (one lost before the agent started is still on PCI).
    for i in range(8):
        device(tmp_path, f"0000:{0x18 + i:02x}:00.0", "0x10de", "0x030200")
    device(tmp_path, "0000:05:00.0", "0x10de", "0x068000")  # NVSwitch: a bridge
    device(tmp_path, "0000:41:00.1", "0x10de", "0x040300")  # a GPU's HDMI audio function
    device(tmp_path, "0000:61:00.0", "0x10de", "0x030000")  # a VGA GPU (workstation card)
    device(tmp_path, "0000:03:00.0", "0x102b", "0x030000")  # the BMC's Matrox VGA
    device(tmp_path, "0000:9a:00.0", "0x15b3", "0x020700")  # a ConnectX InfiniBand HCA
    device(tmp_path, "0000:18:00.4", "0x10de", "0x030200")  # an SR-IOV virtual function
    (tmp_path / "bus" / "pci" / "devices" / "0000:18:00.4" / "physfn").symlink_to(
        tmp_path / "bus" / "pci" / "devices" / "0000:18:00.0"
    )

    assert nvidia_gpu_count(tmp_path) == 9


def test_a_garbled_or_unreadable_device_is_skipped_and_no_pci_list_is_unknown(
    tmp_path: Path,
) -> None:
    device(tmp_path, "0000:18:00.0", "0x10de", "0x030200")
    device(tmp_path, "0000:19:00.0", "garbage", "0x030200")
    (tmp_path / "bus" / "pci" / "devices" / "0000:1a:00.0").mkdir()  # no vendor file

    assert nvidia_gpu_count(tmp_path) == 1
    assert nvidia_gpu_count(tmp_path / "absent") is None


def test_the_node_carries_the_expected_count_given_or_the_collectors() -> None:
    info = NodeInfo(driver_version="570.86.15", cuda_version="12.8", expected_gpu_count=8)
    bare = NodeInfo(driver_version=None, cuda_version=None)

    assert build_node("n1", {}, info)["expected_gpu_count"] == 8
    assert build_node("n1", {}, info, expected_gpu_count=4)["expected_gpu_count"] == 4
    assert "expected_gpu_count" not in build_node("n1", {}, bare)


@pytest.mark.parametrize(("text", "value"), [("auto", None), ("AUTO", None), ("8", 8), ("0", 0)])
def test_expected_gpus_takes_a_count_or_auto(text: str, value: int | None) -> None:
    args = build_parser().parse_args(["--expected-gpus", text])
    assert args.expected_gpus == value


@pytest.mark.parametrize("text", ["-1", "1025", "eight", ""])
def test_expected_gpus_refuses_other_values_naming_the_form(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--expected-gpus", text])
    assert "argument --expected-gpus: expected N (0..1024) or auto" in capsys.readouterr().err
