"""Tables of alerting: ``alert_rule``, ``alert_instance``, ``alert_event``, ``alert_silence``,
``alert_ack`` and ``runbook``.

An instance is one (rule × entity) with a stable ``fingerprint``; its state and timers are the
persisted state machine (so a restart neither re-notifies nor loses a pending ``for``). Every
state change writes one ``alert_event`` row in the same transaction; ``silenced`` and ``acked``
are recorded on both so the notifier can decide from the event row alone.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, UTCDateTime


class AlertRule(Base):
    """A rule as validated by :class:`app.alerts.spec.RuleSpec`; ``spec`` is its JSON document
    (the single source of its settings), the other columns are copies for filtering.
    ``source`` is ``api`` or ``file:<path>``."""

    __tablename__ = "alert_rule"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    kind: Mapped[str] = mapped_column(String(16))
    severity: Mapped[str] = mapped_column(String(16))
    owner_team: Mapped[str | None] = mapped_column(String(128))
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    source: Mapped[str] = mapped_column(String(512), default="api")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())


class AlertInhibitRule(Base):
    """An inhibition rule as validated by :class:`app.alerts.inhibit_spec.InhibitRuleSpec`;
    ``spec`` is its JSON document, ``source`` ``api``, ``defaults:<file>`` or ``file:<file>``."""

    __tablename__ = "alert_inhibit_rule"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    source: Mapped[str] = mapped_column(String(512), default="api")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())


class AlertInstance(Base):
    """One rule × entity (node, GPU, disk, mount, NIC port …).

    ``state``: ``inactive`` (never fired or pending dropped), ``pending``, ``firing`` or
    ``resolved``. ``active_since`` starts the ``for`` timer, ``last_active_at`` is the last
    evaluation at which the condition held (``keep_firing_for`` counts from it; kept up to date
    only for rules with a ``keep_firing_for``). ``last_evaluated_at`` is the evaluation of the
    last transition (steady alerts are not rewritten every tick); ``value`` and the texts follow
    the latest observation, refreshed at most once per
    :data:`app.alerts.evaluator.VALUE_REFRESH_S` while the state holds (``value_at``: when they
    were last written).
    """

    __tablename__ = "alert_instance"
    __table_args__ = (
        UniqueConstraint("rule_id", "fingerprint", name="uq_alert_instance_rule_id_fingerprint"),
        Index("ix_alert_instance_state", "state"),
        Index("ix_alert_instance_rule_id_state", "rule_id", "state"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    rule_id: Mapped[int] = mapped_column(ForeignKey("alert_rule.id", ondelete="CASCADE"))
    fingerprint: Mapped[str] = mapped_column(String(32))
    labels: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16))
    value: Mapped[float | None] = mapped_column(Float)
    summary: Mapped[str] = mapped_column(Text, default="")
    description: Mapped[str] = mapped_column(Text, default="")
    active_since: Mapped[datetime | None] = mapped_column(UTCDateTime())
    last_active_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    fired_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    resolved_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    last_evaluated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    value_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    silenced: Mapped[bool] = mapped_column(Boolean, default=False)
    acked: Mapped[bool] = mapped_column(Boolean, default=False)


class AlertEvent(Base):
    """One state transition of an instance (``from_state`` → ``to_state``) at ``at``.

    ``notified_at`` is for the notifier (claimed with a conditional UPDATE); ``silenced`` and
    ``acked`` are as of the transition.
    """

    __tablename__ = "alert_event"
    __table_args__ = (
        Index("ix_alert_event_instance_id_at", "instance_id", "at"),
        Index("ix_alert_event_at", "at"),
        # The outbox's lookup of a rule's events not yet seen (see migration 0011).
        Index(
            "ix_alert_event_unnotified",
            "rule_id",
            "at",
            postgresql_where=text("notified_at IS NULL"),
            sqlite_where=text("notified_at IS NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    instance_id: Mapped[int] = mapped_column(ForeignKey("alert_instance.id", ondelete="CASCADE"))
    rule_id: Mapped[int] = mapped_column(ForeignKey("alert_rule.id", ondelete="CASCADE"))
    at: Mapped[datetime] = mapped_column(UTCDateTime())
    from_state: Mapped[str] = mapped_column(String(16))
    to_state: Mapped[str] = mapped_column(String(16))
    value: Mapped[float | None] = mapped_column(Float)
    severity: Mapped[str] = mapped_column(String(16))
    labels: Mapped[dict[str, Any]] = mapped_column(JSON)
    summary: Mapped[str] = mapped_column(Text, default="")
    silenced: Mapped[bool] = mapped_column(Boolean, default=False)
    acked: Mapped[bool] = mapped_column(Boolean, default=False)
    notified_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class AlertSilence(Base):
    """Mutes matching instances from ``starts_at`` to ``ends_at``; ``matchers`` is a list of
    ``{"name", "op", "value"}`` with Alertmanager's ops ``=``, ``!=``, ``=~``, ``!~``."""

    __tablename__ = "alert_silence"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    matchers: Mapped[list[dict[str, str]]] = mapped_column(JSON)
    starts_at: Mapped[datetime] = mapped_column(UTCDateTime())
    ends_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
    created_by: Mapped[str] = mapped_column(String(128))
    comment: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    #: The owning team (``None``: shared): who may expire it (responders of this team).
    team: Mapped[str | None] = mapped_column(String(128), nullable=True)


class AlertAck(Base):
    """An acknowledgement of an instance by ``owner`` with a note; it holds until the instance
    resolves (the evaluator clears ``alert_instance.acked`` then)."""

    __tablename__ = "alert_ack"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    instance_id: Mapped[int] = mapped_column(
        ForeignKey("alert_instance.id", ondelete="CASCADE"), index=True
    )
    owner: Mapped[str] = mapped_column(String(128))
    note: Mapped[str] = mapped_column(Text, default="")
    at: Mapped[datetime] = mapped_column(UTCDateTime())


class Runbook(Base):
    """An in-app runbook (Markdown), named by rules' ``runbook:`` field."""

    __tablename__ = "runbook"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    markdown: Mapped[str] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    #: The owning team of this edit (``None``: shared): who may change or revert it.
    team: Mapped[str | None] = mapped_column(String(128), nullable=True)
