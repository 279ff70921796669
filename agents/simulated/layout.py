"""Where things sit in a simulated node: NUMA nodes, CPU affinity, NVSwitches, NICs and the
nvidia-smi ``topo -m`` code between two devices.

Shared by the simulated collector (GPU part of the topology, NVLink remote ends) and the
simulated host source (NICs), so both halves of the topology agree.

Every node has two NUMA nodes: the first half of the GPUs (and of the NICs) on node 0, the rest
on node 1, as in ``topo/h100-8gpu-nv18-condensed.txt`` and
``topo/asus-esc8000a-e12-4gpu-4nic-2numa-amd.txt``.
"""

from __future__ import annotations

from agents.simulated.shapes import NodeShape

#: PCI addresses of the four NVSwitches of an HGX H100 board (the remote end of GPU links).
NVSWITCH_BUS_IDS: tuple[str, ...] = tuple(
    f"00000000:{bus}:00.0" for bus in ("C7", "C8", "C9", "CA")
)
#: How many of a GPU's 18 links go to each NVSwitch.
LINKS_PER_NVSWITCH: tuple[int, ...] = (5, 4, 4, 5)


def numa_node(index: int, count: int) -> int:
    """The NUMA node of device ``index`` of ``count`` (first half 0, second half 1)."""
    return 0 if count < 2 or index < (count + 1) // 2 else 1


def cpu_affinity(numa: int, shape: NodeShape) -> str:
    """The CPU list of NUMA node ``numa`` as ``topo -m`` prints it (``"52-103"``)."""
    first = numa * shape.cpus_per_numa
    return f"{first}-{first + shape.cpus_per_numa - 1}"


def nvswitch_of_link(link: int) -> str:
    """The PCI address of the NVSwitch that GPU link ``link`` ends at."""
    bound = 0
    for switch, links in enumerate(LINKS_PER_NVSWITCH):
        bound += links
        if link < bound:
            return NVSWITCH_BUS_IDS[switch]
    return NVSWITCH_BUS_IDS[-1]


def nic_count(gpu_count: int) -> int:
    """InfiniBand ports of a node: one per GPU on an 8-GPU HGX node, else four."""
    return 8 if gpu_count >= 8 else 4


def nic_bus_id(index: int, shape: NodeShape) -> str:
    """A NIC's PCI address (sysfs form): on the PCIe switch of the GPU it serves."""
    gpu = nearest_gpu(index, len(shape.pci_bus_ids), nic_count(len(shape.pci_bus_ids)))
    bus = 0x10 + index if gpu is None else int(shape.pci_bus_ids[gpu].split(":")[1], 16) + 0x10
    return f"0000:{bus % 256:02x}:00.0"


def nearest_gpu(nic: int, gpu_count: int, nics: int) -> int | None:
    """The GPU sharing a PCIe switch with NIC ``nic`` (``PIX``), or None without GPUs."""
    if gpu_count == 0:
        return None
    return nic * gpu_count // nics


def pci_distance(numa_a: int, numa_b: int, *, same_switch: bool = False) -> str:
    """The ``topo -m`` code of a PCIe path: ``PIX`` behind one switch, ``NODE`` within a NUMA
    node, ``SYS`` across the inter-socket link."""
    if same_switch:
        return "PIX"
    return "NODE" if numa_a == numa_b else "SYS"
