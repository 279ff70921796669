"""``nvidia-smi topo -m`` is read from every captured variant: tabs, condensed spaces, ANSI
headers, old ``SOC``/``mlx5_N`` format, POWER8 affinities, 18 NICs, Windows."""

from __future__ import annotations

from typing import Any

import pytest

from agents.topology.matrix import TopoMatrix, TopoParseError, parse_topo_matrix
from tests.shared_fixtures import fixture_names, fixture_path

BOTH = ("CPU Affinity", "NUMA Affinity")
ALL = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
POWER8_SOCKET0 = "0-0,8-8,16-16,24-24,32-32,40-40,48-48,56-56,64-64,72-72"
POWER8_SOCKET1 = "80-80,88-88,96-96,104-104,112-112,120-120,128-128,136-136,144-144,152-152"

# Per capture: GPU count, NIC names, affinity columns, {GPU: (cpu, numa)}, {(a, b): code}.
EXPECTED: dict[str, dict[str, Any]] = {
    "a100-8gpu-nv12-condensed.txt": {
        "gpus": 8, "nics": [], "columns": BOTH,
        "affinity": {"GPU0": ("0-23", 0), "GPU4": ("24-47", 1), "GPU7": ("24-47", 1)},
        "codes": {("GPU0", "GPU7"): "NV12", ("GPU5", "GPU2"): "NV12", ("GPU3", "GPU3"): "X"},
    },
    "asus-esc8000a-e12-4gpu-4nic-2numa-amd.txt": {
        "gpus": 4, "nics": ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"], "columns": ALL,
        "affinity": {"GPU0": ("0-31", 0), "GPU2": ("32-63", 1), "GPU3": ("32-63", 1)},
        "codes": {("GPU0", "GPU1"): "NODE", ("GPU0", "GPU2"): "SYS", ("GPU2", "NIC2"): "NODE",
                  ("GPU1", "NIC3"): "SYS", ("NIC0", "NIC1"): "PIX", ("NIC2", "NIC3"): "PIX"},
    },
    "dgx-a100-8gpu-10nic-tabs.txt": {
        "gpus": 8, "nics": [f"mlx5_{i}" for i in range(10)], "columns": BOTH,
        "affinity": {"GPU0": ("48-63,176-191", 3), "GPU2": ("16-31,144-159", 1),
                     "GPU4": ("112-127,240-255", 7), "GPU7": ("80-95,208-223", 5)},
        "codes": {("GPU0", "GPU7"): "NV12", ("GPU0", "NIC0"): "PXB", ("GPU0", "NIC2"): "SYS",
                  ("GPU3", "NIC3"): "PXB", ("GPU6", "NIC7"): "PXB", ("NIC8", "NIC9"): "PIX",
                  ("NIC8", "GPU0"): "SYS"},
    },
    "dual-gpu-nv2-no-legend.txt": {
        "gpus": 2, "nics": [], "columns": BOTH,
        "affinity": {"GPU0": ("0-23", None), "GPU1": ("0-23", None)},
        "codes": {("GPU0", "GPU1"): "NV2", ("GPU1", "GPU0"): "NV2"},
    },
    "dual-gpu-phb-no-nvlink.txt": {
        "gpus": 2, "nics": [], "columns": BOTH,
        "affinity": {"GPU0": ("0-11", None), "GPU1": ("0-11", None)},
        "codes": {("GPU0", "GPU1"): "PHB"},
    },
    "gcp-a3-h100-8gpu-nv18-tabs-no-nics.txt": {
        "gpus": 8, "nics": [], "columns": ALL,
        "affinity": {"GPU0": ("0-51,104-155", 0), "GPU7": ("52-103,156-207", 1)},
        "codes": {("GPU0", "GPU7"): "NV18", ("GPU6", "GPU1"): "NV18"},
    },
    "h100-8gpu-8nic-2nics-per-gpu-pair-sglang-env.txt": {
        "gpus": 8, "nics": [f"mlx5_{i}" for i in range(8)], "columns": ALL,
        "affinity": {"GPU0": ("0-47,96-143", 0), "GPU4": ("48-95,144-191", 1)},
        "codes": {("GPU0", "GPU7"): "NV18", ("GPU0", "NIC0"): "PIX", ("GPU0", "NIC1"): "PIX",
                  ("GPU0", "NIC2"): "NODE", ("GPU0", "NIC4"): "SYS", ("GPU1", "NIC0"): "NODE",
                  ("GPU4", "NIC4"): "PIX", ("GPU6", "NIC7"): "PIX", ("NIC7", "NIC6"): "PIX",
                  ("NIC3", "NIC4"): "SYS"},
    },
    "h100-8gpu-nv18-condensed.txt": {
        "gpus": 8, "nics": [], "columns": BOTH,
        "affinity": {"GPU0": ("0-51", 0), "GPU3": ("0-51", 0), "GPU4": ("52-103", 1)},
        "codes": {("GPU0", "GPU7"): "NV18", ("GPU4", "GPU3"): "NV18"},
    },
    "h100-single-gpu-vm-ansi-header.txt": {
        "gpus": 1, "nics": [], "columns": ALL,
        "affinity": {"GPU0": ("0-19", 0)}, "codes": {("GPU0", "GPU0"): "X"},
    },
    "l40s-single-gpu-ansi-header.txt": {
        "gpus": 1, "nics": [], "columns": ALL,
        "affinity": {"GPU0": ("0-7", 0)}, "codes": {("GPU0", "GPU0"): "X"},
    },
    "oci-bm-gpu4-8-a100-8gpu-18nic.txt": {
        "gpus": 8, "nics": [f"mlx5_{i}" for i in range(18)], "columns": ALL,
        "affinity": {"GPU0": ("48-63", 3), "GPU2": ("16-31", 1), "GPU4": ("112-127", 7),
                     "GPU6": ("80-95", 5)},
        "codes": {("GPU0", "NIC5"): "PXB", ("GPU0", "NIC0"): "SYS", ("GPU2", "NIC1"): "PXB",
                  ("GPU4", "NIC14"): "PXB", ("GPU6", "NIC12"): "PXB", ("NIC1", "NIC2"): "PIX",
                  ("NIC16", "NIC17"): "PIX", ("NIC13", "NIC12"): "SYS"},
    },
    "p40-8gpu-pcie-switch-pix-pxb-soc-old-format.txt": {
        "gpus": 8, "nics": ["mlx5_0"], "columns": ("CPU Affinity",),
        "affinity": {"GPU0": ("0-13", None), "GPU7": ("0-13", None)},
        "codes": {("GPU0", "GPU3"): "PIX", ("GPU0", "GPU4"): "PXB", ("GPU5", "GPU6"): "PIX",
                  ("GPU0", "mlx5_0"): "SYS", ("NIC0", "GPU7"): "SYS"},
    },
    "power8-minsky-4gpu-nv2-soc-smt-affinity.txt": {
        "gpus": 4, "nics": ["mlx5_0", "mlx5_1"], "columns": ("CPU Affinity",),
        "affinity": {"GPU0": (POWER8_SOCKET0, None), "GPU1": (POWER8_SOCKET0, None),
                     "GPU2": (POWER8_SOCKET1, None), "GPU3": (POWER8_SOCKET1, None)},
        "codes": {("GPU0", "GPU1"): "NV2", ("GPU2", "GPU3"): "NV2", ("GPU0", "GPU2"): "SYS",
                  ("mlx5_0", "mlx5_1"): "PIX", ("GPU3", "mlx5_1"): "SYS"},
    },
    "puget-threadripper-2gpu-2nic-phb.txt": {
        "gpus": 2, "nics": ["mlx5_0", "mlx5_1"], "columns": ALL,
        "affinity": {"GPU0": ("0-23", 0), "GPU1": ("0-23", 0)},
        "codes": {("GPU0", "GPU1"): "PHB", ("GPU0", "NIC0"): "NODE", ("NIC0", "NIC1"): "PIX"},
    },
    "windows-rtx-2080-super-empty-affinity.txt": {
        "gpus": 1, "nics": [], "columns": ALL,
        "affinity": {"GPU0": (None, None)}, "codes": {("GPU0", "GPU0"): "X"},
    },
}  # fmt: skip
NOT_MATRICES = {
    "h100-8gpu-p2p-read-ok.txt",  # test_p2p_matrix.py
    "l4-2gpu-p2p-read-cns.txt",
    "windows-rtx-2080-super-topo-m-error.txt",  # below
}


