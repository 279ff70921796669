"""The captures with something unusual in them (see ../shared/fixtures/SOURCES.md): each test
names the quirk and asserts the exact values the capture holds."""

from __future__ import annotations

from agents.nvidia_smi import SmiLog, parse_nvidia_smi_xml
from tests.shared_fixtures import fixture_path

MIB = 2**20


def _log(name: str) -> SmiLog:
    return parse_nvidia_smi_xml(fixture_path(f"nvidia-smi-xml/{name}").read_bytes())


def test_it_lists_the_mig_instances_of_an_a100_in_a_vm_with_their_own_memory() -> None:
    gpu = _log("a100-sxm4-40gb-mig-vm-driver510.xml").gpus[0]
    assert gpu.info["mig_mode"] == "enabled"
    assert [(m["gpu_instance_id"], m["compute_instance_id"]) for m in gpu.mig_instances or []] == [
        (1, 0),
        (2, 0),
    ]
    assert {m["mem_total_bytes"] for m in gpu.mig_instances or []} == {19968 * MIB}
    assert {m["mem_used_bytes"] for m in gpu.mig_instances or []} == {19 * MIB}
    # The parent's own memory is not the first MIG device's.
    assert gpu.info["mem_total_bytes"] == 40960 * MIB


def test_it_reads_volatile_ecc_as_not_supported_but_aggregate_as_zero_on_the_mig_a100() -> None:
    gpu = _log("a100-sxm4-40gb-mig-vm-driver510.xml").gpus[0]
    assert gpu.metrics["ecc_corrected_volatile_count"] is None
    assert gpu.unavailable["ecc_corrected_volatile_count"] == "NOT_SUPPORTED"
    assert gpu.metrics["ecc_uncorrected_aggregate_count"] == 0


def test_it_keeps_four_mig_instances_and_notes_attached_gpus_larger_than_described() -> None:
    log = _log("a100-sxm4-80gb-mig-4x1g-driver535.xml")
    assert (log.attached_gpus, len(log.gpus), log.dtd_version) == (4, 1, 12)
    gpu = log.gpus[0]
    assert [m["gpu_instance_id"] for m in gpu.mig_instances or []] == [3, 4, 5, 6]
    assert {m["mem_used_bytes"] for m in gpu.mig_instances or []} == {12 * MIB}
    for key in ("util_gpu_pct", "util_mem_pct", "remapped_rows_pending"):
        assert gpu.metrics[key] is None
        assert gpu.unavailable[key] == "NOT_SUPPORTED"
    assert (gpu.metrics["power_w"], gpu.metrics["power_limit_w"]) == (67.03, 500.0)


def test_it_parses_a_document_without_xml_header_or_doctype() -> None:
    log = _log("geforce-gtx-1050-no-doctype-driver515.xml")
    assert log.dtd_version is None
    gpu = log.gpus[0]
    assert gpu.info["mig_mode"] is None and gpu.mig_instances is None  # <mig_devices>None
    assert (gpu.metrics["pcie_link_width"], gpu.metrics["pcie_link_width_max"]) == (8, 16)
    assert [(p["pid"], p["type"], p["name"]) for p in gpu.processes] == [
        (1200, "G", "/usr/lib/xorg/Xorg"),
        (30091, "G", "/snap/firefox/1775/usr/lib/firefox/firefox"),
    ]


def test_it_reads_both_gpus_of_a_trimmed_six_gpu_capture_with_their_processes() -> None:
    log = _log("geforce-gtx-1070-x2-of-6-driver384.xml")
    assert (log.attached_gpus, len(log.gpus), log.dtd_version, log.cuda_version) == (6, 2, 9, None)
    first, second = log.gpus
    assert [p["pid"] for p in first.processes] == [1357, 2384, 3093]
    assert [(p["pid"], p["type"], p["used_memory_bytes"]) for p in second.processes] == [
        (3093, "C", 2283 * MIB)
    ]
    assert (second.info["pci_bus_id"], second.metrics["power_w"]) == ("00000000:03:00.0", 139.3)
    assert first.unavailable["mem_reserved_bytes"] == "NOT_REPORTED"  # no <reserved> before 5xx


def test_it_reports_ecc_as_not_supported_on_consumer_turing_cards() -> None:
    for gpu in _log("geforce-rtx-2080ti-x2-ecc-unsupported-driver410.xml").gpus:
        for counter in ("volatile", "aggregate"):
            for kind in ("corrected", "uncorrected"):
                assert gpu.unavailable[f"ecc_{kind}_{counter}_count"] == "NOT_SUPPORTED"
    assert [
        g.metrics["clocks_event_reasons"]
        for g in _log("geforce-rtx-2080ti-x2-ecc-unsupported-driver410.xml").gpus
    ] == [0x1, 0x4]


