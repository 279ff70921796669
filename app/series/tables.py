"""The raw sample tables, owned by :mod:`app.series`: one row per series and ``sampled_at``.

* ``gpu_sample``: one row per GPU and time, one nullable column per metric of
  :mod:`app.metrics.catalog` (``NULL`` = not available);
* ``nvlink_sample``: one row per GPU, link and time;
* ``nic_port_sample``: one row per node, NIC, port and time;
* ``disk_sample``, ``mount_sample``, ``nfs_sample``: one row per node, device or mountpoint, and
  time.

No module outside :mod:`app.series` imports this one (``tests/meta/test_sample_table_owner.py``):
other packages ask the series modules for rows, latest values and windows.

The raw tables have no foreign key to ``gpu`` or ``node`` (revision 0019), as a time-series
store keeps none: Postgres checked it with one query per row inserted, a third of the ingest's
statement time (bench/ingest_rate.py). The ingest writes rows only for the node and GPUs it has
just upserted in the same transaction, under the node's row lock, and nothing deletes a node or a
GPU (a node is retired, :mod:`app.fleet.retire`); raw rows age out with the raw retention. Blocks,
rollups and current readings keep their foreign keys (written a row per series, not per sample).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Column,
    Double,
    Index,
    Integer,
    PrimaryKeyConstraint,
    String,
    Table,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, UInt64, UTCDateTime
from app.metrics.catalog import METRICS

gpu_sample = Table(
    "gpu_sample",
    Base.metadata,
    Column("gpu_id", Integer, primary_key=True),
    Column("sampled_at", UTCDateTime(), primary_key=True),
    Column("received_at", UTCDateTime(), nullable=False),
    *(Column(m.name, BigInteger if m.integer else Double, nullable=True) for m in METRICS),
    Index("ix_gpu_sample_sampled_at", "sampled_at"),
)
"""Primary key (gpu_id, sampled_at) makes a re-sent sample a no-op; received_at is server time."""


class NvlinkSample(Base):
    """One NVLink of a GPU at one time (``nvmlDeviceGetNvLinkState``, ``…RemotePciInfo``,
    ``…RemoteDeviceType``, throughput field values and ``…GetNvLinkErrorCounter``).

    ``speed_gbps`` is the link's speed in GB/s as nvidia-smi prints it (26.562 on H100);
    ``crc_errors``, ``replay_errors`` and ``recovery_errors`` are cumulative counters.
    """

    __tablename__ = "nvlink_sample"
    __table_args__ = (
        # Time before link: a GPU's readings over a range are a range of the key, so no other
        # index on (gpu_id, sampled_at) is needed (revision 0037).
        PrimaryKeyConstraint("gpu_id", "sampled_at", "link"),
        Index("ix_nvlink_sample_sampled_at", "sampled_at"),
    )

    gpu_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    link: Mapped[int] = mapped_column(Integer, primary_key=True)
    sampled_at: Mapped[datetime] = mapped_column(UTCDateTime(), primary_key=True)
    state: Mapped[str] = mapped_column(String(16))
    speed_gbps: Mapped[float | None] = mapped_column(Double)
    remote_pci_bus_id: Mapped[str | None] = mapped_column(String(32))
    remote_device_type: Mapped[str | None] = mapped_column(String(16))
    tx_bytes_per_s: Mapped[float | None] = mapped_column(Double)
    rx_bytes_per_s: Mapped[float | None] = mapped_column(Double)
    crc_errors: Mapped[int | None] = mapped_column(BigInteger)
    replay_errors: Mapped[int | None] = mapped_column(BigInteger)
    recovery_errors: Mapped[int | None] = mapped_column(BigInteger)


class NicPortSample(Base):
    """One InfiniBand/RoCE port (``/sys/class/infiniband/<device>/ports/<port>/``) at one time.

    ``state`` and ``phys_state`` are the words of sysfs' files (``ACTIVE``, ``LinkUp``,
    ``Polling`` …); rates are bytes per second; the ``*_count`` columns are the cumulative port
    counters (``symbol_error``, ``link_downed`` …).
    """

    __tablename__ = "nic_port_sample"
    __table_args__ = (
        Index("ix_nic_port_sample_node_id_sampled_at", "node_id", "sampled_at"),
        Index("ix_nic_port_sample_sampled_at", "sampled_at"),
    )

    node_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    device: Mapped[str] = mapped_column(String(64), primary_key=True)
    port: Mapped[int] = mapped_column(Integer, primary_key=True)
    sampled_at: Mapped[datetime] = mapped_column(UTCDateTime(), primary_key=True)
    link_layer: Mapped[str | None] = mapped_column(String(32))
    state: Mapped[str | None] = mapped_column(String(32))
    phys_state: Mapped[str | None] = mapped_column(String(32))
    rate_gbps: Mapped[float | None] = mapped_column(Double)
    tx_bytes_per_s: Mapped[float | None] = mapped_column(Double)
    rx_bytes_per_s: Mapped[float | None] = mapped_column(Double)
    symbol_error_count: Mapped[int | None] = mapped_column(BigInteger)
    link_downed_count: Mapped[int | None] = mapped_column(BigInteger)
    link_error_recovery_count: Mapped[int | None] = mapped_column(BigInteger)
    port_rcv_errors_count: Mapped[int | None] = mapped_column(BigInteger)
    port_xmit_discards_count: Mapped[int | None] = mapped_column(BigInteger)


class DiskSample(Base):
    """A block device's rates over the agent's last interval (``/proc/diskstats``)."""

    __tablename__ = "disk_sample"
    __table_args__ = (
        Index("ix_disk_sample_node_id_sampled_at", "node_id", "sampled_at"),
        Index("ix_disk_sample_sampled_at", "sampled_at"),
    )

    node_id: Mapped[int] = mapped_column(Integer, primary_key=True)
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

    node_id: Mapped[int] = mapped_column(Integer, primary_key=True)
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

    node_id: Mapped[int] = mapped_column(Integer, primary_key=True)
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
