"""Which raw table rolls up into which tables, by which keys and fields: one :class:`Spec` per
raw table, used by the fold, the query side and retention alike."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace
from datetime import datetime

from sqlalchemy import ColumnElement, Table, func, literal, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnClause

from app.db import UInt64
from app.series import read as series_read
from app.series.blocks import BY_NAME as BLOCK_FORMS
from app.series.rollups import models as m


@dataclass(frozen=True)
class Spec:
    """A raw table, its key columns (owner first), rolled-up fields and rollup tables by
    resolution; ``by_arrival`` when the raw table has ``received_at`` (folded by watermark);
    ``fleet`` the fleet-wide minute sums of its gauges
    (:func:`~app.series.rollups.models.fleet_table`),
    where a page charts "every other key" of it."""

    name: str
    raw: Table
    keys: tuple[str, ...]
    fields: tuple[m.Field, ...]
    tables: dict[int, Table]
    by_arrival: bool = False
    fleet: Table | None = None

    @property
    def horizon_key(self) -> str:
        """The :data:`~app.series.rollups.models.rollup_watermark` name of the folded-until mark."""
        return f"{self.name}:folded_until"

    @property
    def arrival_key(self) -> str:
        """The :data:`~app.series.rollups.models.rollup_watermark` name of the arrival watermark."""
        return f"{self.name}:received_at"

    @property
    def owner(self) -> str:
        """The owner key column: ``gpu_id`` or ``node_id``."""
        return self.keys[0]

    def field(self, name: str) -> m.Field:
        """The field called ``name``.

        Raises:
            KeyError: no such field.
        """
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)


GPU = Spec("gpu_sample", m.gpu_sample, ("gpu_id",), m.GPU_FIELDS, m.GPU_ROLLUPS, by_arrival=True)
DISK = Spec(
    "disk_sample",
    m.RAW_TABLES["disk_sample"],
    ("node_id", "device"),
    m.DISK_FIELDS,
    m.DISK_ROLLUPS,
    fleet=m.DISK_FLEET,
)
NFS = Spec(
    "nfs_sample",
    m.RAW_TABLES["nfs_sample"],
    ("node_id", "mountpoint"),
    m.NFS_FIELDS,
    m.NFS_ROLLUPS,
    fleet=m.NFS_FLEET,
)
NIC = Spec(
    "nic_port_sample",
    m.RAW_TABLES["nic_port_sample"],
    ("node_id", "device", "port"),
    m.NIC_FIELDS,
    m.NIC_ROLLUPS,
    fleet=m.NIC_FLEET,
)
SPECS: tuple[Spec, ...] = (GPU, DISK, NFS, NIC)
BY_RAW: dict[str, Spec] = {s.name: s for s in SPECS}


def readable(
    spec: Spec,
    start: datetime,
    end: datetime,
    dialect: str,
    names: Collection[str] | None = None,
) -> Spec:
    """``spec`` reading its raw samples in ``[start, end]`` whatever their form: on Postgres a
    table with a compacted form (:mod:`app.series`) is read as raw rows ∪ unpacked blocks,
    unpacking the columns of the fields ``names`` only (all fields when ``None``: a chart's
    edge needs 4 of a GPU block's 39 arrays, and each array is decompressed whole)."""
    if spec.name not in BLOCK_FORMS or dialect != "postgresql":
        return spec
    wanted = [f for f in spec.fields if names is None or f.name in names]
    columns = sorted({p for f in wanted for p in (f.parts or (f.name,))})
    rows = series_read.rows_between(
        spec.name, columns=columns, start=start, end=end, dialect=dialect
    )
    return replace(spec, raw=rows)  # type: ignore[arg-type]


def get_mark(session: Session, name: str) -> datetime | None:
    """The stored progress mark ``name`` (:data:`~app.series.rollups.models.rollup_watermark`), or
    ``None``."""
    return session.scalar(
        select(m.rollup_watermark.c.mark_at).where(m.rollup_watermark.c.name == name)
    )


def read_mark(session: Session, name: str) -> datetime | None:
    """:func:`get_mark`, read once per session where the session opted in with
    :func:`keep_marks` (a page asking for the same folded-until mark once per chart query: 14
    times on /storage)."""
    marks: dict[str, datetime | None] | None = session.info.get(_MARKS)
    if marks is None:
        return get_mark(session, name)
    if name not in marks:
        marks[name] = get_mark(session, name)
    return marks[name]


def keep_marks(session: Session) -> None:
    """Let :func:`read_mark` keep the marks it reads for the rest of ``session`` (a read-only
    request's: the jobs that move them use their own sessions)."""
    session.info.setdefault(_MARKS, {})


_MARKS = "rollup_marks"


def ordered(
    column: ColumnElement[object] | ColumnClause[object], dialect: str
) -> ColumnElement[object]:
    """``column`` in a form whose max/min order numerically: on SQLite a :class:`UInt64` is
    decimal text, so it is zero-padded to 20 digits (as :mod:`app.storage.fleet_service`
    does for raw rows); the padded text is what rollups store there."""
    if dialect == "sqlite" and isinstance(column.type, UInt64):
        return func.substr(literal("0" * 20).concat(column), -20)
    return column


def raw_value(spec: Spec, f: m.Field, dialect: str, *, for_order: bool) -> ColumnElement[object]:
    """The raw-row expression of field ``f``: its column (padded for ordering on SQLite when
    ``for_order``), or the NULL-as-0 sum of its ``parts``."""
    if f.parts:
        cols = [func.coalesce(spec.raw.c[p], 0) for p in f.parts]
        total: ColumnElement[object] = cols[0]
        for c in cols[1:]:
            total = total + c
        return total
    column = spec.raw.c[f.name]
    return ordered(column, dialect) if for_order else column
