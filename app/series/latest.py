"""Current state of the host entities and NVLinks: the newest reading of every disk, mount, NFS
mount and IB port, one row per (node, entity), and of every GPU's NVLink, one row per (GPU,
link), kept current as batches are stored.

The fleet pages ask "what does every port say now": read from the raw tables that is a
``DISTINCT ON`` over the newest rows of 8,000 ports, and for ports that went quiet a minute
rollup scan on top (~300 ms at 1,000 nodes). Here it is a read of one small table.

* ``<raw>_latest`` has the raw table's columns and its primary key without ``sampled_at``
  (:func:`latest_table`). NVLinks: the node page, the health check and topology drift read
  each link's newest reading (the agent sends a changed link alone between full rounds).
* The ingest writes it in the same transaction as the raw rows (:func:`upsert_sql` inside the
  staged move on Postgres, :func:`upsert_rows` elsewhere): a reading replaces the stored one
  only when it is newer, so a late or replayed batch never takes the state back, and on a tie
  the first stored wins, as for the raw rows.
* Retention drops rows older than the raw retention (:func:`prune`); a node's delete cascades.

The row equals the newest raw row of its key as long as that row is within retention (a test
compares both on either backend).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from operator import itemgetter
from typing import Any, cast

from sqlalchemy import (
    Column,
    ColumnElement,
    CursorResult,
    ForeignKey,
    FromClause,
    Integer,
    Row,
    Select,
    Table,
    delete,
    false,
    func,
    select,
)
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from app.db import Base
from app.series.tables import DiskSample, MountSample, NfsSample, NicPortSample, NvlinkSample


def latest_table(raw: Table, keys: tuple[str, ...], owner: str = "node_id") -> Table:
    """``<raw>_latest`` for a raw table keyed (``owner``, ``keys``…, ``sampled_at``), the owner
    a node (``node_id``) or a GPU (``gpu_id``): every column of ``raw``, primary key
    (``owner``, ``keys``…), deleted with its owner."""
    target = "node.id" if owner == "node_id" else "gpu.id"
    columns: list[Column[Any]] = [
        Column(owner, Integer, ForeignKey(target, ondelete="CASCADE"), primary_key=True),
        *(Column(k, raw.c[k].type, primary_key=True) for k in keys),
    ]
    for column in raw.columns:
        if column.name in {owner, *keys}:
            continue
        columns.append(Column(column.name, column.type, nullable=column.name != "sampled_at"))
    return Table(f"{raw.name}_latest", Base.metadata, *columns)


@dataclass(frozen=True)
class LatestSpec:
    """A raw table and its current-state table.

    Attributes:
        raw: the raw table, primary key (``owner``, ``keys``…, ``sampled_at``).
        table: ``<raw>_latest``, primary key (``owner``, ``keys``…).
        keys: the entity key after the owner (``device``; ``device``, ``port``; ``link`` …).
        owner: ``node_id``, or ``gpu_id`` for a GPU's NVLinks.
    """

    raw: Table
    table: Table
    keys: tuple[str, ...]
    owner: str = "node_id"

    @property
    def key_columns(self) -> tuple[str, ...]:
        """The owner and the entity key."""
        return (self.owner, *self.keys)


def _spec(model: type[Any], keys: tuple[str, ...], owner: str = "node_id") -> LatestSpec:
    raw: Table = model.__table__
    return LatestSpec(raw, latest_table(raw, keys, owner), keys, owner)


DISK = _spec(DiskSample, ("device",))
MOUNT = _spec(MountSample, ("mountpoint",))
NFS = _spec(NfsSample, ("mountpoint",))
NIC = _spec(NicPortSample, ("device", "port"))
NVLINK = _spec(NvlinkSample, ("link",), owner="gpu_id")
SPECS: tuple[LatestSpec, ...] = (DISK, MOUNT, NFS, NIC, NVLINK)
BY_RAW: dict[str, LatestSpec] = {s.raw.name: s for s in SPECS}


def upsert_sql(spec: LatestSpec, source: str, columns: Sequence[str]) -> str:
    """One Postgres ``INSERT … ON CONFLICT DO UPDATE`` taking the newest row of each key among
    ``source``'s rows (a table or CTE with ``columns``, which hold the key and
    ``sampled_at``) into ``spec.table``; a stored row is replaced only by a newer one. The
    table's columns missing from ``columns`` become NULL, as in the raw row."""
    names = ", ".join(columns)
    keys = ", ".join(spec.key_columns)
    target = spec.table.name
    updates = ", ".join(
        f"{c.name} = EXCLUDED.{c.name}" for c in spec.table.columns if not c.primary_key
    )
    return (
        f"INSERT INTO {target} ({names}) "
        f"SELECT DISTINCT ON ({keys}) {names} FROM {source} "
        f"ORDER BY {keys}, sampled_at DESC "
        f"ON CONFLICT ({keys}) DO UPDATE SET {updates} "
        f"WHERE {target}.sampled_at < EXCLUDED.sampled_at"
    )


def newest_rows(
    spec: LatestSpec, columns: Sequence[str], rows: Collection[Sequence[Any]]
) -> list[Sequence[Any]]:
    """The newest of ``rows`` (tuples in ``columns`` order, which hold ``spec``'s key and
    ``sampled_at``) per key of ``spec``; of two rows with one key and time, the first.

    C-level passes: a stable sort by time of the rows reversed, then a dict by key, which keeps
    each key's last row — the newest, and among equals the first of ``rows``."""
    at = list(columns).index("sampled_at")
    keyer = itemgetter(*(list(columns).index(k) for k in spec.key_columns))
    ordered = sorted(reversed(list(rows)), key=itemgetter(at))
    return list(dict(zip(map(keyer, ordered), ordered, strict=True)).values())


