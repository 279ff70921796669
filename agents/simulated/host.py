"""The simulated host source: storage (see :mod:`agents.simulated.storage`) and InfiniBand
ports of a simulated node, with traffic that follows its GPUs' load, and the host faults.

Ports are ``mlx5_0`` … (8 on an 8-GPU HGX node, else 4), port 1, 400 Gb/s NDR InfiniBand, each
on the PCIe switch of one GPU (``PIX``). ``ib_port_down`` takes a port down as a pulled or
failed cable does: state ``DOWN``, physical state ``Polling`` (as in
``proc/ibstat-h100-12ca-some-down-polling.txt``, whose down port reports rate 40), no traffic,
``link_downed`` counted once. ``ib_flap`` makes a port flap as a failing cable or transceiver
does: down for :data:`FLAP_DOWN_S` of every :data:`FLAP_PERIOD_S` (``link_downed`` counted each
time), up between.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from agents.collectors.base import Collector
from agents.collectors.host import HostSource
from agents.payload import format_timestamp
from agents.simulated.collector import SimulatedCollector, seed_from_hostname
from agents.simulated.faults import HOST_FAULT_KINDS
from agents.simulated.layout import nearest_gpu, nic_bus_id, nic_count, numa_node, pci_distance
from agents.simulated.storage import SimStorage

NDR_GBPS = 400.0
DOWN_RATE_GBPS = 40.0
PORT_PEAK = NDR_GBPS / 8 * 1e9 * 0.9  # usable bytes per second, one direction
DEFAULT_STORAGE_SLOW_S = 180.0
SYMBOL_ERROR_MEAN_S = 8 * 3600.0
DEFAULT_FLAP_S = 60.0
FLAP_PERIOD_S = 10.0
FLAP_DOWN_S = 2.0


@dataclass
class _Port:
    index: int
    gpu: int | None
    numa: int
    down_until: datetime | None = None
    down: bool = False
    symbol_errors: int = 0
    link_downed: int = 0
    recoveries: int = 0
    rcv_errors: int = 0
    flap_from: datetime | None = None
    flap_until: datetime | None = None


class SimulatedHostSource(HostSource):
    """Storage and NIC ports of the node simulated by ``collector`` (whose GPU load drives the
    traffic). Thread-safe: :meth:`inject` may be called from another thread than
    :meth:`collect`."""

    name = "simulated-host"

    def __init__(self, collector: Collector, *, seed: int | None = None) -> None:
        if not isinstance(collector, SimulatedCollector):
            raise TypeError(f"a simulated host needs a SimulatedCollector, not {collector!r}")
        self.collector = collector
        self.rng = random.Random(
            seed_from_hostname(f"{collector.hostname}/host") if seed is None else seed
        )
        gpu_count = collector.shape.gpu_count
        nics = nic_count(gpu_count)
        self.ports = []
        for i in range(nics):
            gpu = nearest_gpu(i, gpu_count, nics)
            numa = numa_node(gpu, gpu_count) if gpu is not None else numa_node(i, nics)
            self.ports.append(_Port(index=i, gpu=gpu, numa=numa))
        self.storage = SimStorage(random.Random(self.rng.getrandbits(64)))
        self._slow_until: datetime | None = None
        self._pending: list[tuple[str, int | None, float | None]] = []
        self._last: datetime | None = None
        self._lock = threading.Lock()

    def collect(self, now: datetime) -> dict[str, list[dict[str, Any]]]:
        """Advance to ``now`` and return ``disks``, ``mounts``, ``nfs_mounts`` and
        ``nic_ports`` dated ``now``; host faults injected since the last call start here."""
        loads = self.collector.gpu_loads()
        with self._lock:
            dt_s = 0.0 if self._last is None else max(0.0, (now - self._last).total_seconds())
            first = self._last is None
            self._last = now
            self._apply(now)
            stamp = format_timestamp(now)
            known = [load or 0.0 for load in loads]
            mean_load = sum(known) / len(known) if known else 0.0
            sections = self.storage.read(stamp, min(dt_s, 600.0), mean_load)
            sections["nic_ports"] = [self._port(p, stamp, dt_s, loads, first) for p in self.ports]
            return sections

    def topology_devices(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The NICs and their PCIe distance to every readable GPU (a lost one is not in the
        topology) and to each other."""
        shape = self.collector.shape
        gpu_count = shape.gpu_count
        readable = [g for g, load in enumerate(self.collector.gpu_loads()) if load is not None]
        devices = [
            {
                "id": f"NIC{p.index}",
                "kind": "nic",
                "name": f"mlx5_{p.index}",
                "pci_bus_id": nic_bus_id(p.index, shape),
                "numa_node": p.numa,
                "link_layer": "InfiniBand",
            }
            for p in self.ports
        ]
        links = [
            {
                "a": f"GPU{g}",
                "b": f"NIC{p.index}",
                "type": pci_distance(numa_node(g, gpu_count), p.numa, same_switch=g == p.gpu),
            }
            for p in self.ports
            for g in readable
        ]
        links += [
            {"a": f"NIC{a.index}", "b": f"NIC{b.index}", "type": pci_distance(a.numa, b.numa)}
            for i, a in enumerate(self.ports)
            for b in self.ports[i + 1 :]
        ]
        return devices, links

    def inject(self, kind: str, index: int | None = None, duration_s: float | None = None) -> None:
        """Inject a host fault at the next :meth:`collect`: ``ib_port_down`` (port ``mlx5_<index>``,
        random when None, down for ``duration_s``, for good when None), ``ib_flap`` (the port
        flaps for ``duration_s``, default 60 s) or ``storage_slow`` (``/data``'s disk and the
        NFS mount slow for ``duration_s``, default 180 s).

        Raises:
            ValueError: an unknown kind, or a port index this node does not have.
        """
        if kind not in HOST_FAULT_KINDS:
            raise ValueError(f"unknown host fault {kind!r}; known: {', '.join(HOST_FAULT_KINDS)}")
        if kind != "storage_slow" and index is not None and not 0 <= index < len(self.ports):
            raise ValueError(f"port index {index} out of range 0..{len(self.ports) - 1}")
        with self._lock:
            self._pending.append((kind, index, duration_s))

    def _apply(self, now: datetime) -> None:
        for port in self.ports:
            if port.flap_from is not None:
                self._flap(port, now)
            elif port.down and port.down_until is not None and port.down_until <= now:
                port.down, port.down_until = False, None
                port.recoveries += 1
        if self._slow_until is not None and self._slow_until <= now:
            self.storage.slow, self._slow_until = False, None
        for kind, index, duration_s in self._pending:
            if kind == "storage_slow":
                seconds = DEFAULT_STORAGE_SLOW_S if duration_s is None else duration_s
                self.storage.slow, self._slow_until = True, now + timedelta(seconds=seconds)
                continue
            up = [p for p in self.ports if not p.down and p.flap_from is None]
            if index is not None:
                chosen = self.ports[index]
                up = [chosen] if not chosen.down and chosen.flap_from is None else []
            if not up:
                continue
            port = self.rng.choice(up)
            if kind == "ib_flap":
                seconds = DEFAULT_FLAP_S if duration_s is None else duration_s
                port.flap_from, port.flap_until = now, now + timedelta(seconds=seconds)
                self._flap(port, now)
                continue
            port.down, port.link_downed = True, port.link_downed + 1
            port.down_until = None if duration_s is None else now + timedelta(seconds=duration_s)
        self._pending.clear()

    @staticmethod
    def _flap(port: _Port, now: datetime) -> None:
        """A flapping port at ``now``: down in the first :data:`FLAP_DOWN_S` of each
        :data:`FLAP_PERIOD_S` from the fault's start, up otherwise and once it is over."""
        assert port.flap_from is not None and port.flap_until is not None
        phase = (now - port.flap_from).total_seconds() % FLAP_PERIOD_S
        down = now < port.flap_until and phase < FLAP_DOWN_S
        if down and not port.down:
            port.link_downed += 1
        elif port.down and not down:
            port.recoveries += 1
        port.down = down
        if now >= port.flap_until:
            port.flap_from = port.flap_until = None

    def _port(
        self, port: _Port, stamp: str, dt_s: float, loads: list[float | None], first: bool
    ) -> dict[str, Any]:
        rng = self.rng
        load = (loads[port.gpu] or 0.0) if port.gpu is not None and port.gpu < len(loads) else 0.0
        tx = PORT_PEAK * load * rng.uniform(0.25, 0.45) + rng.uniform(2e4, 2e5)
        rx = tx * rng.uniform(0.85, 1.15)
        if rng.random() < dt_s / SYMBOL_ERROR_MEAN_S:
            port.symbol_errors += 1
        if port.down:
            tx = rx = 0.0
        return {
            "sampled_at": stamp,
            "device": f"mlx5_{port.index}",
            "port": 1,
            "link_layer": "InfiniBand",
            "state": "DOWN" if port.down else "ACTIVE",
            "phys_state": "Polling" if port.down else "LinkUp",
            "rate_gbps": DOWN_RATE_GBPS if port.down else NDR_GBPS,
            "tx_bytes_per_s": None if first else round(tx, 1),
            "rx_bytes_per_s": None if first else round(rx, 1),
            "symbol_error_count": port.symbol_errors,
            "link_downed_count": port.link_downed,
            "link_error_recovery_count": port.recoveries,
            "port_rcv_errors_count": port.rcv_errors,
            "port_xmit_discards_count": 0,
        }
