"""Block devices from ``/proc/diskstats`` → the ``disks`` section (docs/ingest.md, "disks").

The format is the kernel's Documentation/admin-guide/iostats.rst: ``major minor name`` and then
the statistics, whose number grew with the kernel:

* 4 fields — partitions on 2.6.0–2.6.24: reads, sectors read, writes, sectors written;
* 11 fields (14 columns) — reads, reads merged, sectors read, ms reading, writes, writes merged,
  sectors written, ms writing, I/Os in flight, ms doing I/O (``io_ticks``), weighted ms;
* 15 fields (18 columns, 4.18+) — plus discards, discards merged, sectors discarded, ms
  discarding;
* 17 fields (20 columns, 5.5+) — plus flushes and ms flushing.

Sectors are always 512 bytes, whatever the device's block size. Names may contain ``/``
(``cciss/c0d0p1``): the kernel prints them with the slash that sysfs turns into ``!``.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass, fields
from datetime import datetime
from pathlib import Path
from typing import Any

from agents.host.base import HostSourceBase, RateTracker
from agents.payload import format_timestamp

SECTOR_BYTES = 512

_CLASSIC = (
    "reads",
    "reads_merged",
    "read_sectors",
    "read_ms",
    "writes",
    "writes_merged",
    "write_sectors",
    "write_ms",
    "in_flight",
    "io_ticks_ms",
    "weighted_ms",
    "discards",
    "discards_merged",
    "discard_sectors",
    "discard_ms",
    "flushes",
    "flush_ms",
)
_SHORT = ("reads", "read_sectors", "writes", "write_sectors")


@dataclass(frozen=True)
class DiskStats:
    """One line of ``/proc/diskstats``; a field the line does not have is ``None``."""

    major: int
    minor: int
    name: str
    reads: int | None = None
    reads_merged: int | None = None
    read_sectors: int | None = None
    read_ms: int | None = None
    writes: int | None = None
    writes_merged: int | None = None
    write_sectors: int | None = None
    write_ms: int | None = None
    in_flight: int | None = None
    io_ticks_ms: int | None = None
    weighted_ms: int | None = None
    discards: int | None = None
    discards_merged: int | None = None
    discard_sectors: int | None = None
    discard_ms: int | None = None
    flushes: int | None = None
    flush_ms: int | None = None

    def counters(self) -> dict[str, int | None]:
        """The cumulative counters by field name (``in_flight`` is a gauge and left out)."""
        skip = {"major", "minor", "name", "in_flight"}
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}


def parse_diskstats(text: str) -> list[DiskStats]:
    """Every device line of ``/proc/diskstats`` text, in order. Lines that are not
    ``major minor name`` + 4 or ≥ 11 integers are skipped; fields beyond the 17 known ones
    (a newer kernel) are ignored."""
    disks: list[DiskStats] = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 7:
            continue
        try:
            major, minor = int(parts[0]), int(parts[1])
            values = [int(v) for v in parts[3:]]
        except ValueError:
            continue
        if len(values) == len(_SHORT):
            names: tuple[str, ...] = _SHORT
        elif len(values) >= 11:
            names = _CLASSIC
        else:
            continue
        disks.append(DiskStats(major, minor, parts[2], **dict(zip(names, values, strict=False))))
    return disks


def partition_parent(name: str, names: Iterable[str]) -> str | None:
    """The whole device ``name`` is a partition of, if that device is among ``names``.

    The kernel names partitions ``<disk><n>`` (``sda1``), or ``<disk>p<n>`` when the disk's name
    ends in a digit (``nvme0n1p1``, ``mmcblk0p1``, ``cciss/c0d0p1``); so ``ram10`` is not a
    partition of ``ram1`` and ``dm-10`` not one of ``dm-1``.
    """
    stem = name.rstrip("0123456789")
    if not stem or stem == name:
        return None
    known = set(names)
    if stem.endswith("p") and stem[:-1][-1:].isdigit() and stem[:-1] in known:
        return stem[:-1]
    return stem if stem in known else None


@dataclass(frozen=True)
class DiskFilter:
    """Which devices become ``disks`` entries.

    ``exclude``: shell patterns (``fnmatch``) of device names to leave out; the default drops
    RAM disks and loop devices, which say nothing about storage. ``skip_partitions``: leave out
    a partition when its whole device is listed too (the device already counts its I/O), so
    ``sda`` is kept and ``sda1`` dropped, but a partition whose disk is absent is kept.
    """

    exclude: tuple[str, ...] = ("ram*", "loop*")
    skip_partitions: bool = True

    def select(self, disks: list[DiskStats]) -> list[DiskStats]:
        """``disks`` without the excluded ones, in their order."""
        names = {d.name for d in disks}
        return [
            d
            for d in disks
            if not any(fnmatch.fnmatchcase(d.name, pattern) for pattern in self.exclude)
            and not (self.skip_partitions and partition_parent(d.name, names))
        ]


#: The longest device name the server takes (``disks[].device``).
MAX_DEVICE_CHARS = 64


class DiskStatsSource(HostSourceBase):
    """The ``disks`` section from ``<procfs>/diskstats`` (``procfs`` like node_exporter's
    ``--path.procfs``). Rates follow docs/ingest.md: bytes and IOPS per second, ``busy_pct`` =
    Δ ms doing I/O ÷ Δt (capped at 100, as iostat does, because ``io_ticks`` is counted in
    jiffies), ``avg_wait_s`` = Δ(ms reading + ms writing) ÷ Δ(reads + writes), ``None`` when no
    I/O completed in the interval."""

    name = "diskstats"

    def __init__(self, procfs: Path = Path("/proc"), *, disk_filter: DiskFilter | None = None):
        super().__init__()
        self.path = procfs / "diskstats"
        self.disk_filter = disk_filter or DiskFilter()
        self._rates: RateTracker[tuple[int, int, str]] = RateTracker()

    def collect(self, now: datetime) -> dict[str, list[dict[str, Any]]]:
        """One ``disks`` entry per selected device, dated ``now``."""
        text = self._read_text(self.path)
        if text is None:
            return {}
        stamp = format_timestamp(now)
        entries = []
        for disk in self.disk_filter.select(parse_diskstats(text)):
            if len(disk.name) > MAX_DEVICE_CHARS:  # the server's limit: a garbled line
                self._error(f"{disk.name[:200]}…: device name too long, left out")
                continue
            key = (disk.major, disk.minor, disk.name)
            interval = self._rates.interval(key, now, disk.counters())
            entry: dict[str, Any] = {
                "sampled_at": stamp,
                "device": disk.name,
                "read_bytes_per_s": None,
                "write_bytes_per_s": None,
                "read_iops": None,
                "write_iops": None,
                "busy_pct": None,
                "avg_wait_s": None,
            }
            if interval is not None:
                busy = interval.per_second("io_ticks_ms")
                wait_ms = interval.ratio(("read_ms", "write_ms"), ("reads", "writes"))
                entry.update(
                    read_bytes_per_s=interval.per_second("read_sectors", scale=SECTOR_BYTES),
                    write_bytes_per_s=interval.per_second("write_sectors", scale=SECTOR_BYTES),
                    read_iops=interval.per_second("reads"),
                    write_iops=interval.per_second("writes"),
                    busy_pct=None if busy is None else min(busy / 10.0, 100.0),
                    avg_wait_s=None if wait_ms is None else wait_ms / 1000.0,
                )
            entries.append(entry)
        self._rates.forget_unseen()
        return {"disks": entries}
