"""The simulated node's NVLinks and topology: every GPU's links to the NVSwitches, their traffic
and error counters, the ``nvlink_down`` fault, and the GPU part of ``topo -m``.

A link that goes down (``nvlink_down``) carries nothing, its CRC and recovery counters climb while
the driver keeps retraining it, the GPU's NVLink throughput shrinks by one link's share, and
``topo -m`` shows one link fewer (``NV17``) between that GPU and every other: through the
NVSwitches each GPU reaches every peer over all of its links.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agents.payload import format_timestamp
from agents.simulated.gpu import SimGpu
from agents.simulated.layout import cpu_affinity, numa_node, nvswitch_of_link, pci_distance
from agents.simulated.shapes import NodeShape

CRC_ERROR_MEAN_S = 6 * 3600.0  # a healthy link's occasional CRC flit error
DOWN_CRC_PER_READ = (40, 400)  # errors per reading while a down link keeps retraining


@dataclass
class _Link:
    crc_errors: int = 0
    replay_errors: int = 0
    recovery_errors: int = 0
    down_until: datetime | None = None
    down: bool = False


@dataclass
class SimLinks:
    """The NVLinks of every GPU of a node of ``shape`` (none on PCIe-only nodes)."""

    shape: NodeShape
    rng: random.Random
    links: dict[int, list[_Link]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for index in range(self.shape.gpu_count):
            self.links[index] = [_Link() for _ in range(self.shape.nvlinks_per_gpu)]

    def up_count(self, gpu_index: int) -> int:
        """Links of GPU ``gpu_index`` that are up."""
        return sum(1 for link in self.links.get(gpu_index, []) if not link.down)

    def take_down(self, gpu_index: int, link: int | None, until: datetime | None) -> int:
        """Take a link of GPU ``gpu_index`` down (a random up link when ``link`` is None) until
        ``until`` (None: until further notice); returns the link number.

        Raises:
            ValueError: the node has no NVLink, or every link of the GPU is down already.
        """
        links = self.links.get(gpu_index, [])
        up = [n for n, state in enumerate(links) if not state.down]
        if not up:
            raise ValueError(f"GPU {gpu_index} has no NVLink up")
        number = link if link is not None else self.rng.choice(up)
        state = links[number]
        state.down, state.down_until = True, until
        state.recovery_errors += 1
        return number

    def expire(self, now: datetime) -> list[tuple[int, int]]:
        """Bring back the links whose fault ended by ``now``; returns (GPU, link) pairs."""
        back = []
        for gpu_index, links in self.links.items():
            for number, state in enumerate(links):
                if state.down and state.down_until is not None and state.down_until <= now:
                    state.down, state.down_until = False, None
                    back.append((gpu_index, number))
        return back

    def read(self, gpus: list[SimGpu], now: datetime, dt_s: float) -> list[dict[str, Any]]:
        """One ``nvlinks`` entry per link of every GPU that is not lost, dated ``now``; the
        GPU's NVLink throughput is shared evenly by its up links."""
        stamp = format_timestamp(now)
        entries = []
        for gpu in gpus:
            if gpu.lost:
                continue
            links = self.links.get(gpu.index, [])
            up = max(1, self.up_count(gpu.index))
            for number, state in enumerate(links):
                if state.down:
                    state.crc_errors += self.rng.randint(*DOWN_CRC_PER_READ)
                    state.recovery_errors += 1
                elif self.rng.random() < dt_s / CRC_ERROR_MEAN_S:
                    state.crc_errors += 1
                entries.append(
                    {
                        "gpu_uuid": gpu.uuid,
                        "link": number,
                        "sampled_at": stamp,
                        "state": "down" if state.down else "up",
                        "speed_gbps": None if state.down else self.shape.nvlink_speed_gbps,
                        "remote_pci_bus_id": nvswitch_of_link(number),
                        "remote_device_type": "nvswitch",
                        "tx_bytes_per_s": 0.0 if state.down else round(gpu.nvlink_tx / up, 1),
                        "rx_bytes_per_s": 0.0 if state.down else round(gpu.nvlink_rx / up, 1),
                        "crc_errors": state.crc_errors,
                        "replay_errors": state.replay_errors,
                        "recovery_errors": state.recovery_errors,
                    }
                )
        return entries

    def topology(self, gpus: list[SimGpu], now: datetime) -> dict[str, Any]:
        """The GPU part of the topology: a device per readable GPU, a link per GPU pair
        (``NV#`` through the NVSwitches, else the PCIe distance); a lost GPU cannot be read, so
        the topology is then partial."""
        count = self.shape.gpu_count
        readable = [g for g in gpus if not g.lost]
        devices = []
        for gpu in readable:
            numa = numa_node(gpu.index, count)
            devices.append(
                {
                    "id": f"GPU{gpu.index}",
                    "kind": "gpu",
                    "gpu_uuid": gpu.uuid,
                    "pci_bus_id": gpu.pci_bus_id,
                    "numa_node": numa,
                    "cpu_affinity": cpu_affinity(numa, self.shape),
                    "pcie_gen_current": self.shape.pcie_gen_max,
                    "pcie_gen_max": self.shape.pcie_gen_max,
                    "pcie_width_current": 16,
                    "pcie_width_max": 16,
                }
            )
        links = []
        for i, a in enumerate(readable):
            for b in readable[i + 1 :]:
                bonded = min(self.up_count(a.index), self.up_count(b.index))
                kind = (
                    f"NV{bonded}"
                    if bonded
                    else pci_distance(numa_node(a.index, count), numa_node(b.index, count))
                )
                links.append({"a": f"GPU{a.index}", "b": f"GPU{b.index}", "type": kind})
        errors = [
            f"GPU{g.index}: NVML_ERROR_GPU_IS_LOST: not in the topology" for g in gpus if g.lost
        ]
        return {
            "collected_at": format_timestamp(now),
            "source": "simulated",
            "partial": bool(errors),
            "errors": errors,
            "devices": devices,
            "links": links,
        }
