"""A GPU lost (or in an unknown error state) before the agent started: nvidia-smi prints a
one-GPU error instead of (or next to) its XML, NVML cannot open that index. The agent starts,
reports the readable GPUs, and reports the bad one as an unreadable GPU with its PCI address
and the reason; it gives way to the real GPU once that can be read again."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agents.collectors.nvidia_smi import NvidiaSmiCollector
from agents.collectors.nvml import NvmlCollector
from agents.nvml.metrics import ALL_METRIC_KEYS
from agents.sources import SourcePaths, choose_collector
from tests.agents.gpu.conftest import FakeSmi
from tests.agents.gpu.fake_pynvml import FakeNvml
from tests.agents.test_agent_cli import _cli
from tests.shared_fixtures import fixture_path

NOW = datetime(2026, 11, 29, 16, 0, 0, tzinfo=UTC)
STEP = timedelta(seconds=10)
T4 = "nvidia-smi-xml/tesla-t4-driver515.xml"  # one GPU at 00000000:00:1E.0
H100 = "h100-80gb-hbm3-8gpu-hgx-vm-fabric-completed-driver570.xml"
LOST = "GPU is lost. Reboot the system to recover this GPU"


def _blank(sample: dict[str, object]) -> bool:
    return all(sample[key] is None for key in ALL_METRIC_KEYS)


def _pci_gpus(sysfs: Path, addresses: list[str]) -> None:
    """NVIDIA 3D controllers at ``addresses`` (sysfs spelling) under ``sysfs``."""
    for address in addresses:
        device = sysfs / "bus/pci/devices" / address
        device.mkdir(parents=True)
        (device / "vendor").write_text("0x10de\n")
        (device / "class").write_text("0x030200\n")


@pytest.mark.parametrize(
    ("capture", "bus_id", "state", "reason"),
    [
        ("error-gpu-is-lost-two-spaces.txt", "00000000:03:00.0", "lost", LOST),
        ("error-gpu-is-lost-windows-cmd-wrapped.txt", "00000000:03:00.0", "lost", LOST),
        (
            "error-unknown-error-no-space-busid-tesla-p4.txt",
            "00000000:07:00.0",
            "unknown_error",
            "Unknown Error",
        ),
    ],
)
def test_nvidia_smi_starts_on_a_one_gpu_error_and_reports_that_gpu_unreadable(
    fake_smi: FakeSmi, capture: str, bus_id: str, state: str, reason: str
) -> None:
    fake_smi.prints(fixture_path(f"nvidia-smi-xml/{capture}"))
    collector = NvidiaSmiCollector(nvidia_smi=str(fake_smi.path))
    [gpu] = collector.inventory()
    assert gpu == {
        "uuid": f"GPU-unknown-{bus_id}",
        "index": 0,
        "name": None,
        "pci_bus_id": bus_id,
        "mem_total_bytes": None,
        "mig_mode": None,
        "state": state,
        "state_reason": f"nvidia-smi: {reason}",
    }
    [sample] = collector.sample(NOW)
    assert sample["gpu_uuid"] == gpu["uuid"] and _blank(sample)
    [event] = collector.drain_events()
    kind = "gpu_lost" if state == "lost" else "gpu_unknown_error"
    assert (event["kind"], event["gpu_uuid"], event["pci_bus_id"]) == (kind, gpu["uuid"], bus_id)
    collector.sample(NOW + STEP)
    assert collector.drain_events() == []  # one event per change, not per round
    assert collector.collection_errors() == []


@pytest.mark.parametrize(
    ("line", "bus_id", "state"),
    [
        ("Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error",
         "00000000:3B:00.0", "unknown_error"),
        ("Unable to determine the device handle for gpu 0000:86:00.0: GPU is lost.  Reboot the "
         "system to recover this GPU", "00000000:86:00.0", "lost"),
        ("Unable to determine the device handle for GPU 00000000:3B:00.0: Unknown Error",
         "00000000:3B:00.0", "unknown_error"),
        ("Unable to determine the device handle for GPU 0000:3b:00.0: GPU is lost.",
         "00000000:3B:00.0", "lost"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("before_xml", [True, False])
def test_nvidia_smi_reports_the_readable_gpus_and_the_bad_one_in_every_printed_form(
    fake_smi: FakeSmi, line: str, bus_id: str, state: str, before_xml: bool
) -> None:
    xml = fixture_path(T4).read_text()
    fake_smi.prints_text(f"{line}\n{xml}" if before_xml else f"{xml}\n{line}\n")
    collector = NvidiaSmiCollector(nvidia_smi=str(fake_smi.path))
    t4, bad = collector.inventory()
    assert (t4["name"], t4["state"]) == ("Tesla T4", "ok")
    assert (bad["uuid"], bad["pci_bus_id"], bad["state"]) == (
        f"GPU-unknown-{bus_id}",
        bus_id,
        state,
    )
    readable, blank = collector.sample(NOW)
    assert readable["power_w"] is not None and _blank(blank)


def test_the_unreadable_gpu_gives_way_to_the_gpu_once_nvidia_smi_lists_it(
    fake_smi: FakeSmi,
) -> None:
    fake_smi.prints_text(
        "Unable to determine the device handle for GPU 0000:00:1e.0: Unknown Error"
    )
    collector = NvidiaSmiCollector(nvidia_smi=str(fake_smi.path))
    assert [g["uuid"] for g in collector.inventory()] == ["GPU-unknown-00000000:00:1E.0"]
    fake_smi.prints(fixture_path(T4))
    [sample] = collector.sample(NOW)
    [gpu] = collector.inventory()
    assert (gpu["name"], gpu["state"], gpu["pci_bus_id"]) == ("Tesla T4", "ok", "00000000:00:1E.0")
    assert sample["gpu_uuid"] == gpu["uuid"] and sample["power_w"] is not None
    assert [e["kind"] for e in collector.drain_events()] == ["gpu_unknown_error"]  # none missing


@pytest.mark.parametrize(
    "text",
    [
        "No devices were found\n",
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make "
        "sure that the latest NVIDIA driver is installed and running.\n",
    ],
)
def test_nvidia_smi_asked_for_starts_without_gpus_and_reports_them_once_the_driver_answers(
    fake_smi: FakeSmi, tmp_path: Path, text: str
) -> None:
    fake_smi.prints_text(text)
    collector, _ = choose_collector(
        "nvidia-smi", SourcePaths(sysfs=tmp_path / "sys", nvidia_smi=str(fake_smi.path))
    )
    assert collector.inventory() == [] and collector.sample(NOW) == []
    errors = collector.collection_errors()  # the first run's and this round's: why no GPU
    assert len(errors) == 2
    assert all(text.split(".")[0].strip() in e["message"] for e in errors)
    fake_smi.prints(fixture_path(T4))
    assert len(collector.sample(NOW + STEP)) == 1


def test_auto_keeps_nvidia_smi_without_gpus_only_when_gpus_are_on_pci(
    fake_smi: FakeSmi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # no NVML: auto tries nvidia-smi
    fake_smi.prints_text("No devices were found\n")
    paths = SourcePaths(sysfs=tmp_path / "sys", nvidia_smi=str(fake_smi.path))
    assert choose_collector("auto", paths)[0].name == "none"  # a machine without NVIDIA GPUs
    _pci_gpus(tmp_path / "sys", ["0000:3b:00.0"])
    assert choose_collector("auto", paths)[0].name == "nvidia-smi"


def test_nvml_reports_a_gpu_it_cannot_open_with_its_pci_address_from_sysfs(
    capture_nvml: Callable[[str], FakeNvml], tmp_path: Path
) -> None:
    fake = capture_nvml(H100)
    _pci_gpus(tmp_path, [f"0000:{d.bus_id[9:].lower()}" for d in fake.devices if d.bus_id])
    fake.handle_errors[3] = 15  # GPU_IS_LOST
    collector = NvmlCollector(sys_root=str(tmp_path))
    gpus = collector.inventory()
    assert [g["state"] for g in gpus] == ["ok"] * 3 + ["lost"] + ["ok"] * 4
    assert (gpus[3]["uuid"], gpus[3]["index"], gpus[3]["pci_bus_id"]) == (
        "GPU-unknown-00000000:0C:00.0",
        3,
        "00000000:0C:00.0",
    )
    assert gpus[3]["state_reason"] == "NVML_ERROR_GPU_IS_LOST (nvmlDeviceGetHandleByIndex)"
    samples = collector.sample(NOW)
    assert [_blank(s) for s in samples] == [False] * 3 + [True] + [False] * 4
    [event] = collector.drain_events()
    assert (event["kind"], event["pci_bus_id"]) == ("gpu_lost", "00000000:0C:00.0")


def test_nvml_names_an_unreadable_gpu_by_index_when_its_address_cannot_be_told(
    capture_nvml: Callable[[str], FakeNvml], tmp_path: Path
) -> None:
    fake = capture_nvml(H100)
    fake.handle_errors[5] = 999  # UNKNOWN
    collector = NvmlCollector(sys_root=str(tmp_path / "no-sysfs"))
    gpu = collector.inventory()[5]
    assert (gpu["uuid"], gpu["pci_bus_id"], gpu["state"]) == (
        "GPU-unknown-index-5",
        None,
        "unknown_error",
    )
    assert len(collector.sample(NOW)) == 8


def test_nvml_reports_the_gpu_under_its_uuid_once_it_opens_again(
    capture_nvml: Callable[[str], FakeNvml], tmp_path: Path
) -> None:
    fake = capture_nvml(H100)
    fake.handle_errors[3] = 15
    collector = NvmlCollector(sys_root=str(tmp_path))
    collector.sample(NOW)
    collector.drain_events()
    del fake.handle_errors[3]  # reset, count unchanged
    samples = collector.sample(NOW + STEP)
    assert [g["uuid"] for g in collector.inventory()] == [d.uuid for d in fake.devices]
    assert not any(_blank(s) for s in samples)
    assert collector.drain_events() == []  # nothing missing: it was never a GPU of its own


def test_the_agent_starts_and_prints_the_node_with_the_unreadable_gpu(
    fake_smi: FakeSmi, tmp_path: Path
) -> None:
    lost = fixture_path("nvidia-smi-xml/error-gpu-is-lost-two-spaces.txt").read_text()
    fake_smi.prints_text(lost + fixture_path(T4).read_text())
    done = _cli(
        "--collector", "nvidia-smi", "--nvidia-smi", str(fake_smi.path), "--once", "--print",
        "--sysfs", str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert [(g["pci_bus_id"], g["state"]) for g in payload["gpus"]] == [
        ("00000000:00:1E.0", "ok"),
        ("00000000:03:00.0", "lost"),
    ]
    assert "disks" in payload and "mounts" in payload  # the rest of the node still reports
