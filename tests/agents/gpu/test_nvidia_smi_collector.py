"""The nvidia-smi fallback collector end to end, against a script standing in for the binary
that prints the real captures."""

from __future__ import annotations

import re
import sys
import types
from datetime import UTC, datetime
from typing import Any

import pytest

from agents.collectors import CollectorUnavailable, create_collector
from agents.collectors.nvidia_smi import NvidiaSmiCollector
from agents.nvidia_smi import parse_nvidia_smi_xml
from tests.agents.gpu.conftest import FakeSmi
from tests.shared_fixtures import fixture_path

NOW = datetime(2026, 11, 29, 16, 0, 0, tzinfo=UTC)
XML = "nvidia-smi-xml/{}"


def _collector(fake_smi: FakeSmi, capture: str, **options: Any) -> NvidiaSmiCollector:
    fake_smi.prints(fixture_path(XML.format(capture)))
    return NvidiaSmiCollector(nvidia_smi=str(fake_smi.path), **options)


def _without_gpu(text: str, bus: str) -> str:
    return re.sub(rf'<gpu id="{bus}">.*?</gpu>', "", text, flags=re.S)


def test_it_samples_every_gpu_as_the_capture_shows_it(fake_smi: FakeSmi) -> None:
    capture = "tesla-v100s-pcie-32gb-8gpu-vm-under-load-driver460.xml"
    collector = _collector(fake_smi, capture)
    parsed = parse_nvidia_smi_xml(fixture_path(XML.format(capture)).read_bytes())
    samples = collector.sample(NOW)
    assert len(samples) == 8
    for sample, gpu in zip(samples, parsed.gpus, strict=True):
        assert sample["gpu_uuid"] == gpu.info["uuid"]
        assert sample["sampled_at"] == "2026-11-29T16:00:00.000Z"
        assert {k: sample[k] for k in gpu.metrics} == gpu.metrics
    assert collector.node_info() == {"driver_version": "460.73.01", "cuda_version": "11.2"}
    first = collector.inventory()[0]
    assert first["pci_bus_id"] == "00000000:00:0D.0"
    assert first["processes"] == [  # type: ignore[typeddict-item]
        {"pid": 37305, "used_memory_bytes": 31683 * 2**20, "name": "python", "user": None}
    ]
    assert collector.collection_errors() == []


def test_it_is_registered_as_nvidia_smi(fake_smi: FakeSmi) -> None:
    fake_smi.prints(fixture_path(XML.format("tesla-t4-driver515.xml")))
    collector = create_collector("nvidia-smi", nvidia_smi=str(fake_smi.path))
    assert collector.name == "nvidia-smi"
    assert [g["name"] for g in collector.inventory()] == ["Tesla T4"]


def test_it_lists_only_compute_processes_as_nvml_would(fake_smi: FakeSmi) -> None:
    collector = _collector(fake_smi, "tesla-t4-driver515.xml")
    processes = collector.inventory()[0]["processes"]  # type: ignore[typeddict-item]
    assert [(p["pid"], p["name"]) for p in processes] == [(5762, "python")]  # Xorg is G


def test_it_is_unavailable_when_the_binary_is_absent(tmp_path: Any) -> None:
    with pytest.raises(CollectorUnavailable, match="nvidia-smi not found"):
        NvidiaSmiCollector(nvidia_smi=str(tmp_path / "nvidia-smi"))


def test_it_is_unavailable_when_nvidia_smi_cannot_reach_the_driver(fake_smi: FakeSmi) -> None:
    fake_smi.prints_text(
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
    )
    with pytest.raises(CollectorUnavailable, match="couldn't communicate with the NVIDIA"):
        NvidiaSmiCollector(nvidia_smi=str(fake_smi.path))


def test_a_gpu_reported_lost_is_marked_lost_while_the_other_keeps_reporting(
    fake_smi: FakeSmi,
) -> None:
    capture = fixture_path(XML.format("geforce-gtx-1070-x2-of-6-driver384.xml"))
    collector = _collector(fake_smi, capture.name)
    lost_line = fixture_path(XML.format("error-gpu-is-lost-two-spaces.txt")).read_text()
    fake_smi.prints_text(lost_line + _without_gpu(capture.read_text(), "00000000:03:00.0"))
    first, second = collector.sample(NOW)
    assert first["power_w"] == 119.47
    assert second["gpu_uuid"] == "GPU-00000000-0000-0000-0000-000000000002"
    assert {k: v for k, v in second.items() if v is not None} == {
        "gpu_uuid": second["gpu_uuid"],
        "sampled_at": second["sampled_at"],
    }
    states = [(g["state"], g["state_reason"]) for g in collector.inventory()]
    assert states == [
        ("ok", None),
        ("lost", "nvidia-smi: GPU is lost. Reboot the system to recover this GPU"),
    ]
    events = collector.drain_events()
    assert [(e["kind"], e["pci_bus_id"]) for e in events] == [("gpu_lost", "00000000:03:00.0")]
    collector.sample(NOW)
    assert collector.drain_events() == []  # one event per change, not per round


def test_an_unknown_error_on_a_gpu_never_seen_is_reported_unreadable_with_its_address(
    fake_smi: FakeSmi,
) -> None:
    collector = _collector(fake_smi, "tesla-t4-driver515.xml")
    error = fixture_path(XML.format("error-unknown-error-no-space-busid-tesla-p4.txt"))
    t4 = fixture_path(XML.format("tesla-t4-driver515.xml")).read_text()
    fake_smi.prints_text(error.read_text() + t4)
    assert len(collector.sample(NOW)) == 2
    unreadable = collector.inventory()[1]
    assert (unreadable["uuid"], unreadable["pci_bus_id"], unreadable["state"]) == (
        "GPU-unknown-00000000:07:00.0",
        "00000000:07:00.0",
        "unknown_error",
    )
    assert unreadable["state_reason"] == "nvidia-smi: Unknown Error"
    assert collector.collection_errors() == []


