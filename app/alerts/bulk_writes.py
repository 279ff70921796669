"""New alert instances and transition events written as one statement per table on Postgres:
``INSERT … SELECT FROM unnest(one array per column) RETURNING``.

When thousands of instances change at once (the first evaluation, a fleet-wide outage, ``for``
timers elapsing together) the writes were most of an evaluation: an executemany through the
ORM's bulk insert spends ~50 µs of Python per row on parameter processing, and the new
instances' ids were read back by a second statement. Here each column goes over as one array
(psycopg adapts a list in C), labels as JSON text by orjson, and ``RETURNING`` gives the ids.
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


def _unnest_insert(table: str, columns: dict[str, str], returning: str) -> Any:
    names = ", ".join(columns)
    arrays = ", ".join(f"CAST(:{c} AS {t}[])" for c, t in columns.items())
    return text(f"INSERT INTO {table} ({names}) SELECT * FROM unnest({arrays}){returning}")


_INSERT_INSTANCES = _unnest_insert("alert_instance", INSTANCE_COLUMNS, " RETURNING fingerprint, id")
_INSERT_EVENTS = _unnest_insert("alert_event", EVENT_COLUMNS, "")


def update_instances(session: Session, keys: Sequence[str], rows: Sequence[dict[str, Any]]) -> None:
    """Set columns ``keys`` (of :data:`INSTANCE_COLUMNS`) of the instances ``rows`` (dicts
    with ``k_id`` and ``v_<column>``, as :func:`app.alerts.evaluator.apply_rule` collects them)
    in one statement joining one array per column. Postgres only."""
    if not rows:
        return
    types = {"k_id": "integer", **{f"v_{k}": INSTANCE_COLUMNS[k] for k in keys}}
    arrays = ", ".join(f"CAST(:{c} AS {t}[])" for c, t in types.items())
    sets = ", ".join(f"{k} = u.v_{k}" for k in keys)
    statement = text(
        f"UPDATE alert_instance SET {sets} FROM unnest({arrays}) AS u({', '.join(types)})"
        " WHERE alert_instance.id = u.k_id"
    )
    session.execute(statement, _arrays(rows, types))


def _arrays(rows: Sequence[dict[str, Any]], columns: dict[str, str]) -> dict[str, list[Any]]:
    """One list per column; JSON columns as text (orjson, keys as given)."""
    out: dict[str, list[Any]] = {}
    for column, kind in columns.items():
        values = [row.get(column) for row in rows]
        if kind == "json":
            values = [None if v is None else orjson.dumps(v).decode() for v in values]
        out[column] = values
    return out


def insert_instances(session: Session, rows: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Create the instances ``rows`` (dicts with :data:`INSTANCE_COLUMNS`, one rule's: their
    fingerprints distinct) in one statement; returns fingerprint → new id. Postgres only."""
    if not rows:
        return {}
    result = session.execute(_INSERT_INSTANCES, _arrays(rows, INSTANCE_COLUMNS))
    return {fingerprint: instance_id for fingerprint, instance_id in result}


def insert_events(session: Session, rows: Sequence[dict[str, Any]]) -> None:
    """Write the events ``rows`` (dicts with :data:`EVENT_COLUMNS`; ``notified_at`` may be
    left out: not yet seen by the notifier) in one statement. Postgres only."""
    if rows:
        session.execute(_INSERT_EVENTS, _arrays(rows, EVENT_COLUMNS))
