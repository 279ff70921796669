"""Block tables: one row per series (a GPU, a GPU's NVLink, a node's disk, mount, NFS mount or
IB port) and time block, holding the block's samples as one array per column, in time order.

Postgres compresses each array above ~2 kB of row with ``pglz`` (TOAST), so an hour of 5-s
samples (720 values) of a slowly moving metric costs a fraction of a byte per value; integers
stay ``bigint`` and gauges ``double precision``, so a value read back is the value stored. On
SQLite the tables exist (the schema is one) but stay empty: the embedded try-out keeps raw rows.

A GPU whose samples come :data:`WIDE_SPACING_S` apart or more is packed in 6-hour blocks instead
of hour blocks (each row records its width, ``block_s``), so that its arrays are long enough to
compress; every reader takes a row's own width (:func:`width_sql`, :func:`block_end`).

Sample times are stored as microsecond steps (``sampled_at_delta_us``), exact to Postgres's
resolution; readers get ``sampled_at`` back from :mod:`app.series.read`.

Each table is described by a :class:`BlockSpec` naming its raw table, its series key (owner
first) and its value columns; :mod:`app.series.compact` and :mod:`app.series.read` work from
the spec alone. The host tables' block forms are made from their raw tables' columns
(:func:`host_block_table`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Column,
    ColumnElement,
    Double,
    ForeignKey,
    Index,
    Integer,
    Table,
    Text,
    func,
    literal,
    type_coerce,
)
from sqlalchemy.types import TypeEngine

from app.db import Base, UInt64, UTCDateTime
from app.metrics.catalog import METRICS
from app.series.tables import (
    DiskSample,
    MountSample,
    NfsSample,
    NicPortSample,
    NvlinkSample,
    gpu_sample,
)

#: Width of a GPU block: an hour, aligned on the Unix epoch (``date_bin``'s origin below).
BLOCK_S = 3600
#: Width of a GPU block of a slowly sampled series (:data:`WIDE_SPACING_S`): 6 hours, as the
#: NVLink blocks. An hour of 60-s samples holds 60 values per array, too few for pglz (2.05
#: bytes per value, 1.40 × Prometheus); 6 hours (360) take 1.26, a day (1,440) 1.11, but a
#: chart's partial edge unpacks the block it falls in: ~5 ms for a node's 8 GPUs at 6 hours,
#: ~30 at a day (bench/storage_bytes.py --step 60).
WIDE_BLOCK_S = 6 * 3600
#: A series whose samples are at least this far apart (median, seconds) is packed in wide
#: blocks (:attr:`BlockSpec.wide_s`); the agent's 5-10 s defaults keep hour blocks.
WIDE_SPACING_S = 30
#: Width of an NVLink block: 6 hours. Readings come every 30-60 s, and an hour of them (60-120
#: values per array) is too short for Postgres to compress well (35 bytes per reading at 60 s
#: in hour blocks).
NVLINK_BLOCK_S = 6 * 3600
#: Width of a host block (disks, mounts, NFS mounts, IB ports): a day. The agent sends one
#: reading per entity a minute (``--host-interval``), so an hour or six would hold 60-360
#: values per array, too few for Postgres to compress well.
HOST_BLOCK_S = 86400
BLOCK_ORIGIN = "2000-01-01 00:00:00+00"


def array_of(element: TypeEngine[Any]) -> TypeEngine[Any]:
    """A Postgres array of ``element``; JSON text on SQLite, where block tables stay empty."""
    return ARRAY(element).with_variant(Text(), "sqlite")


INTEGERS = array_of(BigInteger())
FLOATS = array_of(Double())
TEXTS = array_of(Text())
COUNTERS = array_of(UInt64())

#: Float columns of a GPU block kept as integer steps where that is exact: name → scale.
#: ``energy_j`` is NVML's millijoule counter divided by 1000 (app/metrics/catalog.py): as
#: doubles an hour of it is 8 bytes per value that pglz cannot shrink (a fifth of a block at
#: 10-s samples), as steps of whole millijoules between samples it is under half that.
GPU_STEPPED = {"energy_j": 1000}


def steps_column(name: str) -> str:
    """The block column holding ``name``'s integer steps (see :class:`BlockSpec`)."""
    return f"{name}_steps"