def upsert_rows(
    session: Session, spec: LatestSpec, columns: Sequence[str], rows: Collection[Sequence[Any]]
) -> None:
    """:func:`upsert_sql` for a backend without it (SQLite): the newest of ``rows`` (tuples in
    ``columns`` order) per key, then one ``INSERT … ON CONFLICT DO UPDATE … WHERE`` each."""
    newest = newest_rows(spec, columns, rows)
    if not newest:
        return
    table = spec.table
    values = [
        {c.name: None for c in table.columns} | dict(zip(columns, row, strict=True))
        for row in newest
    ]
    stmt = sqlite_insert(table)
    stmt = stmt.on_conflict_do_update(
        index_elements=list(spec.key_columns),
        set_={c.name: stmt.excluded[c.name] for c in table.columns if not c.primary_key},
        where=table.c.sampled_at < stmt.excluded.sampled_at,
    )
    session.execute(stmt, values)


def read(
    session: Session,
    spec: LatestSpec,
    *,
    since: datetime | None = None,
    node_ids: Collection[int] | None = None,
    where: Sequence[ColumnElement[bool]] = (),
    columns: Sequence[str] | None = None,
) -> Sequence[Row[Any]]:
    """The current rows of ``spec`` (a node-owned one) read at ``since`` or later, of
    ``node_ids`` (every node when None), matching ``where`` (conditions on ``spec.table``'s
    columns), with ``columns`` (default every column) as attributes."""
    table = spec.table
    picked = [table.c[c] for c in columns] if columns is not None else [table]
    conditions: list[ColumnElement[bool]] = [*where]
    if since is not None:
        conditions.append(table.c.sampled_at >= since)
    if node_ids is not None:
        conditions.append(table.c.node_id.in_(list(node_ids)) if node_ids else false())
    return session.execute(select(*picked).where(*conditions)).all()


def of_owners(
    session: Session, spec: LatestSpec, owner_ids: Collection[int], *, window_s: float
) -> list[Row[Any]]:
    """The current rows of ``spec`` of each of ``owner_ids`` (nodes, or GPUs for NVLinks) read
    within ``window_s`` of that owner's newest one (an entity quiet for longer is gone:
    unmounted, removed), as the raw table's newest rows per key would give them."""
    if not owner_ids:
        return []
    table = spec.table
    owner = table.c[spec.owner]
    rows = session.execute(select(table).where(owner.in_(sorted(owner_ids)))).all()
    newest: dict[int, datetime] = {}
    for row in rows:
        held = newest.get(row[0])
        if held is None or row.sampled_at > held:
            newest[row[0]] = row.sampled_at
    window = timedelta(seconds=window_s)
    return [r for r in rows if r.sampled_at >= newest[r[0]] - window]


def of_node(session: Session, spec: LatestSpec, node_id: int, *, window_s: float) -> list[Row[Any]]:
    """:func:`of_owners` of one node."""
    return of_owners(session, spec, [node_id], window_s=window_s)


def current_of(
    spec: LatestSpec,
    *,
    owners: FromClause,
    columns: Sequence[str],
    window_start: Callable[[ColumnElement[Any]], ColumnElement[Any]],
    few: bool = False,
) -> Select[Any]:
    """``SELECT columns`` of the current rows of ``spec`` whose owner id is in ``owners.c.id``
    and that were read at or after ``window_start(newest)``, ``newest`` being the owner's
    newest current row of ``spec``: the rows :func:`of_owners` gives, in one statement. The
    caller adds its own conditions with ``.where``; when they keep ``few`` rows (links that
    are down), each kept row looks its owner's newest up (a correlated ``max``: 21 ms for
    1,000 nodes' 144,000 links, where grouping every owner takes 64 ms); otherwise every
    owner's newest is grouped once and joined back (125 ms for all their links, where the
    correlated form takes 650 ms)."""
    table = spec.table
    owner = table.c[spec.owner]
    of_owners = owner.in_(select(owners.c.id))
    picked = [table.c[c] for c in columns]
    if few:
        other = table.alias(f"{table.name}_newest")
        newest_at: Any = (
            select(func.max(other.c.sampled_at))
            .where(other.c[spec.owner] == owner)
            .scalar_subquery()
        )
        return select(*picked).where(of_owners, table.c.sampled_at >= window_start(newest_at))
    newest = (
        select(owner.label("owner_id"), func.max(table.c.sampled_at).label("newest_at"))
        .where(of_owners)
        .group_by(owner)
        .subquery("owner_newest")
    )
    return (
        select(*picked)
        .join(newest, newest.c.owner_id == owner)
        .where(of_owners, table.c.sampled_at >= window_start(newest.c.newest_at))
    )


def prune(session: Session, *, cutoff: datetime) -> dict[str, int]:
    """Delete current rows read before ``cutoff`` (entities gone longer than the retention);
    rows deleted per table."""
    deleted: dict[str, int] = {}
    for spec in SPECS:
        result = session.execute(delete(spec.table).where(spec.table.c.sampled_at < cutoff))
        deleted[spec.table.name] = int(cast(CursorResult[Any], result).rowcount or 0)
    return deleted
