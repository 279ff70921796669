"""The ``node_action`` table (the action log), owned by :mod:`app.remediation`.

One row per action on an outside system for a node: what it was asked to do (``system`` /
``verb`` / ``target``, the exact ``command``), by which lifecycle transition, and what came of
it (``status``, ``attempts``, ``output``). A row is written ``pending`` in the transaction of the
transition that asks for it, so a server that stops before running it runs it on start; the
worker retries a failed run (``next_attempt_at``) until ``MAX_ATTEMPTS``, then marks it
``failed`` for a person to see on the node page.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, UTCDateTime


class NodeAction(Base):
    """One action of the log.

    ``status``: ``pending`` (to run, at ``next_attempt_at``), ``succeeded``, ``failed`` (gave
    up; ``output`` says why) or ``dry_run`` (recorded, never run). ``command``: the ``argv``
    run (or that would have run).
    """

    __tablename__ = "node_action"
    __table_args__ = (
        Index("ix_node_action_node_id_requested_at", "node_id", "requested_at"),
        Index("ix_node_action_status_next_attempt_at", "status", "next_attempt_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("node.id", ondelete="CASCADE"))
    transition_id: Mapped[int | None] = mapped_column(
        ForeignKey("lifecycle_transition.id", ondelete="SET NULL"), nullable=True
    )
    system: Mapped[str] = mapped_column(String(16))
    verb: Mapped[str] = mapped_column(String(16))
    target: Mapped[str] = mapped_column(String(255))
    command: Mapped[list[Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    requested_at: Mapped[datetime] = mapped_column(UTCDateTime())
    next_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    returncode: Mapped[int | None] = mapped_column(Integer, nullable=True)
    output: Mapped[str] = mapped_column(Text, default="")
    actor: Mapped[str] = mapped_column(String(128))


class AutomationDecision(Base):
    """What automation decided for one firing alert of a rule with an ``action``
    (:mod:`app.remediation.automation`): ``outcome`` ``quarantined``, ``recommended``,
    ``dry_run``, ``blocked`` (the circuit breaker), ``skipped`` (the node is not in service, in
    maintenance, retired, or the alert names no node); ``detail`` says why or what would have
    run."""

    __tablename__ = "automation_decision"
    __table_args__ = (Index("ix_automation_decision_at", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    alert_event_id: Mapped[int] = mapped_column(
        ForeignKey("alert_event.id", ondelete="CASCADE"), unique=True
    )
    at: Mapped[datetime] = mapped_column(UTCDateTime())
    rule: Mapped[str] = mapped_column(String(128))
    mode: Mapped[str] = mapped_column(String(16))
    node_id: Mapped[int | None] = mapped_column(
        ForeignKey("node.id", ondelete="CASCADE"), nullable=True
    )
    hostname: Mapped[str | None] = mapped_column(String(255), nullable=True)
    outcome: Mapped[str] = mapped_column(String(16))
    detail: Mapped[str] = mapped_column(Text, default="")
    transition_id: Mapped[int | None] = mapped_column(
        ForeignKey("lifecycle_transition.id", ondelete="SET NULL"), nullable=True
    )


class CircuitBreaker(Base):
    """The automatic-quarantine circuit breaker (one row, ``name`` ``quarantine``): ``open``
    stops every automatic quarantine until a person resets it."""

    __tablename__ = "circuit_breaker"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    open: Mapped[bool] = mapped_column(Boolean, default=False)
    opened_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    reset_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    reset_by: Mapped[str | None] = mapped_column(String(128), nullable=True)
