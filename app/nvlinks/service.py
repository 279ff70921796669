"""Reading NVLink state: the newest reading of every link of a node's GPUs, and a per-GPU
summary for the node page."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from app.fleet.models import Gpu
from app.series import readings
from app.series.readings import NvlinkReading
from app.series.writes import LATEST_WINDOW_S


def list_latest_links(session: Session, *, gpus: Sequence[Gpu]) -> list[NvlinkReading]:
    """The current reading (:func:`app.series.readings.nvlinks`) of each link of ``gpus``
    (links within :data:`~app.series.writes.LATEST_WINDOW_S` of their GPU's newest), ordered by
    GPU index and link number."""
    index = {g.id: g.index for g in gpus}
    links = readings.nvlinks(session, list(index), window_s=LATEST_WINDOW_S)
    return sorted(links, key=lambda s: (index[s.gpu_id], s.link))


def _total(values: list[float | int | None]) -> float | int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


@dataclass
class GpuLinks:
    """One GPU's links (newest reading each) and their totals; sums are None when no link
    reports the value."""

    gpu: Gpu
    links: list[NvlinkReading] = field(default_factory=list)

    @property
    def up(self) -> int:
        """Links whose state is ``up``."""
        return sum(1 for link in self.links if link.state == "up")

    @property
    def not_up(self) -> list[NvlinkReading]:
        """Links that are down or in an unknown state."""
        return [link for link in self.links if link.state != "up"]

    @property
    def speeds_gbps(self) -> list[float]:
        """The distinct speeds of the links that are up, in GB/s, sorted."""
        return sorted({link.speed_gbps for link in self.links if link.speed_gbps is not None})

    @property
    def tx_bytes_per_s(self) -> float | int | None:
        """TX summed over the links."""
        return _total([link.tx_bytes_per_s for link in self.links])

    @property
    def rx_bytes_per_s(self) -> float | int | None:
        """RX summed over the links."""
        return _total([link.rx_bytes_per_s for link in self.links])

    @property
    def crc_errors(self) -> float | int | None:
        """CRC flit errors summed over the links."""
        return _total([link.crc_errors for link in self.links])

    @property
    def replay_errors(self) -> float | int | None:
        """Replay errors summed over the links."""
        return _total([link.replay_errors for link in self.links])

    @property
    def recovery_errors(self) -> float | int | None:
        """Recovery errors summed over the links."""
        return _total([link.recovery_errors for link in self.links])


def group_by_gpu(gpus: Sequence[Gpu], links: Sequence[NvlinkReading]) -> list[GpuLinks]:
    """The GPUs that report links, in index order, each with its links."""
    by_id = {g.id: GpuLinks(gpu=g) for g in sorted(gpus, key=lambda g: g.index)}
    for link in links:
        if link.gpu_id in by_id:
            by_id[link.gpu_id].links.append(link)
    return [entry for entry in by_id.values() if entry.links]
