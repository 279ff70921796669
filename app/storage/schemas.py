"""Storage payload entries (``disks``, ``mounts``, ``nfs_mounts`` in docs/ingest.md) and the
read API's answer."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from app.metrics.plausible import UINT64_MAX, Bound, Number, Timestamp

MAX_DISKS = 50_000
MAX_MOUNTS = 50_000
MAX_NFS_MOUNTS = 20_000

_BYTES_PER_S = Bound(0, 1e13)
_PER_S = Bound(0, 1e10)
_WAIT_S = Bound(0, 3600)
_SIZE = Bound(0, 2**62, integer=True)
_COUNTER = Bound(0, UINT64_MAX, integer=True)

#: Plausible ranges per section; outside them a value is stored as null and counted under
#: ``<section>.<field>`` (``disks.busy_pct``).
DISK_BOUNDS: dict[str, Bound] = {
    "read_bytes_per_s": _BYTES_PER_S,
    "write_bytes_per_s": _BYTES_PER_S,
    "read_iops": _PER_S,
    "write_iops": _PER_S,
    "busy_pct": Bound(0, 100),
    "avg_wait_s": _WAIT_S,
}
MOUNT_BOUNDS: dict[str, Bound] = {"used_bytes": _SIZE, "total_bytes": _SIZE}
NFS_BOUNDS: dict[str, Bound] = {
    "read_bytes": _COUNTER,
    "write_bytes": _COUNTER,
    "ops": _COUNTER,
    "retransmits": _COUNTER,
    "read_bytes_per_s": _BYTES_PER_S,
    "write_bytes_per_s": _BYTES_PER_S,
    "ops_per_s": _PER_S,
    "retransmits_per_s": _PER_S,
    "avg_rtt_s": _WAIT_S,
}

Path = Annotated[str, Field(min_length=1, max_length=512)]


class DiskIn(BaseModel):
    """A block device's rates over the agent's last interval (``/proc/diskstats``)."""

    model_config = ConfigDict(extra="ignore")

    sampled_at: Timestamp
    device: Annotated[str, Field(min_length=1, max_length=64)]
    read_bytes_per_s: Number | None = None
    write_bytes_per_s: Number | None = None
    read_iops: Number | None = None
    write_iops: Number | None = None
    busy_pct: Number | None = None
    avg_wait_s: Number | None = None


class MountIn(BaseModel):
    """A mounted filesystem's usage (``/proc/self/mountinfo`` and ``statvfs``)."""

    model_config = ConfigDict(extra="ignore")

    sampled_at: Timestamp
    mountpoint: Path
    device: Annotated[str, Field(max_length=256)] | None = None
    fstype: Annotated[str, Field(max_length=32)] | None = None
    used_bytes: Number | None = None
    total_bytes: Number | None = None


class NfsMountIn(BaseModel):
    """An NFS mount (``/proc/self/mountstats``): cumulative 64-bit counters, exact JSON integers
    up to 2⁶⁴−1, and rates."""

    model_config = ConfigDict(extra="ignore")

    sampled_at: Timestamp
    mountpoint: Path
    export: Annotated[str, Field(max_length=512)] | None = None
    version: Annotated[str, Field(max_length=16)] | None = None
    read_bytes: Number | None = None
    write_bytes: Number | None = None
    ops: Number | None = None
    retransmits: Number | None = None
    read_bytes_per_s: Number | None = None
    write_bytes_per_s: Number | None = None
    ops_per_s: Number | None = None
    retransmits_per_s: Number | None = None
    avg_rtt_s: Number | None = None


class DiskOut(BaseModel):
    """The newest reading of one block device."""

    model_config = ConfigDict(from_attributes=True)

    device: str
    sampled_at: datetime
    read_bytes_per_s: float | None
    write_bytes_per_s: float | None
    read_iops: float | None
    write_iops: float | None
    busy_pct: float | None
    avg_wait_s: float | None


class MountOut(BaseModel):
    """The newest reading of one filesystem; ``used_pct`` is used ÷ total (null if unknown)."""

    model_config = ConfigDict(from_attributes=True)

    mountpoint: str
    sampled_at: datetime
    device: str | None
    fstype: str | None
    used_bytes: int | None
    total_bytes: int | None
    used_pct: float | None


class NfsMountOut(BaseModel):
    """The newest reading of one NFS mount; the counters are exact integers."""

    model_config = ConfigDict(from_attributes=True)

    mountpoint: str
    sampled_at: datetime
    export: str | None
    version: str | None
    read_bytes: int | None
    write_bytes: int | None
    ops: int | None
    retransmits: int | None
    read_bytes_per_s: float | None
    write_bytes_per_s: float | None
    ops_per_s: float | None
    retransmits_per_s: float | None
    avg_rtt_s: float | None


class StorageOut(BaseModel):
    """``GET /api/v1/nodes/{hostname}/storage``: the newest reading of every disk, mount and NFS
    mount of the node."""

    hostname: str
    disks: list[DiskOut]
    mounts: list[MountOut]
    nfs_mounts: list[NfsMountOut]
