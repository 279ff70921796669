"""The NVML collector on machines rebuilt from real captures: it reads what nvidia-smi printed
on the same machine, and agrees with the nvidia-smi collector value for value."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from agents.collectors import create_collector
from agents.collectors.nvidia_smi import NvidiaSmiCollector
from agents.collectors.nvml import NvmlCollector
from agents.nvidia_smi import parse_nvidia_smi_xml
from agents.nvml.metrics import ALL_METRIC_KEYS
from tests.agents.gpu.conftest import FakeSmi
from tests.agents.gpu.fake_pynvml import FakeNvml
from tests.shared_fixtures import fixture_names, fixture_path

NOW = datetime(2026, 11, 29, 16, 0, 0, tzinfo=UTC)
CAPTURES = fixture_names("nvidia-smi-xml", ".xml")
Install = Callable[[str], FakeNvml]


def _compare(entry: dict[str, Any], keys: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple(entry.get(k) for k in keys)


@pytest.mark.parametrize("capture", CAPTURES)
def test_it_reads_every_metric_nvidia_smi_printed_on_the_same_machine(
    capture: str, capture_nvml: Install
) -> None:
    capture_nvml(capture)
    parsed = parse_nvidia_smi_xml(fixture_path(f"nvidia-smi-xml/{capture}").read_bytes())
    collector = NvmlCollector(call_timeout_s=2)
    samples = collector.sample(NOW)
    # One capture repeats a (masked) UUID: the second GPU is then reported as "<uuid>@<bus>".
    assert [s["gpu_uuid"].split("@")[0] for s in samples] == [g.info["uuid"] for g in parsed.gpus]
    for sample, gpu in zip(samples, parsed.gpus, strict=True):
        assert {k: sample[k] for k in ALL_METRIC_KEYS} == gpu.metrics
    for entry, gpu in zip(collector.inventory(), parsed.gpus, strict=True):
        identity = {k: v for k, v in entry.items() if k in gpu.info and k != "uuid"}
        assert identity == {k: v for k, v in gpu.info.items() if k != "uuid"}
        unavailable: dict[str, str] = entry["unavailable"]  # type: ignore[typeddict-item]
        for metric, reason in gpu.unavailable.items():
            if reason == "NOT_SUPPORTED":
                assert unavailable[metric] == "NOT_SUPPORTED", metric
    assert all("repeats UUID" in e["message"] for e in collector.collection_errors())
    collector.close()


@pytest.mark.parametrize("capture", CAPTURES)
def test_nvml_and_nvidia_smi_collectors_agree_on_the_same_machine(
    capture: str, capture_nvml: Install, fake_smi: FakeSmi
) -> None:
    capture_nvml(capture)
    fake_smi.prints(fixture_path(f"nvidia-smi-xml/{capture}"))
    nvml = NvmlCollector(call_timeout_s=2)
    smi = NvidiaSmiCollector(nvidia_smi=str(fake_smi.path))
    assert nvml.sample(NOW) == smi.sample(NOW)
    assert nvml.node_info() == smi.node_info()
    identity = ("uuid", "index", "name", "pci_bus_id", "mem_total_bytes", "mig_mode", "state")
    for a, b in zip(nvml.inventory(), smi.inventory(), strict=True):
        a_entry: dict[str, Any] = dict(a)
        b_entry: dict[str, Any] = dict(b)
        assert _compare(a_entry, identity) == _compare(b_entry, identity)
        procs = ("pid", "used_memory_bytes")
        assert [_compare(p, procs) for p in a_entry["processes"]] == [
            _compare(p, procs) for p in b_entry["processes"]
        ]
        mig = ("gpu_instance_id", "compute_instance_id", "mem_total_bytes", "mem_used_bytes")
        assert [_compare(m, mig) for m in a_entry.get("mig_instances") or []] == [
            _compare(m, mig) for m in b_entry.get("mig_instances") or []
        ]
    nvml.close()


def test_two_gpus_sharing_a_uuid_stay_two_gpus_in_both_collectors(
    capture_nvml: Install, fake_smi: FakeSmi
) -> None:
    capture_nvml("rtx-2080-x2-driver590-v13.xml")
    fake_smi.prints(fixture_path("nvidia-smi-xml/rtx-2080-x2-driver590-v13.xml"))
    smi = NvidiaSmiCollector(nvidia_smi=str(fake_smi.path))
    for collector in (NvmlCollector(), smi):
        assert [g["uuid"] for g in collector.inventory()] == [
            "GPU-00000000-0000-0000-0000-000000000001",
            "GPU-00000000-0000-0000-0000-000000000001@00000000:02:00.0",
        ]
        [error] = collector.collection_errors()
        assert "repeats UUID" in error["message"]


def test_it_is_registered_as_nvml_and_takes_its_options(capture_nvml: Install) -> None:
    capture_nvml("tesla-t4-driver515.xml")
    collector = create_collector("nvml", call_timeout_s=1.5)
    assert collector.name == "nvml"
    assert collector.node_info() == {"driver_version": "515.105.01", "cuda_version": "11.7"}
    collector.close()


def test_it_lists_mig_instances_with_their_uuid_and_profile(capture_nvml: Install) -> None:
    fake = capture_nvml("a100-sxm4-80gb-mig-4x1g-driver535.xml")
    for child in fake.devices[0].mig_devices:
        child.profile = "1g.20gb"
    [entry] = NvmlCollector().inventory()
    instances: list[dict[str, Any]] = entry["mig_instances"]  # type: ignore[typeddict-item]
    assert [(m["uuid"], m["gpu_instance_id"], m["profile"]) for m in instances] == [
        (f"MIG-00000000-0000-0000-0000-00000000000{n}", n + 2, "1g.20gb") for n in range(1, 5)
    ]
    assert {m["mem_total_bytes"] for m in instances} == {19968 * 2**20}


def test_it_names_processes_from_proc_when_visible_and_leaves_others_null(
    capture_nvml: Install, tmp_path: Any
) -> None:
    capture_nvml("tesla-v100-pcie-32gb-driver460.xml")
    visible = tmp_path / "4027538"
    visible.mkdir()
    (visible / "comm").write_text("mtopen-plugin:w\n")
    [entry] = NvmlCollector(proc_root=str(tmp_path)).inventory()
    processes: list[dict[str, Any]] = entry["processes"]  # type: ignore[typeddict-item]
    assert processes[0]["pid"] == 4027538
    assert processes[0]["name"] == "mtopen-plugin:w"
    assert processes[0]["user"] is not None
    assert (processes[1]["name"], processes[1]["user"]) == (None, None)
    assert [p["used_memory_bytes"] // 2**20 for p in processes] == [3214, 3288, 2912, 2890]
