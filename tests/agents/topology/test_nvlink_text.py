"""``nvidia-smi nvlink -s`` is read per GPU and link, including the outputs that list no link."""

from __future__ import annotations

from datetime import UTC, datetime

from agents.topology.nvlink_text import NvlinkStatus, nvlinks_section, parse_nvlink_status
from tests.shared_fixtures import fixture_path

NOW = datetime(2026, 11, 29, 16, 0, 5, tzinfo=UTC)


def _parse(name: str) -> list[NvlinkStatus]:
    return parse_nvlink_status(fixture_path(f"nvlink/{name}").read_text(encoding="utf-8"))


def test_eight_a100_list_twelve_links_at_25_gb_each() -> None:
    gpus = _parse("a100-8gpu-nvlink-status-12-links.txt")
    assert [g.index for g in gpus] == list(range(8))
    assert gpus[7].uuid == "GPU-00000000-0000-0000-0000-000000000008"
    assert gpus[0].name == "NVIDIA A100-SXM4-80GB"
    assert all(g.speeds_gbps == dict.fromkeys(range(12), 25.0) for g in gpus)
    assert all(g.reason is None for g in gpus)


def test_an_h100_sxm_lists_eighteen_tab_indented_links() -> None:
    (gpu,) = _parse("h100-sxm-18-links-status.txt")
    assert gpu.name == "NVIDIA H100 80GB HBM3"
    assert gpu.speeds_gbps == dict.fromkeys(range(18), 26.562)


def test_outputs_without_links_say_why() -> None:
    assert [
        (g.index, g.speeds_gbps, g.reason) for g in _parse("h100-mig-nvlink-not-supported.txt")
    ] == [(0, {}, "mig_mode")]
    assert _parse("rtx-2080-super-links-inactive.txt")[0].reason == "all_links_inactive"
    assert _parse("rtx-4080-super-no-nvlink.txt")[0].reason == "not_supported"


def test_inactive_links_are_down_and_active_ones_up_in_the_nvlinks_section() -> None:
    text = "GPU 0: NVIDIA A100 (UUID: GPU-1)\n\t Link 0: 25 GB/s\n\t Link 1: <inactive>\nGPU 1: X\n"
    gpus = parse_nvlink_status(text)
    assert gpus[0].speeds_gbps == {0: 25.0, 1: None}
    entries = nvlinks_section(gpus, NOW)
    assert [(e["gpu_uuid"], e["link"], e["state"], e["speed_gbps"]) for e in entries] == [
        ("GPU-1", 0, "up", 25.0),
        ("GPU-1", 1, "down", None),
    ]
    assert entries[0]["sampled_at"] == "2026-11-29T16:00:05.000Z"
    assert entries[0]["crc_errors"] is None


def test_a_gpu_without_printed_uuid_takes_the_inventory_one() -> None:
    gpus = parse_nvlink_status("GPU 3: NVIDIA H100\n Link 0: 26.562 GB/s\n")
    assert nvlinks_section(gpus, NOW) == []
    assert nvlinks_section(gpus, NOW, {3: "GPU-3"})[0]["gpu_uuid"] == "GPU-3"
