"""Rollup tables: per-minute and per-hour aggregates of the raw sample tables, so a chart over a
day or a month reads hundreds of rows per series instead of thousands.

One rollup row holds, per key (a GPU; a node's disk, NFS mount or IB port) and bucket
(``bucket_start_s``, Unix seconds, a multiple of the resolution), the parts from which every
chart aggregate over whole buckets is recomputed *exactly*:

* ``<col>_sum`` and ``<col>_n`` (Σ and count of non-NULL values) for averaged gauges. An average
  of averages is wrong when buckets hold different numbers of samples (late or missing ones),
  ``Σ sums ÷ Σ counts`` is the average of the samples themselves;
* ``<col>_max`` / ``<col>_min`` where a chart or a ranking takes one (temperature, power,
  utilization; integer GPU metrics, whose raw charts take the bucket maximum; counters);
* ``<col>_last`` for cumulative counters: the value of the bucket's newest sample;
* ``samples``: how many raw rows the bucket folded.

GPU columns are derived from :mod:`app.metrics.catalog` (:func:`gpu_fields`), so a metric added
there gets its rollup columns from the same rule (with the migration adding them).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
)

from app.db import Base, UInt64, UTCDateTime
from app.metrics.catalog import METRICS
from app.series.tables import DiskSample, NfsSample, NicPortSample, gpu_sample

#: Resolutions kept, seconds: 1-minute and 1-hour buckets.
RESOLUTIONS_S = (60, 3600)
#: GPU gauges whose bucket maximum is kept besides the average (peaks that an average hides).
GPU_MAX_KEPT = frozenset({"util_gpu_pct", "util_mem_pct", "power_w", "temp_c", "mem_temp_c"})
#: Kinds of aggregate a rollup column can hold.
KINDS = ("sum", "n", "max", "min", "last")


@dataclass(frozen=True)
class Field:
    """What a rollup keeps of one raw column (or of ``parts``, summed per row with NULL as 0).

    ``kinds`` ⊆ :data:`KINDS`; ``type_`` is the raw column's type (that of ``max``/``min``/
    ``last``; ``sum`` is Double, ``n`` Integer)."""

    name: str
    kinds: tuple[str, ...]
    type_: Any
    parts: tuple[str, ...] = ()

    def column(self, kind: str) -> str:
        """The rollup column name of ``kind``: ``power_w_sum``."""
        return f"{self.name}_{kind}"


def gpu_fields(metrics: Iterable[tuple[str, bool]]) -> tuple[Field, ...]:
    """Rollup fields of GPU metrics ``(name, integer)``: gauges keep Σ and count (plus the max
    for :data:`GPU_MAX_KEPT`); integer metrics keep the max, as their raw charts do; counters
    (``*_count``, ``energy_j``) also keep the last value."""
    fields = []
    for name, integer in metrics:
        kinds: tuple[str, ...] = ("max",) if integer else ("sum", "n")
        if not integer and name in GPU_MAX_KEPT:
            kinds += ("max",)
        if name.endswith("_count") or name == "energy_j":
            kinds += ("last",)
        fields.append(Field(name, kinds, BigInteger if integer else Double))
    return tuple(fields)


_GAUGE = ("sum", "n", "max")
_IB_ERRORS = (
    "symbol_error_count",
    "link_downed_count",
    "link_error_recovery_count",
    "port_rcv_errors_count",
    "port_xmit_discards_count",
)
GPU_FIELDS = gpu_fields((m.name, m.integer) for m in METRICS)
DISK_FIELDS = tuple(
    Field(c, _GAUGE, Double) for c in ("read_bytes_per_s", "write_bytes_per_s", "avg_wait_s")
)
NFS_FIELDS = (
    *(Field(c, _GAUGE, Double) for c in ("read_bytes_per_s", "write_bytes_per_s", "avg_rtt_s")),
    Field("retransmits", ("max", "min", "last"), UInt64),
)
NIC_FIELDS = (
    *(Field(c, _GAUGE, Double) for c in ("rx_bytes_per_s", "tx_bytes_per_s")),
    *(Field(c, ("max", "last"), BigInteger) for c in _IB_ERRORS),
    # The per-row sum of a port's error counters: "did any of them move" in one comparison.
    Field("errors", ("max", "min"), BigInteger, parts=_IB_ERRORS),
)


def rollup_columns(fields: Sequence[Field]) -> list[Column[Any]]:
    """``samples`` and one nullable column per field and kind."""
    columns: list[Column[Any]] = [Column("samples", Integer, nullable=False)]
    for f in fields:
        for kind in f.kinds:
            type_ = Double if kind == "sum" else Integer if kind == "n" else f.type_
            columns.append(Column(f.column(kind), type_, nullable=kind != "n"))
    return columns


def key_columns(kind: str) -> list[Column[Any]]:
    """The key columns of a rollup of ``kind`` (``gpu``, ``disk``, ``nfs``, ``nic``), the owner
    first with its cascade, as in the raw table."""
    if kind == "gpu":
        return [
            Column("gpu_id", Integer, ForeignKey("gpu.id", ondelete="CASCADE"), primary_key=True)
        ]
    node = Column("node_id", Integer, ForeignKey("node.id", ondelete="CASCADE"), primary_key=True)
    extras: dict[str, list[Column[Any]]] = {
        "disk": [Column("device", String(64), primary_key=True)],
        "nfs": [Column("mountpoint", String(512), primary_key=True)],
        "nic": [
            Column("device", String(64), primary_key=True),
            Column("port", Integer, primary_key=True, autoincrement=False),
        ],
    }
    return [node, *extras[kind]]


def rollup_table(
    metadata: MetaData, raw_name: str, kind: str, fields: Sequence[Field], resolution_s: int
) -> Table:
    """The table ``<raw>_1m`` / ``<raw>_1h``: primary key (keys…, ``bucket_start_s``), an index
    on ``bucket_start_s`` for fleet-wide ranges and retention."""
    name = f"{raw_name}_{'1m' if resolution_s == 60 else '1h'}"
    return Table(
        name,
        metadata,
        *key_columns(kind),
        Column("bucket_start_s", BigInteger, primary_key=True, autoincrement=False),
        *rollup_columns(fields),
        Index(f"ix_{name}_bucket_start_s", "bucket_start_s"),
    )


def _pair(raw_name: str, kind: str, fields: Sequence[Field]) -> dict[int, Table]:
    return {r: rollup_table(Base.metadata, raw_name, kind, fields, r) for r in RESOLUTIONS_S}


def fleet_table(metadata: MetaData, raw_name: str, fields: Sequence[Field]) -> Table:
    """The table ``<raw>_fleet_1m``: per 1-minute bucket, Σ over every key of the minute
    rollup's ``<col>_sum`` and ``<col>_n`` for each averaged gauge, plus how many keys
    (``series``) and samples it folded. One row per minute for the whole fleet, so the storage
    page's "all the others" line over a day reads 1,440 rows instead of one per key and minute
    (11.5 M for 1,000 nodes' IB ports)."""
    columns: list[Column[Any]] = [
        Column("series", Integer, nullable=False),
        Column("samples", Integer, nullable=False),
    ]
    for f in fields:
        if "sum" in f.kinds:
            columns += [
                Column(f.column("sum"), Double, nullable=True),
                Column(f.column("n"), BigInteger, nullable=False),
            ]
    return Table(
        f"{raw_name}_fleet_1m",
        metadata,
        Column("bucket_start_s", BigInteger, primary_key=True, autoincrement=False),
        *columns,
    )


GPU_ROLLUPS = _pair("gpu_sample", "gpu", GPU_FIELDS)
DISK_ROLLUPS = _pair("disk_sample", "disk", DISK_FIELDS)
NFS_ROLLUPS = _pair("nfs_sample", "nfs", NFS_FIELDS)
NIC_ROLLUPS = _pair("nic_port_sample", "nic", NIC_FIELDS)
DISK_FLEET = fleet_table(Base.metadata, "disk_sample", DISK_FIELDS)
NFS_FLEET = fleet_table(Base.metadata, "nfs_sample", NFS_FIELDS)
NIC_FLEET = fleet_table(Base.metadata, "nic_port_sample", NIC_FIELDS)

rollup_watermark = Table(
    "rollup_watermark",
    Base.metadata,
    Column("name", String(64), primary_key=True),
    Column("mark_at", UTCDateTime(), nullable=False),
)
"""The fold's progress marks: ``<raw>:folded_until`` (rollups hold every sample taken before it
that had arrived by then; charts read raw rows after it) and ``gpu_sample:received_at`` (rows
that arrived after it are still to be folded)."""

# The GPU fold finds new rows by arrival time (see app.series.rollups.fold). The index belongs to
# gpu_sample; it is declared here, beside the only reader, and created by migration 0005.
Index("ix_gpu_sample_received_at", gpu_sample.c.received_at)

RAW_TABLES: dict[str, Table] = {
    "gpu_sample": gpu_sample,
    "disk_sample": DiskSample.__table__,  # type: ignore[dict-item]
    "nfs_sample": NfsSample.__table__,  # type: ignore[dict-item]
    "nic_port_sample": NicPortSample.__table__,  # type: ignore[dict-item]
}