gpu_sample_block = Table(
    "gpu_sample_block",
    Base.metadata,
    Column("gpu_id", Integer, ForeignKey("gpu.id", ondelete="CASCADE"), primary_key=True),
    Column("block_start", UTCDateTime(), primary_key=True),
    Column("sample_count", Integer, nullable=False),
    Column("received_until", UTCDateTime(), nullable=False),
    Column("block_s", Integer, nullable=True),
    Column("sampled_at_delta_us", INTEGERS, nullable=False),
    *(
        Column(m.name, INTEGERS if m.integer else FLOATS, nullable=m.name in GPU_STEPPED)
        for m in METRICS
    ),
    *(Column(steps_column(name), INTEGERS, nullable=True) for name in GPU_STEPPED),
    Index("ix_gpu_sample_block_block_start", "block_start"),
)
"""An hour (``block_s`` NULL) or 6 hours (``block_s`` = :data:`WIDE_BLOCK_S`, a slowly sampled
series: :attr:`BlockSpec.wide_s`) of one GPU's ``gpu_sample`` rows; ``received_until`` is the
newest arrival among them (per-sample arrival times are not kept once compacted).
``sampled_at_delta_us`` holds each sample's time as microseconds since the previous sample (the
first: since ``block_start``): at a steady interval the array repeats one value and compresses
to almost nothing, where the timestamps themselves took 16 % of a block. A column of
:data:`GPU_STEPPED` is stored in one of two forms per block: its doubles, or (``<name>_steps``,
the doubles ``NULL``) each value times the scale as an integer step from the previous value (the
first from 0)."""

nvlink_sample_block = Table(
    "nvlink_sample_block",
    Base.metadata,
    Column("gpu_id", Integer, ForeignKey("gpu.id", ondelete="CASCADE"), primary_key=True),
    Column("link", Integer, primary_key=True),
    Column("block_start", UTCDateTime(), primary_key=True),
    Column("sample_count", Integer, nullable=False),
    Column("sampled_at_delta_us", INTEGERS, nullable=False),
    Column("state", TEXTS, nullable=False),
    Column("speed_gbps", FLOATS, nullable=False),
    Column("remote_pci_bus_id", TEXTS, nullable=False),
    Column("remote_device_type", TEXTS, nullable=False),
    Column("tx_bytes_per_s", FLOATS, nullable=False),
    Column("rx_bytes_per_s", FLOATS, nullable=False),
    Column("crc_errors", INTEGERS, nullable=False),
    Column("replay_errors", INTEGERS, nullable=False),
    Column("recovery_errors", INTEGERS, nullable=False),
    Index("ix_nvlink_sample_block_block_start", "block_start"),
)
"""Six hours of one NVLink's ``nvlink_sample`` rows (:data:`NVLINK_BLOCK_S`)."""


def _array_like(column: Column[Any]) -> TypeEngine[Any]:
    """The array type holding ``column``'s values: ``bigint[]``, ``numeric(20)[]`` (exact
    64-bit counters), ``double precision[]`` or ``text[]``."""
    kind = column.type
    if isinstance(kind, UInt64):
        return COUNTERS
    if isinstance(kind, BigInteger | Integer):
        return INTEGERS
    if isinstance(kind, Double):
        return FLOATS
    return TEXTS