def test_a_hung_nvidia_smi_costs_the_round_and_sends_no_old_values(fake_smi: FakeSmi) -> None:
    collector = _collector(fake_smi, "tesla-t4-driver515.xml", timeout_s=0.3)
    assert len(collector.sample(NOW)) == 1
    fake_smi.hangs(3)
    assert collector.sample(NOW) == []
    assert collector.collection_errors() == [
        {"source": "nvidia-smi", "message": "nvidia-smi -q -x timed out after 0.3 s"}
    ]


def test_output_that_is_not_xml_is_a_collection_error_not_a_crash(fake_smi: FakeSmi) -> None:
    collector = _collector(fake_smi, "tesla-t4-driver515.xml")
    fake_smi.prints(fixture_path("nvlink/h100-q-text-truncated-invalid.txt"))
    assert collector.sample(NOW) == []
    [error] = collector.collection_errors()
    assert "no <nvidia_smi_log> document" in error["message"]


def test_a_gpu_missing_from_the_listing_is_reported_missing(fake_smi: FakeSmi) -> None:
    capture = fixture_path(XML.format("geforce-rtx-2080ti-x2-ecc-unsupported-driver410.xml"))
    collector = _collector(fake_smi, capture.name)
    fake_smi.prints_text(_without_gpu(capture.read_text(), "00000000:03:00.0"))
    samples = collector.sample(NOW)
    assert [s["power_w"] for s in samples] == [2.12, None]
    [event] = collector.drain_events()
    assert event["kind"] == "gpu_missing"
    assert event["message"] is not None and "sees 1 GPU(s), 2 at start" in event["message"]
    assert collector.inventory()[1]["state"] == "lost"


def test_attached_gpus_larger_than_described_is_reported_once(fake_smi: FakeSmi) -> None:
    collector = _collector(fake_smi, "geforce-gtx-1070-x2-of-6-driver384.xml")
    collector.sample(NOW)
    assert collector.collection_errors() == [
        {"source": "nvidia-smi", "message": "nvidia-smi reports 6 attached GPUs but describes 2"}
    ]


def test_topology_is_none_while_the_matrix_parser_is_not_installed(
    fake_smi: FakeSmi, monkeypatch: pytest.MonkeyPatch
) -> None:
    collector = _collector(fake_smi, "geforce-rtx-2080ti-x2-ecc-unsupported-driver410.xml")
    monkeypatch.setitem(sys.modules, "agents.topology.matrix", None)
    assert collector.topology(NOW) is None


def test_topology_goes_through_parse_topo_matrix_and_adds_bus_ids(
    fake_smi: FakeSmi, monkeypatch: pytest.MonkeyPatch
) -> None:
    collector = _collector(fake_smi, "geforce-rtx-2080ti-x2-ecc-unsupported-driver410.xml")
    fake_smi.prints_topology(fixture_path("topo/dual-gpu-nv2-no-legend.txt"))
    seen: list[str] = []

    def parse_topo_matrix(text: str) -> str:
        seen.append(text)
        return "matrix"

    stub = types.ModuleType("agents.topology.matrix")
    stub.parse_topo_matrix = parse_topo_matrix  # type: ignore[attr-defined]
    stub.topology_section = lambda matrix, uuids: {  # type: ignore[attr-defined]
        "devices": [{"id": f"GPU{i}", "kind": "gpu", "gpu_uuid": u} for i, u in uuids.items()],
        "links": [{"a": "GPU0", "b": "GPU1", "type": "NV2"}],
    }
    monkeypatch.setitem(sys.modules, "agents.topology.matrix", stub)
    topology = collector.topology(NOW)
    assert topology is not None
    assert "NV2" in seen[0]
    assert [d["pci_bus_id"] for d in topology["devices"]] == [
        "00000000:02:00.0",
        "00000000:03:00.0",
    ]
    assert (topology["source"], topology["partial"]) == ("nvidia-smi", False)


def test_topology_from_the_real_matrix_parser_names_gpus_by_uuid_and_bus_id(
    fake_smi: FakeSmi,
) -> None:
    pytest.importorskip("agents.topology.matrix", reason="topo -m parser not installed yet")
    collector = _collector(fake_smi, "geforce-rtx-2080ti-x2-ecc-unsupported-driver410.xml")
    fake_smi.prints_topology(fixture_path("topo/dual-gpu-nv2-no-legend.txt"))
    topology = collector.topology(NOW)
    assert topology is not None and topology["partial"] is False
    assert [(d["gpu_uuid"], d["pci_bus_id"]) for d in topology["devices"]] == [
        ("GPU-00000000-0000-0000-0000-000000000001", "00000000:02:00.0"),
        ("GPU-00000000-0000-0000-0000-000000000002", "00000000:03:00.0"),
    ]
    assert topology["links"] == [{"a": "GPU0", "b": "GPU1", "type": "NV2"}]


def test_a_topology_error_output_is_a_partial_topology_not_a_crash(fake_smi: FakeSmi) -> None:
    pytest.importorskip("agents.topology.matrix", reason="topo -m parser not installed yet")
    collector = _collector(fake_smi, "tesla-t4-driver515.xml")
    fake_smi.prints_topology(fixture_path("topo/windows-rtx-2080-super-topo-m-error.txt"))
    topology = collector.topology(NOW)
    assert topology is not None
    assert (topology["partial"], topology["devices"]) == (True, [])
    assert "Option -m is missing its value" in topology["errors"][0]
