"""New alert instances, their changes and transition events written as one statement per table
on Postgres: the rows go over as one JSON document (orjson, in C) that Postgres turns back
into rows (``json_to_recordset``), and ``RETURNING`` gives the new instances' ids.

When thousands of instances change at once (the first evaluation, a fleet-wide outage, ``for``
timers elapsing together) the writes were most of an evaluation: an executemany through the
ORM's bulk insert spends ~50 µs of Python per row on parameter processing, the new instances'
ids were read back by a second statement, and arrays of text parameters are escaped by a
regular expression per element (slower still).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
from sqlalchemy import text
from sqlalchemy.orm import Session

#: Columns of ``alert_instance`` written when it is created, with their Postgres types.
INSTANCE_COLUMNS: dict[str, str] = {
    "rule_id": "integer",
    "fingerprint": "text",
    "labels": "json",
    "state": "text",
    "value": "double precision",
    "summary": "text",
    "description": "text",
    "active_since": "timestamptz",
    "last_active_at": "timestamptz",
    "fired_at": "timestamptz",
    "resolved_at": "timestamptz",
    "last_evaluated_at": "timestamptz",
    "value_at": "timestamptz",
    "silenced": "boolean",
    "acked": "boolean",
}
#: Columns of ``alert_event``, with their Postgres types.
EVENT_COLUMNS: dict[str, str] = {
    "instance_id": "integer",
    "rule_id": "integer",
    "at": "timestamptz",
    "from_state": "text",
    "to_state": "text",
    "value": "double precision",
    "severity": "text",
    "labels": "json",
    "summary": "text",
    "silenced": "boolean",
    "acked": "boolean",
    "notified_at": "timestamptz",
}


def _record_type(columns: dict[str, str]) -> str:
    return ", ".join(f"{c} {t}" for c, t in columns.items())


def _insert(table: str, columns: dict[str, str], returning: str) -> Any:
    names = ", ".join(columns)
    return text(
        f"INSERT INTO {table} ({names}) SELECT {names} FROM"
        f" json_to_recordset(CAST(:rows AS json)) AS r({_record_type(columns)}){returning}"
    )


_INSERT_INSTANCES = _insert("alert_instance", INSTANCE_COLUMNS, " RETURNING fingerprint, id")
_INSERT_EVENTS = _insert("alert_event", EVENT_COLUMNS, "")


def _document(rows: Sequence[dict[str, Any]]) -> str:
    """``rows`` as a JSON array (datetimes in RFC 3339 with their offset; NaN as null)."""
    return orjson.dumps(list(rows)).decode()


def insert_instances(session: Session, rows: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Create the instances ``rows`` (dicts with :data:`INSTANCE_COLUMNS`, one rule's: their
    fingerprints distinct) in one statement; returns fingerprint → new id. Postgres only."""
    if not rows:
        return {}
    result = session.execute(_INSERT_INSTANCES, {"rows": _document(rows)})
    return {fingerprint: instance_id for fingerprint, instance_id in result}


def update_instances(session: Session, keys: Sequence[str], rows: Sequence[dict[str, Any]]) -> None:
    """Set columns ``keys`` (of :data:`INSTANCE_COLUMNS`) of the instances ``rows`` (dicts
    with ``k_id`` and ``v_<column>``, as :func:`app.alerts.evaluator.apply_rule` collects them)
    in one statement. Postgres only."""
    if not rows:
        return
    types = {"k_id": "integer", **{f"v_{k}": INSTANCE_COLUMNS[k] for k in keys}}
    sets = ", ".join(f"{k} = r.v_{k}" for k in keys)
    statement = text(
        f"UPDATE alert_instance SET {sets} FROM json_to_recordset(CAST(:rows AS json))"
        f" AS r({_record_type(types)}) WHERE alert_instance.id = r.k_id"
    )
    session.execute(statement, {"rows": _document(rows)})


def insert_events(session: Session, rows: Sequence[dict[str, Any]]) -> None:
    """Write the events ``rows`` (dicts with :data:`EVENT_COLUMNS`; ``notified_at`` may be
    left out: not yet seen by the notifier) in one statement. Postgres only."""
    if rows:
        session.execute(_INSERT_EVENTS, {"rows": _document(rows)})