def host_block_table(raw: Table, keys: tuple[str, ...]) -> Table:
    """``<raw>_block`` for a node-owned raw table keyed (``node_id``, ``keys``…,
    ``sampled_at``): the same key columns, ``block_start``, ``sample_count``,
    ``sampled_at_delta_us`` and an array per value column (:data:`HOST_BLOCK_S` wide)."""
    skip = {"node_id", *keys, "sampled_at"}
    return Table(
        f"{raw.name}_block",
        Base.metadata,
        Column("node_id", Integer, ForeignKey("node.id", ondelete="CASCADE"), primary_key=True),
        *(Column(k, raw.c[k].type, primary_key=True) for k in keys),
        Column("block_start", UTCDateTime(), primary_key=True),
        Column("sample_count", Integer, nullable=False),
        Column("sampled_at_delta_us", INTEGERS, nullable=False),
        *(
            Column(c.name, _array_like(c), nullable=False)
            for c in raw.columns
            if c.name not in skip
        ),
        Index(f"ix_{raw.name}_block_block_start", "block_start"),
    )


def _host_spec(model: type[Any], keys: tuple[str, ...]) -> BlockSpec:
    raw: Table = model.__table__
    block = host_block_table(raw, keys)
    meta = {"node_id", *keys, "block_start", "sample_count", "sampled_at_delta_us"}
    values = tuple(c.name for c in block.columns if c.name not in meta)
    return BlockSpec(raw.name, raw, block, ("node_id", *keys), values, block_s=HOST_BLOCK_S)


@dataclass(frozen=True)
class BlockSpec:
    """A raw sample table and its block table.

    Attributes:
        name: the raw table's name (``gpu_sample``).
        raw: the raw table: primary key ``keys`` + ``sampled_at``.
        block: the block table: ``keys`` + ``block_start`` + ``sample_count`` +
            ``sampled_at_delta_us`` + one array per ``values`` column.
        keys: the series key, owner (``gpu_id``) first.
        values: the value columns, alike in name in both tables.
        arrival: True when the raw table has ``received_at`` (kept as ``received_until``).
        block_s: the width of a block, seconds (a divisor of a day, or a day); with
            ``wide_s`` the width of a block whose ``block_s`` column is NULL.
        wide_s: where set, the block table has a ``block_s`` column: NULL for a block
            ``block_s`` wide, ``wide_s`` for a block of a series sampled
            :data:`WIDE_SPACING_S` apart or more (a multiple of ``block_s``, aligned alike, so
            every block of a series lies in one wide span). Compaction chooses per series and
            wide span (:mod:`app.series.compact`); readers take each row's own width.
        stepped: value columns (name → scale) stored as integer steps where exact: a block
            whose every value ``v`` of the column is non-null and ``round(v × scale) / scale
            == v`` in double arithmetic keeps ``round(v × scale)`` minus the previous one in
            ``<name>_steps`` and ``NULL`` in ``<name>``; any other block keeps the doubles.
            Readers sum the steps in order and divide by the scale, which gives back the
            very double that was checked (:func:`stepped_value_sql`).
    """

    name: str
    raw: Table
    block: Table
    keys: tuple[str, ...]
    values: tuple[str, ...]
    arrival: bool = False
    block_s: int = BLOCK_S
    stepped: tuple[tuple[str, int], ...] = ()
    wide_s: int | None = None

    @property
    def owner(self) -> str:
        """The owner column (``gpu_id`` or ``node_id``)."""
        return self.keys[0]

    @property
    def widths(self) -> tuple[int, ...]:
        """The widths a block may have, seconds, narrowest first."""
        return (self.block_s,) if self.wide_s is None else (self.block_s, self.wide_s)

    @property
    def max_block_s(self) -> int:
        """The widest block, seconds: ``block_start > t - max_block_s`` bounds the blocks that
        may hold time ``t`` (an index range)."""
        return self.widths[-1]


def width_sql(spec: BlockSpec, alias: str) -> str:
    """SQL: the width in seconds of the block row ``alias`` of ``spec``'s block table."""
    if spec.wide_s is None:
        return str(spec.block_s)
    return f"coalesce({alias}.block_s, {spec.block_s})"


