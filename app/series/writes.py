"""Helpers shared by the per-node time-series tables (``gpu_sample``, ``disk_sample`` …): an
idempotent bulk insert (portable, and a COPY-based one for Postgres) that also keeps their
current-state tables (:mod:`app.series.latest`), and the window of "current" readings.

Every such table has a primary key of (owner, natural key…, ``sampled_at``), so a re-sent row is
a conflict that is skipped, never a second row.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from operator import itemgetter
from typing import Any, TypeVar, cast

import psycopg
from sqlalchemy import (
    BigInteger,
    CursorResult,
    DateTime,
    Double,
    Integer,
    Numeric,
    String,
    Table,
    bindparam,
    select,
    text,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from app.series import arrivals
from app.series import latest as latest_store
from app.series.latest import LatestSpec

#: The savepoint of a straight COPY (:func:`insert_staged`).
_SAVEPOINT = "fleetwatch_straight_copy"
#: Keys (a disk, a mount, a NIC port …) whose newest row is older than this, measured from the
#: newest row of the same owner, are gone (unmounted, removed) and not shown as current.
LATEST_WINDOW_S = 600.0

Row = TypeVar("Row")


def insert_ignoring_conflicts(
    session: Session, table: Table, rows: Sequence[dict[str, Any]], *, key: Sequence[str]
) -> int:
    """Insert ``rows`` into ``table``, skipping any whose primary key ``key`` is already stored
    (``ON CONFLICT DO NOTHING`` on Postgres and SQLite); returns how many went in.

    A plain executemany (psycopg pipelines it; the engine turns SQLAlchemy's "insertmanyvalues"
    off) whose summed rowcount says how many rows went in. Not ``RETURNING``: that batches rows
    into one long multi-row statement per page, which psycopg re-parses uncached every time —
    several times slower for a 480-sample batch (bench/ingest_rate.py). Where a driver cannot
    tell (rowcount -1), every row counts.
    """
    if not rows:
        return 0
    dialect = session.get_bind().dialect
    if dialect.name != "postgresql":
        plain = sqlite_insert(table).on_conflict_do_nothing(index_elements=list(key))
        done = cast(CursorResult[Any], session.execute(plain, list(rows)))
        return done.rowcount if done.rowcount >= 0 else len(rows)
    columns = list(rows[0])
    stmt = pg_insert(table).on_conflict_do_nothing(index_elements=list(key))
    # Compiled once to plain SQL with typed binds: SQLAlchemy's Core executemany reports
    # rowcount -1 on psycopg, a textual one the driver's summed count.
    sql = str(stmt.compile(dialect=dialect, column_keys=columns))
    typed = text(_to_named(sql)).bindparams(
        *(bindparam(name, type_=table.c[name].type) for name in columns)
    )
    result = cast(CursorResult[Any], session.execute(typed, list(rows)))
    return result.rowcount if result.rowcount >= 0 else len(rows)


@dataclass
class StagedRows:
    """Rows bound for one time-series table, inserted by :func:`insert_staged`.

    Attributes:
        rows: tuples in ``columns`` order; rows repeating a stored key are skipped.
        newest_per: an owner column: collect the newest ``sampled_at`` that went in per owner
            (the table's primary key must then be (owner, ``sampled_at``)).
        inserted: after :func:`insert_staged`, how many rows went in.
        newest: after :func:`insert_staged`, with ``newest_per``: owner → newest ``sampled_at``
            among the rows whose key was not stored before.
        latest: the table's current-state form (:mod:`app.series.latest`), kept current in
            the same transaction: the newest of ``rows`` per key replaces an older stored one.
        feed: with ``newest_per``, append to :mod:`app.series.arrivals` one row per owner of
            the rows that went in (Postgres; its reader reloads whole elsewhere).
        straight: after :func:`insert_staged` on Postgres, whether the rows were copied
            straight into the table (none of their keys was stored) rather than staged.
    """

    table: Table
    columns: tuple[str, ...]
    rows: Collection[Sequence[Any]]
    newest_per: str | None = None
    inserted: int = 0
    newest: dict[Any, datetime] = field(default_factory=dict)
    latest: LatestSpec | None = None
    feed: bool = False
    straight: bool = False


def insert_staged(session: Session, batches: Sequence[StagedRows]) -> None:
    """Insert each of ``batches`` into its table, skipping rows whose primary key is stored;
    fills in their ``inserted``, ``newest`` and ``straight``.

    On Postgres, first straight: a binary ``COPY`` per table into the table itself under a
    savepoint, then one statement for the ``latest`` upserts (from the rows just stored) and
    the arrival feed (from the owners' time ranges). A batch repeating a
    stored key (a replayed spool, a sample sent twice) makes a ``COPY`` fail on the primary
    key: then, back at the savepoint, the staged path, as for every batch before: a binary
    ``COPY`` per table into a staging table (``TEMP``, ``ON COMMIT DELETE ROWS``, created on
    first use), then ONE statement that moves every staging table's rows over with
    ``INSERT … ON CONFLICT DO NOTHING``, empties them, counts what went in and keeps each
    ``latest`` table current from the same rows. A fleet's batches are new rows almost always,
    and the straight path spares Postgres the staging copy and the move of every row (about a
    third of its CPU per batch at the agent's defaults: docs/scaling.md). Round trips, not
    rows, are what a batch of a few thousand rows costs most (bench/ingest_rate.py).
    Elsewhere (SQLite): :func:`insert_ignoring_conflicts` per table, then the ``latest`` upsert.

    Raises:
        ValueError: two of ``batches`` name one table.
    """
    todo = [b for b in batches if b.rows]
    if len({b.table.name for b in todo}) != len(todo):
        raise ValueError("one StagedRows per table")
    if not todo:
        return
    if session.get_bind().dialect.name != "postgresql":
        for batch in todo:
            _insert_portable(session, batch)
            if batch.latest is not None:
                latest_store.upsert_rows(session, batch.latest, batch.columns, batch.rows)
        return
    cursor = session.connection().connection.cursor()
    try:
        if _copied_straight(cursor, todo):
            _after_straight(cursor, todo)
        else:
            _insert_through_staging(cursor, todo)
    finally:
        cursor.close()


def _copy(cursor: Any, target: str, batch: StagedRows, rows: Collection[Sequence[Any]]) -> None:
    """One binary ``COPY`` of ``rows`` (``batch.columns``, typed as ``batch.table``'s) into
    the table ``target``."""
    names = ", ".join(batch.columns)
    with cursor.copy(f"COPY {target} ({names}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(_copy_oids(cursor, batch.table, batch.columns))
        for row in rows:
            copy.write_row(row)


def _copy_oids(cursor: Any, table: Table, columns: tuple[str, ...]) -> list[int]:
    """The type OIDs of ``columns`` of ``table`` for a binary ``COPY`` (:func:`pg_copy_type`),
    looked up once per table and columns: the builtin types' OIDs are the same in every
    database, and naming them made psycopg look each up again at every ``COPY``."""
    key = (table.name, columns)
    oids = _COPY_OIDS.get(key)
    if oids is None:
        types = cursor.adapters.types
        oids = _COPY_OIDS[key] = [types[pg_copy_type(table.c[name])].oid for name in columns]
    return oids


_COPY_OIDS: dict[tuple[str, tuple[str, ...]], list[int]] = {}


def _stage_name(batch: StagedRows) -> str:
    return f"stage_{batch.table.name}"


def _create_stages(batches: Sequence[StagedRows]) -> str:
    """SQL creating the staging table of each of ``batches`` where the session has none."""
    return "; ".join(
        f"CREATE TEMP TABLE IF NOT EXISTS {_stage_name(b)} (LIKE {b.table.name}) "
        "ON COMMIT DELETE ROWS"
        for b in batches
    )


def _copied_straight(cursor: Any, batches: Sequence[StagedRows]) -> bool:
    """COPY every batch's rows into its table under a savepoint; True when all went in, False
    (the savepoint rolled back to: nothing of them stored) when a row repeats a stored key or
    another row's of its batch. A key another transaction is storing makes the COPY wait for
    it, as ``INSERT … ON CONFLICT`` does: its commit fails the COPY, its rollback lets it on."""
    cursor.execute(f"SAVEPOINT {_SAVEPOINT}")
    try:
        for batch in batches:
            _copy(cursor, batch.table.name, batch, batch.rows)
    except (psycopg.errors.UniqueViolation, psycopg.errors.DeadlockDetected):
        # A deadlock: another transaction was copying some of the same keys in another order.
        cursor.execute(f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}; RELEASE SAVEPOINT {_SAVEPOINT}")
        return False
    cursor.execute(f"RELEASE SAVEPOINT {_SAVEPOINT}")
    return True


def _after_straight(cursor: Any, batches: Sequence[StagedRows]) -> None:
    """What the staged move does besides moving, for rows that all went in straight, in one
    statement: the counts and newest times, the ``latest`` upserts and the arrival feed.

    A ``latest`` table takes the newest raw row per key among its owners' rows from the
    batch's oldest time on: the rows just copied, and any newer one stored meanwhile (the
    upsert keeps the newest either way). Read back by the owner + time index, that costs
    Postgres less than a second COPY of the newest rows costs the server."""
    parts: list[str] = []
    params: list[Any] = []
    for position, batch in enumerate(batches):
        batch.straight = True
        batch.inserted += len(batch.rows)
        at = batch.columns.index("sampled_at")
        if batch.latest is not None:
            owner = batch.latest.owner
            owners = sorted(set(map(itemgetter(batch.columns.index(owner)), batch.rows)))
            source = (
                f"(SELECT * FROM {batch.table.name} WHERE {owner} = ANY(%s::integer[]) "
                "AND sampled_at >= %s) AS just_stored"
            )
            upsert = latest_store.upsert_sql(batch.latest, source, batch.columns)
            parts.append(f"latest_{position} AS ({upsert})")
            params += [owners, min(map(itemgetter(at), batch.rows))]
        if batch.newest_per is None:
            continue
        owner_at = batch.columns.index(batch.newest_per)
        first: dict[Any, datetime] = {}
        for row in batch.rows:
            owner_id, stamp = row[owner_at], row[at]
            if owner_id not in first:
                first[owner_id] = batch.newest[owner_id] = stamp
            elif stamp < first[owner_id]:
                first[owner_id] = stamp
            elif stamp > batch.newest[owner_id]:
                batch.newest[owner_id] = stamp
        if batch.feed:
            parts.append(f"fed_{position} AS ({arrivals.record_unnest_sql(batch.table.name)})")
            params += [list(first), list(first.values()), [batch.newest[o] for o in first]]
    if parts:
        cursor.execute("WITH " + ", ".join(parts) + " SELECT 1", params)


def _insert_through_staging(cursor: Any, batches: Sequence[StagedRows]) -> None:
    """The staged path of :func:`insert_staged`: COPY into staging tables, one moving
    statement."""
    cursor.execute(_create_stages(batches))
    for batch in batches:
        _copy(cursor, _stage_name(batch), batch, batch.rows)
    cursor.execute(_move_statement([_stage_name(b) for b in batches], list(batches)))
    for position, owner, count, newest in cursor.fetchall():
        batch = batches[position]
        batch.inserted += count
        if batch.newest_per is not None:
            batch.newest[owner] = newest


def _move_statement(stages: list[str], batches: list[StagedRows]) -> str:
    """``WITH`` one ``INSERT … RETURNING`` and one ``DELETE`` per staging table, then
    (position, owner, count, newest) per table and owner of the rows that went in."""
    ctes: list[str] = []
    counts: list[str] = []
    for position, (stage, batch) in enumerate(zip(stages, batches, strict=True)):
        names = ", ".join(batch.columns)
        owner = batch.newest_per or "NULL::integer"
        ctes.append(
            f"moved_{position} AS (INSERT INTO {batch.table.name} ({names}) "
            f"SELECT {names} FROM {stage} ON CONFLICT DO NOTHING "
            f"RETURNING {owner} AS owner, sampled_at)"
        )
        if batch.latest is not None:
            upsert = latest_store.upsert_sql(batch.latest, stage, batch.columns)
            ctes.append(f"latest_{position} AS ({upsert})")
        if batch.feed and batch.newest_per is not None:
            ctes.append(
                arrivals.record_cte(f"fed_{position}", batch.table.name, f"moved_{position}")
            )
        ctes.append(f"emptied_{position} AS (DELETE FROM {stage})")
        counts.append(
            f"SELECT {position}, owner, count(*), max(sampled_at) "
            f"FROM moved_{position} GROUP BY owner"
        )
    return "WITH " + ", ".join(ctes) + " " + " UNION ALL ".join(counts)


def _insert_portable(session: Session, batch: StagedRows) -> None:
    """:func:`insert_staged` without COPY: the keys already stored are looked up first when
    ``newest`` is wanted, then an executemany."""
    rows = [dict(zip(batch.columns, row, strict=True)) for row in batch.rows]
    fresh = rows
    if batch.newest_per is not None:
        owner = batch.table.c[batch.newest_per]
        stored = _stored_keys(session, batch.table, owner, rows)
        fresh = [r for r in rows if (r[owner.key], r["sampled_at"]) not in stored]
        for row in fresh:
            owner_id, at = row[owner.key], row["sampled_at"]
            if owner_id not in batch.newest or at > batch.newest[owner_id]:
                batch.newest[owner_id] = at
    key = [c.name for c in batch.table.primary_key.columns]
    batch.inserted += insert_ignoring_conflicts(session, batch.table, fresh, key=key)


def _stored_keys(
    session: Session, table: Table, owner: Any, rows: list[dict[str, Any]]
) -> set[tuple[Any, datetime]]:
    """Which (owner, ``sampled_at``) keys of ``rows`` are stored: one range query per owner."""
    by_owner: dict[Any, list[datetime]] = {}
    for row in rows:
        by_owner.setdefault(row[owner.key], []).append(row["sampled_at"])
    found: set[tuple[Any, datetime]] = set()
    for owner_id, stamps in by_owner.items():
        result = session.execute(
            select(table.c.sampled_at).where(
                owner == owner_id,
                table.c.sampled_at >= min(stamps),
                table.c.sampled_at <= max(stamps),
            )
        )
        found.update((owner_id, at) for (at,) in result)
    return found


def pg_copy_type(column: Any) -> str:
    """The Postgres type name psycopg's binary COPY needs for the values of ``column`` (a
    SQLAlchemy column of a time-series table)."""
    kind = column.type
    if column.foreign_keys and not isinstance(kind, Integer):  # typed from its target lazily
        kind = next(iter(column.foreign_keys)).column.type
    if hasattr(kind, "load_dialect_impl"):  # UTCDateTime, UInt64
        kind = kind.load_dialect_impl(_PG)
    for sa_type, name in _PG_TYPES:
        if isinstance(kind, sa_type):
            return name
    raise TypeError(f"no COPY type for {column.name} ({kind!r})")


_PG = postgresql.dialect()
_PG_TYPES: tuple[tuple[type[Any], str], ...] = (
    (BigInteger, "int8"),
    (Integer, "int4"),
    (Double, "float8"),
    (Numeric, "numeric"),
    (DateTime, "timestamptz"),
    (String, "text"),
)


def _to_named(sql: str) -> str:
    """Psycopg's ``%(name)s::TYPE`` placeholders as ``:name`` (the driver infers the type from
    the Python value; SQLite's are ``:name`` already)."""
    return _PYFORMAT.sub(r":\1", sql)


_PYFORMAT = re.compile(
    r"%\((\w+)\)s(?:::[A-Z][A-Z0-9_]*(?: [A-Z][A-Z0-9_]*)*(?:\(\d+(?:, ?\d+)?\))?)?"
)


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """A sort key that orders the numbers inside ``name`` by value: ``mlx5_2`` before
    ``mlx5_10``, ``nvme2n1`` before ``nvme10n1``."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name)
    )