def _parse(name: str) -> TopoMatrix:
    return parse_topo_matrix(fixture_path(f"topo/{name}").read_text(encoding="utf-8"))


def test_every_captured_topology_has_its_expectations() -> None:
    assert set(fixture_names("topo")) == set(EXPECTED) | NOT_MATRICES


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_it_reads_devices_codes_and_affinities_of_each_capture(name: str) -> None:
    expected = EXPECTED[name]
    matrix = _parse(name)
    assert [d.id for d in matrix.gpus] == [f"GPU{i}" for i in range(expected["gpus"])]
    assert [d.name for d in matrix.nics] == expected["nics"]
    assert [d.id for d in matrix.nics] == [f"NIC{i}" for i in range(len(expected["nics"]))]
    assert matrix.affinity_columns == expected["columns"]
    for gpu, (cpu, numa) in expected["affinity"].items():
        device = matrix.device(gpu)
        assert (device.cpu_affinity, device.numa_affinity, device.gpu_numa_id) == (cpu, numa, None)
    for (a, b), code in expected["codes"].items():
        assert matrix.code(a, b) == code, (a, b)
    size = len(matrix.devices)
    assert all(matrix.raw_codes[i][i] == "X" for i in range(size))


def test_old_format_keeps_soc_as_printed_and_reports_it_as_sys() -> None:
    matrix = _parse("p40-8gpu-pcie-switch-pix-pxb-soc-old-format.txt")
    assert matrix.raw_code("GPU0", "mlx5_0") == "SOC"
    assert matrix.code("GPU0", "mlx5_0") == "SYS"
    assert matrix.device("mlx5_0").label == "mlx5_0"
    assert matrix.nic_legend == {}
    assert matrix.legend["SOC"] == (
        "Connection traversing PCIe as well as the SMP link between CPU sockets(e.g. QPI)"
    )
    assert matrix.legend["X"] == "Self"