def end_sql(spec: BlockSpec, alias: str) -> str:
    """SQL (Postgres): the end (exclusive) of the block row ``alias``."""
    return f"{alias}.block_start + make_interval(secs => {width_sql(spec, alias)})"


def block_end(spec: BlockSpec) -> ColumnElement[datetime]:
    """The end (exclusive) of a row of ``spec.block`` as an expression (Postgres)."""
    block = spec.block
    width: ColumnElement[int] = (
        func.coalesce(block.c.block_s, spec.block_s)
        if spec.wide_s is not None
        else literal(spec.block_s)
    )
    end = block.c.block_start + func.make_interval(0, 0, 0, 0, 0, 0, width)
    return type_coerce(end, UTCDateTime())


GPU = BlockSpec(
    "gpu_sample",
    gpu_sample,
    gpu_sample_block,
    ("gpu_id",),
    tuple(m.name for m in METRICS),
    arrival=True,
    stepped=tuple(GPU_STEPPED.items()),
    wide_s=WIDE_BLOCK_S,
)
NVLINK = BlockSpec(
    "nvlink_sample",
    NvlinkSample.__table__,  # type: ignore[arg-type]
    nvlink_sample_block,
    ("gpu_id", "link"),
    (
        "state",
        "speed_gbps",
        "remote_pci_bus_id",
        "remote_device_type",
        "tx_bytes_per_s",
        "rx_bytes_per_s",
        "crc_errors",
        "replay_errors",
        "recovery_errors",
    ),
    block_s=NVLINK_BLOCK_S,
)
DISK = _host_spec(DiskSample, ("device",))
MOUNT = _host_spec(MountSample, ("mountpoint",))
NFS = _host_spec(NfsSample, ("mountpoint",))
NIC = _host_spec(NicPortSample, ("device", "port"))
HOST_SPECS: tuple[BlockSpec, ...] = (DISK, MOUNT, NFS, NIC)
SPECS: tuple[BlockSpec, ...] = (GPU, NVLINK, *HOST_SPECS)
BY_NAME: dict[str, BlockSpec] = {s.name: s for s in SPECS}

#: Largest magnitude of a stepped value times its scale that is checked: a ``bigint`` holds it
#: with room for a step between two such values (bigger values keep their doubles).
STEPPED_LIMIT = 4.0e18


def exact_steps_sql(value: str, scale: int) -> str:
    """SQL true where the double ``value`` can be stored as an integer at ``scale`` and read
    back as the same double by :func:`stepped_value_sql` (false for NULL and NaN)."""
    # CASE, not AND: Postgres may evaluate AND's operands in any order, and the cast of a
    # value past the limit raises.
    # -0.0 equals 0.0 but would read back as 0.0: atan2 tells the zeros apart.
    return (
        f"coalesce(CASE WHEN abs({value}) * {scale} < {STEPPED_LIMIT:.0f} "
        f"THEN CAST(round({value} * {scale}) AS bigint)::float8 / {scale}::float8 = {value} "
        f"AND NOT ({value} = 0 AND atan2({value}, -1::float8) < 0) END, false)"
    )


def step_sql(value: str, scale: int, window: str) -> str:
    """SQL: ``value`` times ``scale`` as an integer, minus the previous row's in ``window`` (a
    window definition); NULL where the value cannot be stepped (the block keeps doubles)."""
    scaled = (
        f"CASE WHEN {exact_steps_sql(value, scale)} "
        f"THEN CAST(round({value} * {scale}) AS bigint) END"
    )
    return f"{scaled} - coalesce(lag({scaled}) OVER ({window}), 0)"


def stepped_value_sql(value: str, steps: str, scale: int, order: str) -> str:
    """SQL: a stepped column's value at one unnested row: ``value`` (the doubles' element) when
    the block kept doubles, else the running sum of ``steps`` in ``order`` over the scale."""
    return (
        f"coalesce({value}, "
        f"CAST(CAST(sum({steps}) OVER (ORDER BY {order}) AS bigint) AS float8) / {scale}::float8)"
    )
