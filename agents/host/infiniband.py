"""InfiniBand and RoCE ports from ``<sysfs>/class/infiniband/*/ports/*/`` → the ``nic_ports``
section (docs/ingest.md, "nic_ports").

The files are the kernel's (drivers/infiniband/core/sysfs.c, Documentation/ABI/stable/
sysfs-class-infiniband): ``state`` (``4: ACTIVE``), ``phys_state`` (``5: LinkUp``), ``rate``
(``400 Gb/sec (4X NDR)``), ``link_layer`` (``InfiniBand`` or ``Ethernet`` for RoCE), the IBA
port counters under ``counters/`` and the driver's own under ``hw_counters/`` (mlx5: retransmits,
out-of-sequence, RNR NAKs …). ``port_xmit_data`` and ``port_rcv_data`` count 4-byte words.

A file that is missing or cannot be read (some counters answer EINVAL on RoCE ports) gives
``None``, never a failed reading. Devices without the 64-bit extended counters have 32-bit data
counters that stick at 2³²−1 instead of wrapping; a stuck counter gives a ``None`` rate.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from agents.host.base import HostSourceBase, RateTracker
from agents.payload import format_timestamp

#: ``port_xmit_data`` / ``port_rcv_data`` are in units of 4 bytes (IBA PortCounters).
DATA_WORD_BYTES = 4
_SATURATED_32 = 2**32 - 1
#: Section field → ``counters/`` file.
ERROR_COUNTERS = {
    "symbol_error_count": "symbol_error",
    "link_downed_count": "link_downed",
    "link_error_recovery_count": "link_error_recovery",
    "port_rcv_errors_count": "port_rcv_errors",
    "port_xmit_discards_count": "port_xmit_discards",
}


def state_word(text: str | None) -> str | None:
    """``4: ACTIVE`` → ``ACTIVE``, ``5: LinkUp`` → ``LinkUp`` (a bare word is kept)."""
    if text is None:
        return None
    word = text.partition(":")[2] if ":" in text else text
    return word.strip() or None


def rate_gbps(text: str | None) -> float | None:
    """``400 Gb/sec (4X NDR)`` → ``400.0``, ``2.5 Gb/sec (1X SDR)`` → ``2.5``; a bare number
    (``ibstat``'s ``Rate: 400``) is read as Gb/s too."""
    if not text or not text.split():
        return None
    try:
        rate = float(text.split()[0])
    except ValueError:
        return None
    return rate if math.isfinite(rate) and rate >= 0 else None  # "inf", "nan", "1e400", "-1"


@dataclass
class IbPort:
    """One port as sysfs shows it; ``counters`` and ``hw_counters`` are raw file values."""

    device: str
    port: int
    state: str | None = None
    phys_state: str | None = None
    rate_gbps: float | None = None
    link_layer: str | None = None
    counters: dict[str, int] = field(default_factory=dict)
    hw_counters: dict[str, int] = field(default_factory=dict)


_PORT = re.compile(r"[0-9]{1,3}")
#: A counter file's value: ASCII digits, at most the 20 of 2⁶⁴−1 (not str.isdigit(), which
#: takes "²", nor thousands of digits, which int() refuses).
_COUNTER = re.compile(r"[0-9]{1,20}")
MAX_PORT = 255


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def _read_counters(folder: Path) -> dict[str, int]:
    counters: dict[str, int] = {}
    try:
        names = sorted(path.name for path in folder.iterdir() if path.is_file())
    except OSError:
        return counters
    for name in names:
        text = _read(folder / name)
        if text is not None and _COUNTER.fullmatch(text):
            counters[name] = int(text)
    return counters


def read_ib_ports(sysfs: Path) -> list[IbPort]:
    """Every port under ``<sysfs>/class/infiniband``, by device then port number; none when the
    folder is absent (no RDMA devices, or the modules are not loaded)."""
    ports: list[IbPort] = []
    root = sysfs / "class" / "infiniband"
    try:
        devices = sorted(path.name for path in root.iterdir())
    except OSError:
        return ports
    for device in devices:
        try:
            listing = (root / device / "ports").iterdir()
            # ASCII digits only ("²".isdigit() is true, int("²") raises), and an IBA port
            # number: 0-255 (the server's limit).
            names = [path.name for path in listing if _PORT.fullmatch(path.name)]
            numbers = sorted(n for n in map(int, names) if n <= MAX_PORT)
        except OSError:
            continue
        for number in numbers:
            folder = root / device / "ports" / str(number)
            ports.append(
                IbPort(
                    device=device,
                    port=number,
                    state=state_word(_read(folder / "state")),
                    phys_state=state_word(_read(folder / "phys_state")),
                    rate_gbps=rate_gbps(_read(folder / "rate")),
                    link_layer=_read(folder / "link_layer") or None,
                    counters=_read_counters(folder / "counters"),
                    hw_counters=_read_counters(folder / "hw_counters"),
                )
            )
    return ports


def _data_counter(counters: dict[str, int], name: str) -> int | None:
    value = counters.get(name)
    return None if value == _SATURATED_32 else value


class InfinibandSource(HostSourceBase):
    """The ``nic_ports`` section, one entry per InfiniBand/RoCE port under ``sysfs`` (like
    node_exporter's ``--path.sysfs``). ``tx_bytes_per_s`` / ``rx_bytes_per_s`` = Δ data words × 4
    ÷ Δt; the error counts are the cumulative ``counters/`` values (8- and 16-bit IBA counters
    that stop at their maximum, e.g. ``link_downed`` at 255)."""

    name = "infiniband"

    def __init__(self, sysfs: Path = Path("/sys")) -> None:
        super().__init__()
        self.sysfs = sysfs
        self._rates: RateTracker[tuple[str, int]] = RateTracker()

    def collect(self, now: datetime) -> dict[str, list[dict[str, Any]]]:
        """One ``nic_ports`` entry per port, dated ``now``; no section without RDMA devices."""
        ports = read_ib_ports(self.sysfs)
        if not ports:
            return {}
        stamp = format_timestamp(now)
        entries = []
        for port in ports:
            data = {
                "tx": _data_counter(port.counters, "port_xmit_data"),
                "rx": _data_counter(port.counters, "port_rcv_data"),
            }
            interval = self._rates.interval((port.device, port.port), now, data)
            entry: dict[str, Any] = {
                "sampled_at": stamp,
                "device": port.device,
                "port": port.port,
                "link_layer": port.link_layer,
                "state": port.state,
                "phys_state": port.phys_state,
                "rate_gbps": port.rate_gbps,
                "tx_bytes_per_s": None,
                "rx_bytes_per_s": None,
            }
            if interval is not None:
                entry["tx_bytes_per_s"] = interval.per_second("tx", scale=DATA_WORD_BYTES)
                entry["rx_bytes_per_s"] = interval.per_second("rx", scale=DATA_WORD_BYTES)
            for key, counter in ERROR_COUNTERS.items():
                entry[key] = port.counters.get(counter)
            entries.append(entry)
        self._rates.forget_unseen()
        return {"nic_ports": entries}
