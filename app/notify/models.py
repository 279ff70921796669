"""Tables of notifications: ``notify_channel``, ``notify_route`` and ``notify_delivery`` (the
transactional outbox).

A delivery row is written in the same transaction as the ``alert_event`` it comes from
(:func:`app.notify.outbox.enqueue_events`), so an event is never lost and never notified twice;
workers claim due rows with ``FOR UPDATE SKIP LOCKED`` and record the outcome on the row, which
is also the channel's delivery log. Per alert and channel, rows are sent in ``id`` order.
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
)
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, UTCDateTime

#: Delivery kinds and statuses (``suppressed``: silenced or acknowledged before it was sent).
#: ``incident``: no alert, a change of the incident itself (it closed) told to its message.
DELIVERY_KINDS = ("firing", "resolved", "repeat", "test", "incident")
DELIVERY_STATUSES = ("queued", "delivered", "failed", "suppressed")


class NotifyChannel(Base):
    """Where a team's notices go. ``url_encrypted`` / ``secret_encrypted`` are Fernet tokens
    (:mod:`app.notify.secrets`); ``options`` are the kind's string settings. ``broken`` is set
    when the service answered 404/410 (or the URL cannot be decrypted), with ``last_error``
    saying why (never containing the URL)."""

    __tablename__ = "notify_channel"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    team: Mapped[str | None] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(128), unique=True)
    kind: Mapped[str] = mapped_column(String(32))
    url_encrypted: Mapped[str] = mapped_column(Text)
    secret_encrypted: Mapped[str | None] = mapped_column(Text)
    options: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    broken: Mapped[bool] = mapped_column(Boolean, default=False)
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())


class NotifyRoute(Base):
    """Which alerts go to a channel: ``team`` (``None``: every team) matched against the alert's
    ``owner_team`` label (else its ``team`` label), ``severities`` (empty: all). Notices with
    equal ``group_by`` label values are sent together after ``group_wait_s``; a firing alert
    that is neither silenced nor acknowledged is re-sent every ``repeat_interval_s``."""

    __tablename__ = "notify_route"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    team: Mapped[str | None] = mapped_column(String(128))
    severities: Mapped[list[str]] = mapped_column(JSON, default=list)
    channel_id: Mapped[int] = mapped_column(
        ForeignKey("notify_channel.id", ondelete="CASCADE"), index=True
    )
    group_by: Mapped[list[str]] = mapped_column(JSON)
    group_wait_s: Mapped[float] = mapped_column(Float)
    repeat_interval_s: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class NotifyDelivery(Base):
    """One notice to one channel: the outbox row and its delivery log entry.

    ``payload`` is the notice as of the event (labels, summary, value, times), so what is sent
    does not change if the instance changes later. ``not_before`` is when it may be sent (group
    wait, backoff, ``Retry-After``); ``leased_until`` is set while a worker sends it (a crashed
    worker's lease runs out and the row is retried). ``deadline_at``: retries stop then and the
    row is ``failed``. ``last_error`` never contains the URL or secret.

    ``message_id`` (the id of the message's first row) is set when a row is first sent: the
    rows sent together stay one message on every retry, never regrouped. ``part``/``parts``
    say which request of that message carries the row (Slack's 16 alerts, Discord's 10
    embeds, a Teams card, one PagerDuty event): a part's rows are its delivery record, so a
    retry resends only the parts not yet accepted. ``truncated`` says what was cut to fit.
    """

    __tablename__ = "notify_delivery"
    __table_args__ = (
        Index("ix_notify_delivery_status_not_before", "status", "not_before"),
        Index("ix_notify_delivery_instance_id_channel_id", "instance_id", "channel_id"),
        Index("ix_notify_delivery_channel_id_created_at", "channel_id", "created_at"),
        Index("ix_notify_delivery_message_id", "message_id"),
        Index("ix_notify_delivery_incident_id_channel_id", "incident_id", "channel_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    channel_id: Mapped[int] = mapped_column(ForeignKey("notify_channel.id", ondelete="CASCADE"))
    route_id: Mapped[int | None] = mapped_column(ForeignKey("notify_route.id", ondelete="SET NULL"))
    group_key: Mapped[str] = mapped_column(String(512))
    instance_id: Mapped[int | None] = mapped_column(
        ForeignKey("alert_instance.id", ondelete="CASCADE")
    )
    event_id: Mapped[int | None] = mapped_column(ForeignKey("alert_event.id", ondelete="SET NULL"))
    kind: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    not_before: Mapped[datetime] = mapped_column(UTCDateTime())
    leased_until: Mapped[datetime | None] = mapped_column(UTCDateTime())
    deadline_at: Mapped[datetime] = mapped_column(UTCDateTime())
    last_status_code: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(Text)
    latency_ms: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    message_id: Mapped[int | None] = mapped_column(Integer)
    part: Mapped[int | None] = mapped_column(Integer)
    parts: Mapped[int | None] = mapped_column(Integer)
    truncated: Mapped[str | None] = mapped_column(Text)
    #: The incident (:mod:`app.incidents`) the alert belongs to, None when none: every notice
    #: of one incident goes to one message where the channel can edit it.
    incident_id: Mapped[int | None] = mapped_column(Integer)


class NotifyIncidentMessage(Base):
    """The message posted for one incident on one channel that can edit it: ``ref`` is what
    the service answered the post with (Slack ``{"channel", "ts"}``, Discord ``{"id"}``), so
    later changes of the incident update that message. ``updates`` counts the edits;
    ``closed_told_at`` is when the incident's close was queued for it (None: not yet)."""

    __tablename__ = "notify_incident_message"
    __table_args__ = (UniqueConstraint("channel_id", "incident_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    channel_id: Mapped[int] = mapped_column(ForeignKey("notify_channel.id", ondelete="CASCADE"))
    incident_id: Mapped[int] = mapped_column(ForeignKey("incident.id", ondelete="CASCADE"))
    ref: Mapped[dict[str, Any]] = mapped_column(JSON)
    posted_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updates: Mapped[int] = mapped_column(Integer, default=0)
    #: What of the incident the message last told (:func:`app.notify.incident_messages.digest`):
    #: a change of it (a new GPU or Xid, a worse state) is told even without a new alert.
    seen: Mapped[str] = mapped_column(String(512))
    closed_told_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class NotifyDestination(Base):
    """The pace of one destination (a webhook URL, a PagerDuty routing key), shared by every
    worker thread and process: ``key`` is a SHA-256 of it (never the URL, a secret).
    ``next_allowed_at`` is the earliest time of the next request (each request reserves a
    slot); ``held_until`` is when a 429 or ``Retry-After`` stops holding every message to it.
    """

    __tablename__ = "notify_destination"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    next_allowed_at: Mapped[datetime] = mapped_column(UTCDateTime())
    held_until: Mapped[datetime | None] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
