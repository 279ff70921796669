"""Node shapes for the simulator, with their facts copied from real captures.

The product never reads the fixtures at run time; the numbers below were read off these files
in ``shared/fixtures`` (paths relative to it) and are constants here:

* ``hgx-h100-8`` — ``nvidia-smi-xml/h100-80gb-hbm3-8gpu-hgx-vm-fabric-completed-driver570.xml``:
  name, 81559 MiB total / 469 MiB reserved, 700 W limit (min 200 W), idle 69-72 W at 32-34 °C
  with memory at 39-41 °C, SM/graphics 345 MHz idle and 1980 MHz max, memory 2619 MHz, fan N/A,
  bus ids 04/05/0B/0C/84/85/8B/8C, driver 570.86.15, CUDA 12.8. Loaded: 632 W at 59 °C, memory
  54 °C (``nvidia-smi-csv/h100-80gb-hbm3-vm-load-query-gpu-all-fields-driver590.csv``).
  Topology: NV18 full mesh through NVSwitch, two NUMA nodes with CPU affinity 0-51 / 52-103
  (``topo/h100-8gpu-nv18-condensed.txt``); 18 links per GPU at 26.562 GB/s
  (``nvlink/h100-sxm-18-links-status.txt``); PCIe Gen5 x16, retired pages N/A and remapped
  rows 0 (the load CSV).
* ``pcie-l40s-4`` — ``nvidia-smi-csv/l40s-{idle,load}-query-gpu-all-fields-driver595.csv``:
  name, 46068 MiB total / 609 MiB reserved, 350 W limit (min 100 W), SM 2520 MHz max, memory
  9001 MHz, no memory temperature and no fan reading (both N/A), driver 595.80. That CSV has no
  CUDA version; 13.2 is what the other driver-595 captures report
  (``nvidia-smi-xml/rtx-3080-driver595-v13.xml``). Topology: 4 PCIe GPUs without NVLink, two
  per NUMA node (``topo/asus-esc8000a-e12-4gpu-4nic-2numa-amd.txt``); bus ids 01/41/81/C1 follow
  the AMD EPYC layout of ``nvlink/rtx-4090-8gpu-q-text-addressing-unknown-error.txt``
  (01/21/41/61/81/A1/C1/E1), every other slot. PCIe Gen4 x16, retired pages N/A and remapped
  rows 0 (the load CSV).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

MIB = 1024 * 1024


@dataclass(frozen=True)
class NodeShape:
    """The hardware facts of one simulated node kind.

    Attributes:
        key: the shape's name, e.g. ``"hgx-h100-8"``.
        gpu_name: ``nvmlDeviceGetName``.
        pci_bus_ids: ``nvmlDeviceGetPciInfo().busId`` per GPU index; its length is the GPU count.
        mem_total_bytes, mem_reserved_bytes: ``nvmlDeviceGetMemoryInfo_v2`` total/reserved.
        power_limit_w, power_min_w, power_idle_w: enforced limit, lowest settable limit, idle draw.
        temp_idle_c, temp_load_c: GPU temperature idle and at full power (steady state).
        mem_temp_offset_c: memory minus GPU temperature, or ``None`` (no sensor: ``mem_temp_c``
            null).
        sm_clock_idle_mhz, sm_clock_max_mhz, mem_clock_mhz: ``nvmlDeviceGetClockInfo``.
        nvlink_peak_bytes_per_s: all links summed, one direction; ``None`` on PCIe-only nodes.
        pcie_peak_bytes_per_s: usable PCIe throughput, one direction.
        driver_version, cuda_version: ``nvmlSystemGetDriverVersion`` / CUDA driver version.
        pcie_gen_max: ``nvmlDeviceGetMaxPcieLinkGeneration`` (the link trains at it).
        nvlinks_per_gpu: NVLinks of each GPU (0 on PCIe-only nodes).
        nvlink_speed_gbps: one link's speed in GB/s as nvidia-smi prints it.
        cpus_per_numa: CPUs of each of the two NUMA nodes (``topo -m`` CPU affinity).
    """

    key: str
    gpu_name: str
    pci_bus_ids: tuple[str, ...]
    mem_total_bytes: int
    mem_reserved_bytes: int
    power_limit_w: float
    power_min_w: float
    power_idle_w: float
    temp_idle_c: float
    temp_load_c: float
    mem_temp_offset_c: float | None
    sm_clock_idle_mhz: int
    sm_clock_max_mhz: int
    mem_clock_mhz: int
    nvlink_peak_bytes_per_s: float | None
    pcie_peak_bytes_per_s: float
    driver_version: str
    cuda_version: str
    pcie_gen_max: int = 4
    nvlinks_per_gpu: int = 0
    nvlink_speed_gbps: float | None = None
    cpus_per_numa: int = 32

    @property
    def gpu_count(self) -> int:
        """The number of GPUs (the length of :attr:`pci_bus_ids`)."""
        return len(self.pci_bus_ids)


HGX_H100_8 = NodeShape(
    key="hgx-h100-8",
    gpu_name="NVIDIA H100 80GB HBM3",
    pci_bus_ids=tuple(
        f"00000000:{bus}:00.0" for bus in ("04", "05", "0B", "0C", "84", "85", "8B", "8C")
    ),
    mem_total_bytes=81559 * MIB,
    mem_reserved_bytes=469 * MIB,
    power_limit_w=700.0,
    power_min_w=200.0,
    power_idle_w=70.0,
    temp_idle_c=33.0,
    temp_load_c=62.0,
    mem_temp_offset_c=7.0,
    sm_clock_idle_mhz=345,
    sm_clock_max_mhz=1980,
    mem_clock_mhz=2619,
    # NV18: 18 NVLink4 links x 25 GB/s per direction.
    nvlink_peak_bytes_per_s=18 * 25e9,
    # PCIe Gen5 x16 (the load capture's pcie.link.gen.current = 5, width 16).
    pcie_peak_bytes_per_s=50e9,
    driver_version="570.86.15",
    cuda_version="12.8",
    pcie_gen_max=5,
    # nvlink/h100-sxm-18-links-status.txt: 18 links at 26.562 GB/s.
    nvlinks_per_gpu=18,
    nvlink_speed_gbps=26.562,
    # topo/h100-8gpu-nv18-condensed.txt: CPU affinity 0-51 and 52-103.
    cpus_per_numa=52,
)

PCIE_L40S_4 = NodeShape(
    key="pcie-l40s-4",
    gpu_name="NVIDIA L40S",
    pci_bus_ids=tuple(f"00000000:{bus}:00.0" for bus in ("01", "41", "81", "C1")),
    mem_total_bytes=46068 * MIB,
    mem_reserved_bytes=609 * MIB,
    power_limit_w=350.0,
    power_min_w=100.0,
    # Modelling choice: the "idle" capture was taken at 100 % util (145 W); a truly idle L40S
    # sits well under its 100 W minimum limit.
    power_idle_w=36.0,
    temp_idle_c=30.0,
    temp_load_c=70.0,
    mem_temp_offset_c=None,
    sm_clock_idle_mhz=210,
    sm_clock_max_mhz=2520,
    mem_clock_mhz=9001,
    nvlink_peak_bytes_per_s=None,
    # PCIe Gen4 x16 (pcie.link.gen.current = 4, width 16).
    pcie_peak_bytes_per_s=25e9,
    driver_version="595.80",
    cuda_version="13.2",
    pcie_gen_max=4,
    # topo/asus-esc8000a-e12-4gpu-4nic-2numa-amd.txt: CPU affinity 0-31 and 32-63.
    cpus_per_numa=32,
)

SHAPES: dict[str, NodeShape] = {s.key: s for s in (HGX_H100_8, PCIE_L40S_4)}


def shape_for_gpu_count(gpu_count: int) -> NodeShape:
    """Return the shape with exactly ``gpu_count`` GPUs, else the nearest shape resized to it.

    Ties go to the larger shape. Extra GPUs beyond the captured layout get bus ids after the
    last captured one (``…:8D:00.0``, ``…:8E:00.0`` …).

    Raises:
        ValueError: ``gpu_count`` is negative or above 256 (the payload's inventory limit).
    """
    if not 0 <= gpu_count <= 256:
        raise ValueError(f"gpu_count must be 0..256, got {gpu_count}")
    nearest = min(SHAPES.values(), key=lambda s: (abs(s.gpu_count - gpu_count), -s.gpu_count))
    if nearest.gpu_count == gpu_count:
        return nearest
    bus_ids = list(nearest.pci_bus_ids[:gpu_count])
    last_bus = int(nearest.pci_bus_ids[-1].split(":")[1], 16)
    while len(bus_ids) < gpu_count:
        last_bus += 1
        bus_ids.append(f"{last_bus // 256:08X}:{last_bus % 256:02X}:00.0")
    return replace(nearest, key=f"{nearest.key}-as-{gpu_count}", pci_bus_ids=tuple(bus_ids))