def test_the_nic_legend_maps_nic_columns_to_device_names() -> None:
    matrix = _parse("oci-bm-gpu4-8-a100-8gpu-18nic.txt")
    assert matrix.nic_legend["NIC17"] == "mlx5_17"
    assert matrix.device("mlx5_13").id == "NIC13"
    assert {matrix.code("NIC13", f"GPU{i}") for i in range(8)} == {"SYS"}
    assert len(matrix.devices) == 26
    assert matrix.legend["NV#"] == "Connection traversing a bonded set of # NVLinks"


def test_ansi_underline_escapes_around_the_header_are_ignored() -> None:
    raw = fixture_path("topo/h100-single-gpu-vm-ansi-header.txt").read_text(encoding="utf-8")
    assert "\x1b[4m" in raw
    matrix = parse_topo_matrix(raw)
    assert [d.label for d in matrix.devices] == ["GPU0"]
    assert len(matrix.legend) == 7


def test_windows_error_output_raises_a_parse_error_quoting_it() -> None:
    text = fixture_path("topo/windows-rtx-2080-super-topo-m-error.txt").read_text(encoding="utf-8")
    with pytest.raises(TopoParseError, match=r"ERROR: Option -m is missing its value"):
        parse_topo_matrix(text)


def test_empty_output_and_a_short_row_raise_parse_errors() -> None:
    with pytest.raises(TopoParseError, match="empty"):
        parse_topo_matrix("")
    with pytest.raises(TopoParseError, match="row GPU1: expected 2 link codes"):
        parse_topo_matrix("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV4\t0-7\nGPU1\tNV4\n")
    with pytest.raises(TopoParseError, match="no row for GPU1"):
        parse_topo_matrix("\tGPU0\tGPU1\nGPU0\t X \tNV4\n")


def test_windows_empty_affinity_survives_tabs_expanded_to_spaces() -> None:
    text = fixture_path("topo/windows-rtx-2080-super-empty-affinity.txt").read_text()
    matrix = parse_topo_matrix(text.expandtabs(8))
    device = matrix.device("GPU0")
    assert (device.cpu_affinity, device.numa_affinity, device.gpu_numa_id) == (None, None, None)


def test_a_gpu_numa_id_is_read_from_the_last_cell_after_the_padding_tab() -> None:
    text = "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-71\t0\t\t4\n"
    for variant in (text, text.expandtabs(8)):
        device = parse_topo_matrix(variant).device("GPU0")
        assert (device.cpu_affinity, device.numa_affinity, device.gpu_numa_id) == ("0-71", 0, 4)
