"""Record and read the audit trail (the ``audit_event`` table), and collect the before/after
states the owning services report of the objects a request changes (:func:`note_change`)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, cast

from sqlalchemy import CursorResult, delete, select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.db import utcnow

#: Path parameters never written to the trail (signed acknowledgement links carry a secret).
SECRET_PARAMS = frozenset({"token"})
MAX_LIMIT = 1000
#: The before/after states one event keeps at most (bytes of JSON); see :func:`change_detail`.
MAX_STATES_BYTES = 64 * 1024


#: The changes noted while serving the current request (``None`` outside one: CLI, scheduler).
#: A list set by the middleware, shared by the threads the request's code runs in (each copies
#: the context, so they append to the same list).
_changes: ContextVar[list[dict[str, Any]] | None] = ContextVar("audit_changes", default=None)


def _plain(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    raise TypeError(f"not JSON: {type(value).__name__}")


def snapshot(state: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A deep, JSON-ready copy of ``state`` (datetimes as ISO 8601), unaffected by later
    changes to the object it was read from."""
    if state is None:
        return None
    copied: dict[str, Any] = json.loads(json.dumps(dict(state), default=_plain))
    return copied


def note_change(
    kind: str,
    key: str | int,
    *,
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
    redacted_changed: list[str] | None = None,
) -> None:
    """Report, from the service that made it, that object ``kind`` ``key`` (a rule's name, a
    silence's id …) went from ``before`` to ``after`` (``None``: did not exist / no longer
    exists). The states must hold no secret: the owner replaces them (``"…"``) and names the
    secret fields that changed in ``redacted_changed``. The change lands in ``detail`` of the
    current request's audit event, and only when the request succeeds (status < 400); outside
    a request it is dropped (the CLI records its own events)."""
    bucket = _changes.get()
    if bucket is None:
        return
    change: dict[str, Any] = {
        "object": kind,
        "key": key,
        "before": snapshot(before),
        "after": snapshot(after),
    }
    if redacted_changed:
        change["redacted_changed"] = sorted(redacted_changed)
    bucket.append(change)


@contextmanager
def collecting_changes() -> Iterator[list[dict[str, Any]]]:
    """Collect :func:`note_change` reports made inside the block (the request being served)."""
    bucket: list[dict[str, Any]] = []
    token = _changes.set(bucket)
    try:
        yield bucket
    finally:
        _changes.reset(token)


def change_detail(
    changes: list[dict[str, Any]], *, max_states_bytes: int = MAX_STATES_BYTES
) -> dict[str, Any] | None:
    """``detail`` for a request's noted changes: one change as ``{object, key, before, after}``,
    several as ``{"changes": [...]}``, none as ``None``.

    The states are kept up to ``max_states_bytes`` of JSON (the first change always): past
    that a change keeps its object and key with ``"states_omitted": true``, and the detail
    says how many (``"states_omitted": n``) — an apply of 600 rules would otherwise write
    0.9 MB into one row, and into every page of the trail showing it."""
    if not changes:
        return None
    kept: list[dict[str, Any]] = []
    used = omitted = 0
    for change in changes:
        size = len(json.dumps(change))
        if not kept or used + size <= max_states_bytes:
            kept.append(dict(change))
            used += size
            continue
        short = {"object": change["object"], "key": change["key"], "states_omitted": True}
        if "redacted_changed" in change:
            short["redacted_changed"] = change["redacted_changed"]
        kept.append(short)
        omitted += 1
    if len(kept) == 1:
        return kept[0]
    detail: dict[str, Any] = {"changes": kept}
    if omitted:
        detail["states_omitted"] = omitted
    return detail


def record(
    session: Session,
    *,
    actor: str,
    action: str,
    address: str | None = None,
    target: Mapping[str, Any] | None = None,
    status: int | None = None,
    detail: Mapping[str, Any] | None = None,
) -> AuditEvent:
    """Append one event (``at`` = now); secret path parameters are written as ``"…"``."""
    clean = None
    if target is not None:
        clean = {k: ("…" if k in SECRET_PARAMS else v) for k, v in target.items()}
    row = AuditEvent(
        at=utcnow(),
        actor=actor[:160],
        address=(address or None) and address[:64],
        action=action[:255],
        target=clean,
        status=status,
        detail=dict(detail) if detail is not None else None,
    )
    session.add(row)
    session.flush()
    return row


@dataclass(frozen=True)
class AuditFilter:
    """Which events to read: ``actor`` exact (``user:alice``), ``action`` substring
    (``/rules``), ``since``/``until`` (inclusive/exclusive), ``before_id`` for the next page,
    ``limit`` 1–1000."""

    actor: str | None = None
    action: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    before_id: int | None = None
    limit: int = 200


def list_events(session: Session, flt: AuditFilter) -> list[AuditEvent]:
    """Events matching ``flt``, newest first."""
    query = select(AuditEvent)
    if flt.actor:
        query = query.where(AuditEvent.actor == flt.actor)
    if flt.action:
        query = query.where(AuditEvent.action.contains(flt.action, autoescape=True))
    if flt.since is not None:
        query = query.where(AuditEvent.at >= flt.since)
    if flt.until is not None:
        query = query.where(AuditEvent.at < flt.until)
    if flt.before_id is not None:
        query = query.where(AuditEvent.id < flt.before_id)
    limit = max(1, min(flt.limit, MAX_LIMIT))
    return list(session.scalars(query.order_by(AuditEvent.id.desc()).limit(limit)))


def event_out(row: AuditEvent) -> dict[str, Any]:
    """One event as the API shows it."""
    return {
        "id": row.id,
        "at": row.at.isoformat(),
        "actor": row.actor,
        "address": row.address,
        "action": row.action,
        "target": row.target,
        "status": row.status,
        "detail": row.detail,
    }


def prune(session: Session, *, cutoff: datetime) -> int:
    """Delete audit events recorded before ``cutoff`` (``FLEETWATCH_AUDIT_RETENTION_DAYS``);
    how many."""
    result = cast(
        CursorResult[Any], session.execute(delete(AuditEvent).where(AuditEvent.at < cutoff))
    )
    return int(result.rowcount or 0)
