"""Record and read the audit trail (the ``audit_event`` table)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.db import utcnow

#: Path parameters never written to the trail (signed acknowledgement links carry a secret).
SECRET_PARAMS = frozenset({"token"})
MAX_LIMIT = 1000


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