def test_it_keeps_vgpu_processes_without_name_or_memory_as_none() -> None:
    gpu = _log("grid-p4-1q-vgpu-windows-driver513.xml").gpus[0]
    assert gpu.info["name"] == "GRID P4-1Q"
    assert len(gpu.processes) == 13
    assert sum(p["name"] is None for p in gpu.processes) == 12
    assert gpu.processes[-1]["name"] == "C:\\Windows\\explorer.exe"
    assert {p["used_memory_bytes"] for p in gpu.processes} == {None}
    assert gpu.unavailable["power_w"] == "NOT_SUPPORTED"


def test_it_reports_fields_absent_from_a_minimal_v9_capture_as_not_reported() -> None:
    log = _log("geforce-gt-730-minimal-driver384.xml")
    gpu = log.gpus[0]
    assert gpu.info["pci_bus_id"] == "00000000:01:00.0"  # from <gpu id=…>, no <pci> element
    assert gpu.unavailable["temp_c"] == "NOT_REPORTED"
    assert gpu.unavailable["util_gpu_pct"] == "NOT_SUPPORTED"
    assert all(v is None for v in gpu.metrics.values())


def test_it_keeps_the_graphics_device_name_an_old_driver_gives_a_new_gpu() -> None:
    gpu = _log("gtx-1660-ti-driver418-graphics-device.xml").gpus[0]
    assert gpu.info["name"] == "Graphics Device"
    assert gpu.unavailable["retired_pages_dbe_count"] == "NOT_SUPPORTED"


def test_it_reads_all_eight_gpus_of_an_hgx_h100_vm() -> None:
    log = _log("h100-80gb-hbm3-8gpu-hgx-vm-fabric-completed-driver570.xml")
    assert [g.info["pci_bus_id"][9:11] for g in log.gpus] == [
        "04", "05", "0B", "0C", "84", "85", "8B", "8C",
    ]  # fmt: skip
    assert [g.metrics["power_w"] for g in log.gpus] == [
        70.93, 68.55, 71.77, 68.89, 69.34, 71.0, 70.64, 70.54,
    ]  # fmt: skip
    gpu = log.gpus[0]
    assert (gpu.metrics["mem_temp_c"], gpu.metrics["remapped_rows_correctable_count"]) == (40, 0)
    assert all(g.processes == [] for g in log.gpus)


def test_it_counts_ecc_errors_and_retired_pages_of_a_failing_dgx2_v100() -> None:
    m = _log("tesla-v100-sxm3-32gb-dgx2-retired-pages-driver410.xml").gpus[0].metrics
    assert (m["ecc_corrected_volatile_count"], m["ecc_uncorrected_volatile_count"]) == (1, 1)
    assert (m["ecc_corrected_aggregate_count"], m["ecc_uncorrected_aggregate_count"]) == (291, 7627)
    assert (m["retired_pages_sbe_count"], m["retired_pages_dbe_count"]) == (0, 2)
    assert m["retired_pages_pending"] == 1


def test_it_reads_utilisation_of_each_gpu_of_a_loaded_eight_gpu_vm() -> None:
    log = _log("tesla-v100s-pcie-32gb-8gpu-vm-under-load-driver460.xml")
    assert [g.metrics["util_gpu_pct"] for g in log.gpus] == [97, 75, 80, 23, 98, 98, 91, 99]
    assert [g.processes[0]["name"] for g in log.gpus] == ["python"] * 8


def test_it_reads_v13_clock_event_reasons_and_pcie_throughput_in_bytes() -> None:
    m = _log("rtx-3090-driver590-v13.xml").gpus[0].metrics
    assert m["clocks_event_reasons"] == 0x4  # sw_power_cap Active
    assert (m["pcie_tx_bytes_per_s"], m["pcie_rx_bytes_per_s"]) == (488 * 1024, 439 * 1024)
    assert m["mem_reserved_bytes"] == 450 * MIB


def test_it_falls_back_to_instant_power_when_average_is_not_available() -> None:
    gpus = _log("rtx-2070-x2-driver590-v13.xml").gpus
    assert [g.metrics["power_w"] for g in gpus] == [9.23, 11.82]


def test_it_prefers_average_power_draw_on_newer_drivers() -> None:
    assert _log("rtx-3080-driver595-v13.xml").gpus[0].metrics["power_w"] == 139.62


def test_it_sums_correctable_ecc_over_memory_kinds_of_a_p100() -> None:
    m = _log("tesla-p100-pcie-16gb-driver510.xml").gpus[0].metrics
    assert m["ecc_corrected_aggregate_count"] == 3
    assert (m["retired_pages_sbe_count"], m["retired_pages_pending"]) == (0, 0)
