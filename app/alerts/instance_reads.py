"""The alert instances an evaluation steps, read from ``alert_instance`` (this package's table):
the columns the state machine and the change test need, as Core rows, and on Postgres a cache
that each tick reads only the instances written since its last read.

At 1,000 nodes an evaluation steps ~20,000 active instances; reading them whole was ~0.2 s of
every tick, though a steady tick changes a few hundred. :class:`ActiveInstanceCache` keeps them
between ticks and reads the rows whose version Postgres wrote since (``xmin``, the writing
transaction's id, against the previous read's snapshot: "System Columns" and "Transaction ID
and Snapshot Information Functions" of the PostgreSQL manual). Any transaction that was not
visible to the previous read has an id at or above that snapshot's ``xmin``, so every write
since — the evaluator's own, an acknowledgement, a rule disabled — is read again, whichever
process made it and in whichever order they commit. A delete leaves no row to read; the
number of active instances, read in the same statement, then disagrees with the cache's and
it loads whole.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, cast

import orjson
from sqlalchemy import (
    BigInteger,
    DateTime,
    Integer,
    Table,
    Text,
    and_,
    any_,
    bindparam,
    func,
    literal_column,
    select,
    true,
    type_coerce,
)
from sqlalchemy import cast as sql_cast
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session
from sqlalchemy.types import TypeDecorator

from app.alerts.models import AlertInstance
from app.db import UTCDateTime, json_loads

_T = cast(Table, AlertInstance.__table__)
ACTIVE = ("pending", "firing")
#: What the state machine and the change test read of an instance (Core rows, not ORM objects:
#: a rule firing on 8,000 GPUs loads 8,000 tuples, not 8,000 tracked objects).
READ = (
    "id",
    "fingerprint",
    "labels",
    "value",
    "summary",
    "description",
    "state",
    "active_since",
    "last_active_at",
    "fired_at",
    "resolved_at",
    "last_evaluated_at",
    "value_at",
    "silenced",
    "acked",
)
#: Where each of :data:`READ` is in a row read (``rule_id`` first; by position: a Row's
#: attribute lookup was ~0.1 s a tick over the ~20,000 active instances' columns).
AT = {c: i for i, c in enumerate(READ, start=1)}
#: The timestamps of :data:`READ`.
_TIMES = frozenset(c for c in READ if isinstance(_T.c[c].type, UTCDateTime))
#: Rule id → fingerprint → row (``rule_id`` then :data:`READ`).
Active = dict[int, dict[str, Any]]


class _LabelsText(TypeDecorator[Any]):
    """An instance's labels read as JSON text and parsed here by orjson: the driver's own
    JSON loader cost ~15 µs per row, ~0.2 s a tick for the ~20,000 active instances read at
    1,000 nodes. Labels are strings only (``app.alerts.evaluator.instance_labels``), so the
    long-integer check of :func:`app.db.json_loads` (a regular expression over the text, 3 µs
    a row) is left to documents orjson refuses."""

    impl = Text
    cache_ok = True

    def process_result_value(self, value: Any, dialect: Any) -> Any:
        if value is None:
            return None
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return json_loads(value)


def read_columns(session: Session) -> list[Any]:
    """``rule_id`` and the :data:`READ` columns, labels as :class:`_LabelsText`. On Postgres
    the timestamps come as the driver reads them (timezone-aware already): the UTC type's
    result processing was ~0.15 s a tick for the ~20,000 active instances read at 1,000
    nodes."""
    postgres = session.get_bind().dialect.name == "postgresql"
    out: list[Any] = [_T.c.rule_id]
    for c in READ:
        if c == "labels":
            out.append(type_coerce(sql_cast(_T.c.labels, Text), _LabelsText).label(c))
        elif postgres and c in _TIMES:
            out.append(type_coerce(_T.c[c], DateTime(timezone=True)).label(c))
        else:
            out.append(_T.c[c])
    return out


def active_instances(
    session: Session, rule_ids: list[int], *, hostnames: list[str] | None = None
) -> Active:
    """The pending and firing instances of ``rule_ids`` in one statement (a wake-up over 135
    rules was 135 reads); with ``hostnames``, only those whose label ``hostname`` is one of
    them (a node-scoped evaluation)."""
    out: Active = {rule_id: {} for rule_id in rule_ids}
    if not rule_ids or hostnames == []:
        return out
    query = select(*read_columns(session)).where(_T.c.rule_id.in_(rule_ids), _T.c.state.in_(ACTIVE))
    if hostnames is not None:
        query = query.where(_T.c.labels["hostname"].as_string().in_(hostnames))
    for row in session.execute(query).all():  # fetchall: row by row was ~0.13 s more
        out[row.rule_id][row.fingerprint] = row
    return out


def any_of(column: Any, values: Sequence[Any], item_type: Any) -> Any:
    """``column = ANY(:values)`` (Postgres): one array parameter, where an expanded ``IN``
    list of ~20,000 literals was rendered, sent and parsed each time."""
    return column == any_(bindparam(f"{column.key}_any", list(values), type_=ARRAY(item_type)))


def _as_bigint(xid: Any) -> Any:
    """A transaction id (``xid8``, or ``xid`` as text) as a ``bigint``."""
    return sql_cast(sql_cast(xid, Text), BigInteger)


class ActiveInstanceCache:
    """The active instances of the rules one evaluator lane asks for, kept between its ticks
    on Postgres; see the module docstring. Only reads fill it, never the evaluator's writes, so a
    tick that rolls back leaves nothing wrong in it: its writes were never taken in, and the
    next read sees what was committed."""

    #: Loaded whole again after this long, whatever the reads said.
    RELOAD_EVERY_S = 600.0

    def __init__(self) -> None:
        self.loads = 0  # whole loads, for tests and the benchmark
        self.reset()

    def reset(self) -> None:
        """Forget everything: the next read loads whole (on regaining leadership)."""
        self._rows: Active = {}
        self._rule_ids: frozenset[int] = frozenset()
        self._snapshot_xmin: int | None = None
        self._loaded_at = 0.0

    def get(self, session: Session, rule_ids: list[int]) -> Active:
        """The pending and firing instances of ``rule_ids``, as :func:`active_instances`
        returns them, as of one statement's snapshot now. Only those rules' instances are
        kept (a lane's); other rules asked for than last time load whole. The inner dicts are
        the cache's: read, never changed. Not on SQLite (no ``xmin``): there it reads
        whole."""
        if session.get_bind().dialect.name != "postgresql":
            return active_instances(session, rule_ids)
        fresh = time.monotonic() - self._loaded_at < self.RELOAD_EVERY_S
        same_rules = frozenset(rule_ids) == self._rule_ids
        if (
            self._snapshot_xmin is None
            or not fresh
            or not same_rules
            or not self._changed_since(session)
        ):
            self._rule_ids = frozenset(rule_ids)
            self._load(session)
        return {rule_id: self._rows.get(rule_id) or {} for rule_id in rule_ids}

    def _statement(self, session: Session, where: Any) -> Any:
        """The rows of ``alert_instance`` of the kept rules matching ``where``, each with this
        statement's snapshot ``xmin`` and its count of the kept rules' active instances; one
        row of NULLs and those two when none matches."""
        of_rules = any_of(_T.c.rule_id, sorted(self._rule_ids), Integer)
        snapshot_xmin = _as_bigint(func.pg_snapshot_xmin(func.pg_current_snapshot()))
        own = _as_bigint(func.pg_current_xact_id_if_assigned())
        snap = select(
            # This transaction's own id too, should it be older: its writes after this read
            # must be read again next time.
            func.least(snapshot_xmin, func.coalesce(own, snapshot_xmin)).label("xmin8"),
            select(func.count())
            .select_from(_T)
            .where(of_rules, _T.c.state.in_(ACTIVE))
            .scalar_subquery()
            .label("active"),
        ).subquery("snap")
        rows = select(*read_columns(session)).where(of_rules, where).lateral("rows")
        return select(*rows.c, snap.c.xmin8, snap.c.active).select_from(
            snap.outerjoin(rows, true())
        )

    def _load(self, session: Session) -> None:
        result = session.execute(self._statement(session, _T.c.state.in_(ACTIVE))).all()
        self._rows = {}
        self._take(result)
        self._loaded_at = time.monotonic()
        self.loads += 1

    def _changed_since(self, session: Session) -> bool:
        """Take in the rows written since the last read; False when the cache cannot be
        brought up to date that way (a delete, or transaction ids that went back: a restored
        or another database)."""
        assert self._snapshot_xmin is not None
        # Row xmin is a 32-bit id: "at or after since" in modulo-2³² order (ids 0–2 are
        # special: frozen or bootstrap rows, old). Not age(): it counts from this
        # transaction's own id once it has one, which left out rows of transactions that
        # started after it and committed before this read.
        xmin = _as_bigint(sql_cast(literal_column("alert_instance.xmin"), Text))
        since = self._snapshot_xmin % 2**32
        written = and_(xmin >= 3, func.mod(xmin - since + 2**32, 2**32) < 2**31)
        before = self._snapshot_xmin
        result = session.execute(self._statement(session, written)).all()
        active = self._take(result)
        assert self._snapshot_xmin is not None
        return self._snapshot_xmin >= before and active == sum(map(len, self._rows.values()))

    def _take(self, result: Sequence[Any]) -> int:
        """Merge ``result`` (rows of :meth:`_statement`) in; returns the active count it
        read."""
        active = 0
        for row in result:
            self._snapshot_xmin, active = row.xmin8, row.active
            if row.rule_id is None:
                continue
            of_rule = self._rows.setdefault(row.rule_id, {})
            if row.state in ACTIVE:
                of_rule[row.fingerprint] = row
            else:
                of_rule.pop(row.fingerprint, None)
        return active
