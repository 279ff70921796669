"""NVLink state, peers, error counters and throughput of one GPU, per link.

The links a GPU has are found once (``nvmlDeviceGetNvLinkState`` over ``0 ..
NVML_NVLINK_MAX_LINKS``) and remembered, so later rounds only ask about real links; a link's
peer (``nvmlDeviceGetNvLinkRemoteDeviceType``, ``…RemotePciInfo``) is re-read when it comes up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents.nvml.counters import CounterRate
from agents.nvml.device import GpuReader
from agents.nvml.metrics import normalize_bus_id
from agents.nvml.session import Unavailable, struct_text

FI_NVLINK_DATA_TX = 138
FI_NVLINK_DATA_RX = 139
FI_NVLINK_GET_SPEED = 164
#: ``nvmlNvLinkDeviceType_t`` → the payload's ``remote_device_type`` (IBM NPU = the POWER CPU).
REMOTE_TYPES = {0: "gpu", 1: "cpu", 2: "nvswitch"}
MAX_LINK_RATE = 1e13
_DEFAULT_MAX_LINKS = 18


@dataclass
class LinkReading:
    """One link as read now. Counters are cumulative; rates ``None`` on a skipped interval."""

    link: int
    state: str
    remote_device_type: str = "unknown"
    remote_pci_bus_id: str | None = None
    speed_gbps: float | None = None
    tx_bytes_per_s: float | None = None
    rx_bytes_per_s: float | None = None
    crc_errors: int | None = None
    replay_errors: int | None = None
    recovery_errors: int | None = None

    def entry(self, gpu_uuid: str, sampled_at: str) -> dict[str, Any]:
        """The ``nvlinks`` payload entry (docs/ingest.md) of this reading."""
        return {"gpu_uuid": gpu_uuid, "sampled_at": sampled_at, **vars(self)}


class NvLinkReader:
    """Per-GPU NVLink readings; the state between rounds (link list, peers, counters) is kept
    per GPU key and dropped with :meth:`forget`."""

    def __init__(self) -> None:
        self._links: dict[str, list[int]] = {}
        self._peers: dict[tuple[str, int], tuple[str, str | None]] = {}
        self._rates: dict[tuple[str, int, str], CounterRate] = {}

    def forget(self, key: str) -> None:
        """Drop what is remembered of GPU ``key`` (lost, re-enumerated)."""
        self._links.pop(key, None)
        self._peers = {k: v for k, v in self._peers.items() if k[0] != key}
        self._rates = {k: v for k, v in self._rates.items() if k[0] != key}

    def read(self, reader: GpuReader, at_s: float, *, counters: bool = True) -> list[LinkReading]:
        """Every NVLink of the GPU; with ``counters`` also error counters
        (``nvmlDeviceGetNvLinkErrorCounter``), speed and throughput (``nvmlDeviceGetFieldValues``
        NVLINK_GET_SPEED / THROUGHPUT_DATA_TX/RX per link)."""
        links = self._discover(reader)
        readings: list[LinkReading] = []
        for link in links:
            state = reader.get("nvlink", "nvmlDeviceGetNvLinkState", link)
            if state is None:
                readings.append(LinkReading(link, "unknown"))
                continue
            up = int(state) == 1
            peer = self._peer(reader, link, up)
            reading = LinkReading(link, "up" if up else "down", peer[0], peer[1])
            if counters:
                self._counters(reader, reading)
            readings.append(reading)
        if counters and readings:
            self._throughput(reader, readings, at_s)
        return readings

    def _discover(self, reader: GpuReader) -> list[int]:
        known = self._links.get(reader.key)
        if known is not None:
            return known
        found: list[int] = []
        for link in range(getattr(reader.nvml, "NVML_NVLINK_MAX_LINKS", _DEFAULT_MAX_LINKS)):
            try:
                reader.session.call("nvmlDeviceGetNvLinkState", reader.handle, link, gpu=reader.key)
            except Unavailable as exc:
                if link == 0:  # no NVLink at all (consumer board, MIG mode)
                    reader.session.note_unavailable(reader.reasons, "nvlink", exc, gpu=reader.key)
                    break
                continue
            found.append(link)
        self._links[reader.key] = found
        return found

    def _peer(self, reader: GpuReader, link: int, up: bool) -> tuple[str, str | None]:
        cached = self._peers.get((reader.key, link))
        if cached is not None or not up:
            return cached or ("unknown", None)
        kind = reader.get("nvlink_remote", "nvmlDeviceGetNvLinkRemoteDeviceType", link)
        pci = reader.get("nvlink_remote", "nvmlDeviceGetNvLinkRemotePciInfo", link)
        peer = (
            REMOTE_TYPES.get(kind, "unknown") if kind is not None else "unknown",
            normalize_bus_id(struct_text(pci, "busId")),
        )
        self._peers[(reader.key, link)] = peer
        return peer

    def _counters(self, reader: GpuReader, reading: LinkReading) -> None:
        nv = reader.nvml
        for attr, counter in (
            ("crc_errors", nv.NVML_NVLINK_ERROR_DL_CRC_FLIT),
            ("replay_errors", nv.NVML_NVLINK_ERROR_DL_REPLAY),
            ("recovery_errors", nv.NVML_NVLINK_ERROR_DL_RECOVERY),
        ):
            value = reader.get(
                "nvlink_errors", "nvmlDeviceGetNvLinkErrorCounter", reading.link, counter
            )
            setattr(reading, attr, None if value is None else int(value))

    def _throughput(self, reader: GpuReader, readings: list[LinkReading], at_s: float) -> None:
        wanted: dict[str, tuple[int, int]] = {}
        for r in readings:
            wanted[f"speed:{r.link}"] = (FI_NVLINK_GET_SPEED, r.link)
            wanted[f"tx:{r.link}"] = (FI_NVLINK_DATA_TX, r.link)
            wanted[f"rx:{r.link}"] = (FI_NVLINK_DATA_RX, r.link)
        values: dict[str, Any] = reader.fields(wanted)
        for r in readings:
            speed = values.get(f"speed:{r.link}")
            r.speed_gbps = None if not speed else speed / 1000  # MBps → GB/s as nvidia-smi
            for direction in ("tx", "rx"):
                rate = self._rates.setdefault(
                    (reader.key, r.link, direction),
                    CounterRate(scale=1024, max_rate=MAX_LINK_RATE),
                )
                setattr(
                    r,
                    f"{direction}_bytes_per_s",
                    rate.update(values.get(f"{direction}:{r.link}"), at_s),
                )


def nvlink_counts(readings: list[LinkReading]) -> tuple[dict[str, int], int]:
    """``(active links per peer GPU bus id, active links to NVSwitches)``."""
    per_peer: dict[str, int] = {}
    switch = 0
    for r in readings:
        if r.state != "up":
            continue
        if r.remote_device_type == "nvswitch":
            switch += 1
        elif r.remote_device_type == "gpu" and r.remote_pci_bus_id:
            per_peer[r.remote_pci_bus_id] = per_peer.get(r.remote_pci_bus_id, 0) + 1
    return per_peer, switch
