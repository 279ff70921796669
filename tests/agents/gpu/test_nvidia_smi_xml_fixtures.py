"""Every real ``nvidia-smi -q -x`` capture parses to the exact values printed in it.

One row per capture (first GPU): versions, GPU counts, identity, memory and a cross-section of
metrics. ``m`` uses short names (see :data:`SHORT`); ``None`` means nvidia-smi printed N/A or
the DTD has no such field. The unusual captures get their own tests in
``test_nvidia_smi_xml_unusual.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from agents.nvidia_smi import parse_nvidia_smi_xml
from agents.nvml.metrics import ALL_METRIC_KEYS
from tests.shared_fixtures import fixture_names, fixture_path

SHORT = {
    "temp": "temp_c",
    "w": "power_w",
    "limit": "power_limit_w",
    "sm": "sm_clock_mhz",
    "mem": "mem_clock_mhz",
    "util": "util_gpu_pct",
    "fan": "fan_pct",
    "p": "pstate",
    "reasons": "clocks_event_reasons",
    "gen": "pcie_link_gen",
    "width": "pcie_link_width",
    "tx": "pcie_tx_bytes_per_s",
    "ecc_c": "ecc_corrected_aggregate_count",
    "ecc_u": "ecc_uncorrected_aggregate_count",
    "dbe": "retired_pages_dbe_count",
    "remap_u": "remapped_rows_uncorrectable_count",
}
MIB = 2**20


@dataclass
class Case:
    file: str
    driver: str
    cuda: str | None
    attached: int
    gpus: int
    name: str
    bus: str
    mem_mib: int | None
    used_mib: int | None
    m: dict[str, Any] = field(default_factory=dict)
    pids: list[int] = field(default_factory=list)


# fmt: off
CASES = [
    Case("a100-sxm4-40gb-mig-vm-driver510.xml", "510.47.03", "11.6",
         attached=1, gpus=1, name="NVIDIA A100-SXM4-40GB",
         bus="00000000:00:04.0", mem_mib=40960, used_mib=38,
         m=dict(temp=36, w=66.92, limit=400.0, sm=1410, mem=1215, util=None, fan=None, p=0,
                reasons=0x0, gen=4, width=16, tx=0, ecc_c=0, ecc_u=0, dbe=None, remap_u=None),
         pids=[]),
    Case("a100-sxm4-80gb-mig-4x1g-driver535.xml", "535.54.03", "12.2",
         attached=4, gpus=1, name="NVIDIA A100-SXM4-80GB",
         bus="00000000:01:00.0", mem_mib=81920, used_mib=50,
         m=dict(temp=27, w=67.03, limit=500.0, sm=1275, mem=1593, util=None, fan=None, p=0,
                reasons=0x0, gen=4, width=16, tx=4096000, ecc_c=0, ecc_u=0, dbe=None,
                remap_u=None),
         pids=[]),
    Case("a10g-aws-driver515.xml", "515.105.01", "11.7",
         attached=1, gpus=1, name="NVIDIA A10G",
         bus="00000000:00:1E.0", mem_mib=23028, used_mib=22,
         m=dict(temp=17, w=25.58, limit=300.0, sm=210, mem=405, util=0, fan=0, p=8, reasons=0x1,
                gen=1, width=8, tx=0, ecc_c=0, ecc_u=0, dbe=None, remap_u=0),
         pids=[725]),
    Case("geforce-gt-730-minimal-driver384.xml", "384.111", None,
         attached=1, gpus=1, name="GeForce GT 730",
         bus="00000000:01:00.0", mem_mib=None, used_mib=None,
         m=dict(temp=None, w=None, limit=None, sm=None, mem=None, util=None, fan=None, p=None,
                reasons=None, gen=None, width=None, tx=None, ecc_c=None, ecc_u=None, dbe=None,
                remap_u=None),
         pids=[]),
    Case("geforce-gtx-1050-no-doctype-driver515.xml", "515.65.01", "11.7",
         attached=1, gpus=1, name="NVIDIA GeForce GTX 1050",
         bus="00000000:01:00.0", mem_mib=4096, used_mib=65,
         m=dict(temp=44, w=None, limit=None, sm=683, mem=2504, util=7, fan=None, p=3, reasons=0x1,
                gen=3, width=8, tx=51200000, ecc_c=None, ecc_u=None, dbe=None, remap_u=None),
         pids=[1200, 30091]),
    Case("geforce-gtx-1070-x2-of-6-driver384.xml", "384.66", None,
         attached=6, gpus=2, name="GeForce GTX 1070",
         bus="00000000:01:00.0", mem_mib=8112, used_mib=2028,
         m=dict(temp=60, w=119.47, limit=180.0, sm=1923, mem=3802, util=100, fan=41, p=2,
                reasons=0x0, gen=3, width=1, tx=25600000, ecc_c=None, ecc_u=None, dbe=None,
                remap_u=None),
         pids=[1357, 2384, 3093]),
    Case("geforce-rtx-2080ti-x2-ecc-unsupported-driver410.xml", "410.73", "10.0",
         attached=2, gpus=2, name="GeForce RTX 2080 Ti",
         bus="00000000:02:00.0", mem_mib=10989, used_mib=0,
         m=dict(temp=24, w=2.12, limit=250.0, sm=300, mem=405, util=0, fan=22, p=8, reasons=0x1,
                gen=1, width=16, tx=0, ecc_c=None, ecc_u=None, dbe=None, remap_u=None),
         pids=[]),
    Case("grid-p4-1q-vgpu-windows-driver513.xml", "513.46", "11.6",
         attached=1, gpus=1, name="GRID P4-1Q",
         bus="00000000:00:0B.0", mem_mib=1024, used_mib=807,
         m=dict(temp=0, w=None, limit=None, sm=0, mem=0, util=0, fan=None, p=8, reasons=None,
                gen=None, width=None, tx=None, ecc_c=None, ecc_u=None, dbe=None, remap_u=None),
         pids=[1188, 2124, 3696, 3972, 7208, 7284, 7880, 8788, 9468, 9804, 11528, 12804, 15104]),
    Case("gt-1030-arch-driver470.xml", "470.74", "11.4",
         attached=1, gpus=1, name="NVIDIA GeForce GT 1030",
         bus="00000000:2D:00.0", mem_mib=1998, used_mib=875,
         m=dict(temp=36, w=None, limit=30.0, sm=1265, mem=3003, util=0, fan=35, p=0, reasons=0x1,
                gen=3, width=4, tx=54272000, ecc_c=None, ecc_u=None, dbe=None, remap_u=None),
         pids=[607, 746, 750, 816, 992, 1000, 1005, 1006, 1264, 2028]),
    Case("gtx-1660-ti-driver418-graphics-device.xml", "418.43", "10.1",
         attached=1, gpus=1, name="Graphics Device",
         bus="00000000:43:00.0", mem_mib=5912, used_mib=0,
         m=dict(temp=40, w=8.93, limit=130.0, sm=300, mem=405, util=0, fan=0, p=8, reasons=0x1,
                gen=1, width=16, tx=0, ecc_c=None, ecc_u=None, dbe=None, remap_u=None),
         pids=[]),
    Case("h100-80gb-hbm3-8gpu-hgx-vm-fabric-completed-driver570.xml", "570.86.15", "12.8",
         attached=8, gpus=8, name="NVIDIA H100 80GB HBM3",
         bus="00000000:04:00.0", mem_mib=81559, used_mib=1,
         m=dict(temp=33, w=70.93, limit=700.0, sm=345, mem=2619, util=0, fan=None, p=0,
                reasons=0x1, gen=4, width=16, tx=521216, ecc_c=0, ecc_u=0, dbe=None, remap_u=0),
         pids=[]),
    Case("quadro-p2000-driver525.xml", "525.125.06", "12.0",
         attached=1, gpus=1, name="Quadro P2000",
         bus="00000000:17:00.0", mem_mib=5120, used_mib=1,
         m=dict(temp=34, w=4.61, limit=75.0, sm=139, mem=405, util=0, fan=46, p=8, reasons=0x1,
                gen=1, width=8, tx=0, ecc_c=None, ecc_u=None, dbe=None, remap_u=None),
         pids=[]),
    Case("rtx-2070-x2-driver590-v13.xml", "590.44.01", "13.1",
         attached=2, gpus=2, name="NVIDIA GeForce RTX 2070",
         bus="00000000:01:00.0", mem_mib=8192, used_mib=1,
         m=dict(temp=14, w=9.23, limit=175.0, sm=300, mem=405, util=0, fan=35, p=8, reasons=0x1,
                gen=1, width=8, tx=399360, ecc_c=None, ecc_u=None, dbe=None, remap_u=None),
         pids=[]),
    Case("rtx-2080-x2-driver590-v13.xml", "590.44.01", "13.1",
         attached=2, gpus=2, name="NVIDIA GeForce RTX 2080",
         bus="00000000:01:00.0", mem_mib=8192, used_mib=1,
         m=dict(temp=15, w=1.0, limit=215.0, sm=300, mem=405, util=0, fan=31, p=8, reasons=0x1,
                gen=1, width=8, tx=349184, ecc_c=None, ecc_u=None, dbe=None, remap_u=None),
         pids=[]),
    Case("rtx-3060-driver570.xml", "570.124.04", "12.8",
         attached=1, gpus=1, name="NVIDIA GeForce RTX 3060",
         bus="00000000:2D:00.0", mem_mib=12288, used_mib=116,
         m=dict(temp=42, w=11.6, limit=170.0, sm=210, mem=405, util=0, fan=0, p=8, reasons=0x1,
                gen=1, width=16, tx=563200, ecc_c=None, ecc_u=None, dbe=None, remap_u=None),
         pids=[]),
    Case("rtx-3060-laptop-driver515.xml", "515.65.01", "11.7",
         attached=1, gpus=1, name="NVIDIA GeForce RTX 3060 Laptop GPU",
         bus="00000000:01:00.0", mem_mib=6144, used_mib=5,
         m=dict(temp=45, w=8.7, limit=None, sm=210, mem=405, util=0, fan=None, p=8, reasons=0x1,
                gen=1, width=8, tx=0, ecc_c=None, ecc_u=None, dbe=None, remap_u=None),
         pids=[28543]),
    Case("rtx-3080-driver595-v13.xml", "595.58.03", "13.2",
         attached=1, gpus=1, name="NVIDIA GeForce RTX 3080",
         bus="00000000:0C:00.0", mem_mib=10240, used_mib=9184,
         m=dict(temp=27, w=139.62, limit=320.0, sm=1950, mem=9251, util=65, fan=0, p=2,
                reasons=0x0, gen=4, width=16, tx=1092299776, ecc_c=None, ecc_u=None, dbe=None,
                remap_u=None),
         pids=[]),
    Case("rtx-3080-linux-driver536.xml", "536.40", "12.2",
         attached=1, gpus=1, name="NVIDIA GeForce RTX 3080",
         bus="00000000:04:00.0", mem_mib=10240, used_mib=1128,
         m=dict(temp=31, w=22.78, limit=336.0, sm=210, mem=405, util=0, fan=0, p=8, reasons=0x1,
                gen=4, width=16, tx=1024000, ecc_c=None, ecc_u=None, dbe=None, remap_u=None),
         pids=[835, 1481, 2214, 4044, 42416]),
    Case("rtx-3090-driver525.xml", "525.147.05", "12.0",
         attached=1, gpus=1, name="NVIDIA GeForce RTX 3090",
         bus="00000000:00:10.0", mem_mib=24576, used_mib=1,
         m=dict(temp=37, w=27.23, limit=200.0, sm=0, mem=405, util=0, fan=0, p=8, reasons=0x1,
                gen=1, width=16, tx=0, ecc_c=None, ecc_u=None, dbe=None, remap_u=None),
         pids=[]),
    Case("rtx-3090-driver590-v13.xml", "590.44.01", "13.1",
         attached=1, gpus=1, name="NVIDIA GeForce RTX 3090",
         bus="00000000:09:00.0", mem_mib=24576, used_mib=7,
         m=dict(temp=32, w=35.06, limit=350.0, sm=210, mem=405, util=0, fan=0, p=8, reasons=0x4,
                gen=1, width=16, tx=499712, ecc_c=None, ecc_u=None, dbe=None, remap_u=None),
         pids=[]),
    Case("rtx-4000-sff-ada-driver595-v13.xml", "595.84", "13.2",
         attached=1, gpus=1, name="NVIDIA RTX 4000 SFF Ada Generation",
         bus="00000000:06:00.0", mem_mib=20475, used_mib=3534,
         m=dict(temp=38, w=8.81, limit=70.0, sm=210, mem=405, util=0, fan=30, p=8, reasons=0x1,
                gen=1, width=16, tx=849920, ecc_c=None, ecc_u=None, dbe=None, remap_u=0),
         pids=[1842, 3190, 4937, 34626]),
    Case("rtx-4090-driver535.xml", "535.86.05", "12.2",
         attached=1, gpus=1, name="NVIDIA GeForce RTX 4090",
         bus="00000000:84:00.0", mem_mib=24564, used_mib=2,
         m=dict(temp=40, w=26.84, limit=450.0, sm=210, mem=405, util=0, fan=0, p=8, reasons=0x1,
                gen=1, width=16, tx=0, ecc_c=None, ecc_u=None, dbe=None, remap_u=0),
         pids=[]),
    Case("rtx-pro-6000-blackwell-maxq-driver590-v13.xml", "590.44.01", "13.1",
         attached=1, gpus=1, name="NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
         bus="00000000:61:00.0", mem_mib=97887, used_mib=65720,
         m=dict(temp=24, w=3.97, limit=300.0, sm=180, mem=405, util=0, fan=30, p=8, reasons=0x0,
                gen=1, width=16, tx=540672, ecc_c=None, ecc_u=None, dbe=None, remap_u=0),
         pids=[116860]),
    Case("tesla-p100-pcie-16gb-driver510.xml", "510.47.03", "11.6",
         attached=1, gpus=1, name="Tesla P100-PCIE-16GB",
         bus="00000000:00:04.0", mem_mib=16384, used_mib=0,
         m=dict(temp=38, w=26.16, limit=250.0, sm=405, mem=715, util=0, fan=None, p=0,
                reasons=0x1, gen=3, width=16, tx=0, ecc_c=3, ecc_u=0, dbe=0, remap_u=None),
         pids=[]),
    Case("tesla-t4-driver515.xml", "515.105.01", "11.7",
         attached=1, gpus=1, name="Tesla T4",
         bus="00000000:00:1E.0", mem_mib=15360, used_mib=1032,
         m=dict(temp=40, w=26.78, limit=70.0, sm=585, mem=5000, util=0, fan=None, p=0,
                reasons=0x0, gen=3, width=8, tx=0, ecc_c=0, ecc_u=0, dbe=0, remap_u=None),
         pids=[675, 5762]),
    Case("tesla-v100-pcie-32gb-driver460.xml", "460.39", "11.2",
         attached=1, gpus=1, name="Tesla V100-PCIE-32GB",
         bus="00000000:21:01.0", mem_mib=32510, used_mib=12311,
         m=dict(temp=66, w=170.16, limit=250.0, sm=1380, mem=877, util=91, fan=None, p=0,
                reasons=0x0, gen=3, width=16, tx=64512000, ecc_c=0, ecc_u=0, dbe=0, remap_u=None),
         pids=[4027538, 4027590, 4157880, 4165319]),
    Case("tesla-v100-sxm3-32gb-dgx2-retired-pages-driver410.xml", "410.104", "10.0",
         attached=16, gpus=1, name="Tesla V100-SXM3-32GB",
         bus="00000000:34:00.0", mem_mib=32480, used_mib=0,
         m=dict(temp=33, w=50.6, limit=350.0, sm=135, mem=958, util=0, fan=None, p=0, reasons=0x1,
                gen=3, width=16, tx=0, ecc_c=291, ecc_u=7627, dbe=2, remap_u=None),
         pids=[]),
    Case("tesla-v100s-pcie-32gb-8gpu-vm-under-load-driver460.xml", "460.73.01", "11.2",
         attached=8, gpus=8, name="Tesla V100S-PCIE-32GB",
         bus="00000000:00:0D.0", mem_mib=32510, used_mib=31689,
         m=dict(temp=66, w=232.8, limit=250.0, sm=1410, mem=1107, util=97, fan=None, p=0,
                reasons=0x0, gen=3, width=16, tx=22528000, ecc_c=0, ecc_u=0, dbe=0, remap_u=None),
         pids=[37305]),
]
# fmt: on
FAILURE_OUTPUTS = {
    "error-gpu-is-lost-two-spaces.txt",
    "error-gpu-is-lost-windows-cmd-wrapped.txt",
    "error-unknown-error-no-space-busid-tesla-p4.txt",
}


def test_every_capture_in_the_folder_has_a_row_of_expected_values() -> None:
    covered = {case.file for case in CASES} | FAILURE_OUTPUTS
    assert set(fixture_names("nvidia-smi-xml")) == covered


@pytest.mark.parametrize("case", CASES, ids=[c.file for c in CASES])
def test_it_reads_the_values_printed_in_the_capture(case: Case) -> None:
    log = parse_nvidia_smi_xml(fixture_path(f"nvidia-smi-xml/{case.file}").read_bytes())
    assert (log.driver_version, log.cuda_version) == (case.driver, case.cuda)
    assert (log.attached_gpus, len(log.gpus)) == (case.attached, case.gpus)
    gpu = log.gpus[0]
    assert gpu.info["name"] == case.name
    assert gpu.info["pci_bus_id"] == case.bus
    assert gpu.info["uuid"] == "GPU-00000000-0000-0000-0000-000000000001"
    assert gpu.info["mem_total_bytes"] == (None if case.mem_mib is None else case.mem_mib * MIB)
    used = gpu.metrics["mem_used_bytes"]
    assert (None if used is None else used // MIB) == case.used_mib
    assert {short: gpu.metrics[SHORT[short]] for short in case.m} == case.m
    assert [p["pid"] for p in gpu.processes] == case.pids


@pytest.mark.parametrize("case", CASES, ids=[c.file for c in CASES])
def test_every_metric_that_is_none_has_a_reason(case: Case) -> None:
    log = parse_nvidia_smi_xml(fixture_path(f"nvidia-smi-xml/{case.file}").read_bytes())
    for gpu in log.gpus:
        assert set(gpu.metrics) == set(ALL_METRIC_KEYS)
        assert set(gpu.unavailable) == {k for k, v in gpu.metrics.items() if v is None}
        assert gpu.unavailable["energy_j"] == "NOT_REPORTED"
