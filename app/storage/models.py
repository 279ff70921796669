"""The storage tables: ``disk_sample``, ``mount_sample`` and ``nfs_sample``, one row per node,
device or mountpoint, and ``sampled_at``."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Double, ForeignKey, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, UInt64, UTCDateTime


class DiskSample(Base):
    """A block device's rates over the agent's last interval (``/proc/diskstats``)."""

    __tablename__ = "disk_sample"
    __table_args__ = (
        Index("ix_disk_sample_node_id_sampled_at", "node_id", "sampled_at"),
        Index("ix_disk_sample_sampled_at", "sampled_at"),
    )

    node_id: Mapped[int] = mapped_column(
        ForeignKey("node.id", ondelete="CASCADE"), primary_key=True
    )
    device: Mapped[str] = mapped_column(String(64), primary_key=True)
    sampled_at: Mapped[datetime] = mapped_column(UTCDateTime(), primary_key=True)
    read_bytes_per_s: Mapped[float | None] = mapped_column(Double)
    write_bytes_per_s: Mapped[float | None] = mapped_column(Double)
    read_iops: Mapped[float | None] = mapped_column(Double)
    write_iops: Mapped[float | None] = mapped_column(Double)
    busy_pct: Mapped[float | None] = mapped_column(Double)
    avg_wait_s: Mapped[float | None] = mapped_column(Double)


class MountSample(Base):
    """A mounted filesystem's usage (``/proc/self/mountinfo`` and ``statvfs``)."""

    __tablename__ = "mount_sample"
    __table_args__ = (
        Index("ix_mount_sample_node_id_sampled_at", "node_id", "sampled_at"),
        Index("ix_mount_sample_sampled_at", "sampled_at"),
    )

    node_id: Mapped[int] = mapped_column(
        ForeignKey("node.id", ondelete="CASCADE"), primary_key=True
    )
    mountpoint: Mapped[str] = mapped_column(String(512), primary_key=True)
    sampled_at: Mapped[datetime] = mapped_column(UTCDateTime(), primary_key=True)
    device: Mapped[str | None] = mapped_column(String(256))
    fstype: Mapped[str | None] = mapped_column(String(32))
    used_bytes: Mapped[int | None] = mapped_column(BigInteger)
    total_bytes: Mapped[int | None] = mapped_column(BigInteger)

    @property
    def used_pct(self) -> float | None:
        """Used ÷ total in percent; None when either is unknown or the size is 0."""
        if self.used_bytes is None or not self.total_bytes:
            return None
        return 100.0 * self.used_bytes / self.total_bytes


class NfsSample(Base):
    """An NFS mount (``/proc/self/mountstats``): the kernel's cumulative 64-bit counters, stored
    exactly (:class:`~app.db.UInt64`), and the rates over the agent's last interval."""

    __tablename__ = "nfs_sample"
    __table_args__ = (
        Index("ix_nfs_sample_node_id_sampled_at", "node_id", "sampled_at"),
        Index("ix_nfs_sample_sampled_at", "sampled_at"),
    )

    node_id: Mapped[int] = mapped_column(
        ForeignKey("node.id", ondelete="CASCADE"), primary_key=True
    )
    mountpoint: Mapped[str] = mapped_column(String(512), primary_key=True)
    sampled_at: Mapped[datetime] = mapped_column(UTCDateTime(), primary_key=True)
    export: Mapped[str | None] = mapped_column(String(512))
    version: Mapped[str | None] = mapped_column(String(16))
    read_bytes: Mapped[int | None] = mapped_column(UInt64())
    write_bytes: Mapped[int | None] = mapped_column(UInt64())
    ops: Mapped[int | None] = mapped_column(UInt64())
    retransmits: Mapped[int | None] = mapped_column(UInt64())
    read_bytes_per_s: Mapped[float | None] = mapped_column(Double)
    write_bytes_per_s: Mapped[float | None] = mapped_column(Double)
    ops_per_s: Mapped[float | None] = mapped_column(Double)
    retransmits_per_s: Mapped[float | None] = mapped_column(Double)
    avg_rtt_s: Mapped[float | None] = mapped_column(Double)
