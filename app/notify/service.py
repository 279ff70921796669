"""Channels, routes, the delivery log and the test message (flush, never commit).

These are the functions the API (and the channels page to come) call; secrets go in plain and
are stored encrypted, and nothing returned here holds a decrypted URL.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app import wakeups
from app.audit import service as audit
from app.db import utcnow
from app.errors import BadRequest, Conflict, NotFound
from app.notify.channels.base import ChannelConfig
from app.notify.channels.registry import get_kind
from app.notify.models import NotifyChannel, NotifyDelivery, NotifyRoute
from app.notify.notices import test_payload
from app.notify.outbox import DEADLINE_S
from app.notify.pacing import parse_pace
from app.notify.schemas import ChannelIn, ChannelOut, ChannelUpdate, DeliveryOut, RouteIn
from app.notify.secrets import MASK, SecretBox, SecretUnreadable, mask_url
from app.notify.ssrf import BadURL, BlockedDestination, check_url, parse_url


def channel_out(channel: NotifyChannel, box: SecretBox) -> ChannelOut:
    """The API view of a channel (URL masked; an undecryptable URL shows as unreadable)."""
    try:
        masked = mask_url(box.decrypt(channel.url_encrypted))
    except Exception:
        masked = "(unreadable: enter the URL again)"
    return ChannelOut(
        id=channel.id,
        name=channel.name,
        kind=channel.kind,
        team=channel.team,
        url_masked=masked,
        has_secret=channel.secret_encrypted is not None,
        options=dict(channel.options or {}),
        enabled=channel.enabled,
        broken=channel.broken,
        last_error=channel.last_error,
        created_at=channel.created_at,
        updated_at=channel.updated_at,
    )


def channel_audit_state(channel: NotifyChannel, box: SecretBox) -> dict[str, Any]:
    """What the audit trail keeps of a channel: its settings with the URL masked as the API
    shows it (scheme and host) and the signing secret only as present or not."""
    out = channel_out(channel, box)
    return {
        "name": out.name,
        "kind": out.kind,
        "team": out.team,
        "url": out.url_masked,
        "secret": MASK if out.has_secret else None,
        "options": out.options,
        "enabled": out.enabled,
    }


def _readable(box: SecretBox, token: str | None) -> str | None:
    """The plain value of a stored secret; ``None`` when absent or unreadable (a changed key:
    the user is entering it again)."""
    if token is None:
        return None
    try:
        return box.decrypt(token)
    except SecretUnreadable:
        return None


def route_audit_state(route: NotifyRoute) -> dict[str, Any]:
    """What the audit trail keeps of a route: every setting but its timestamps."""
    return {key: getattr(route, key) for key in RouteIn.model_fields if hasattr(route, key)}


def _validate(kind_name: str, config: ChannelConfig, allow_hosts: Sequence[str]) -> None:
    try:
        parse_url(config.url)  # before the kind's checks, which may split the URL themselves
    except BadURL as exc:
        raise BadRequest(f"url: {exc}") from None
    try:
        kind = get_kind(kind_name)
    except KeyError as exc:
        raise BadRequest(str(exc).strip("'\"")) from None
    try:
        kind.validate(config)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    if "rate_limit" in config.options:
        try:
            parse_pace(config.options["rate_limit"])
        except ValueError as exc:
            raise BadRequest(f"options.rate_limit: {exc}") from None
    try:
        check_url(config.url, allow=allow_hosts)
    except BlockedDestination as exc:
        raise BadRequest(f"url: {exc}") from None


def _name_free(session: Session, name: str, *, other_than: int | None = None) -> None:
    found = session.scalar(select(NotifyChannel.id).where(NotifyChannel.name == name))
    if found is not None and found != other_than:
        raise Conflict(f"name: a channel called {name!r} exists")


def create_channel(
    session: Session, *, data: ChannelIn, box: SecretBox, allow_hosts: Sequence[str]
) -> NotifyChannel:
    """Store a channel with its URL and secret encrypted.

    Raises:
        BadRequest: unknown kind, settings the kind refuses, or a URL the SSRF guard refuses
            (the message names the field). Conflict: the name is taken.
    """
    config = ChannelConfig(url=data.url, secret=data.secret or None, options=data.options)
    _validate(data.kind, config, allow_hosts)
    _name_free(session, data.name)
    now = utcnow()
    channel = NotifyChannel(
        team=data.team,
        name=data.name,
        kind=data.kind,
        url_encrypted=box.encrypt(data.url),
        secret_encrypted=box.encrypt(data.secret) if data.secret else None,
        options=dict(data.options),
        enabled=data.enabled,
        broken=False,
        last_error=None,
        created_at=now,
        updated_at=now,
    )
    session.add(channel)
    session.flush()
    audit.note_change("channel", channel.id, before=None, after=channel_audit_state(channel, box))
    return channel


def get_channel(session: Session, *, channel_id: int) -> NotifyChannel:
    """One channel. Raises NotFound."""
    channel = session.get(NotifyChannel, channel_id)
    if channel is None:
        raise NotFound(f"no channel with id {channel_id}")
    return channel


def list_channels(session: Session, *, team: str | None = None) -> list[NotifyChannel]:
    """Channels by name, optionally of one team (and the team-less ones)."""
    stmt = select(NotifyChannel).order_by(NotifyChannel.name)
    if team is not None:
        stmt = stmt.where((NotifyChannel.team == team) | NotifyChannel.team.is_(None))
    return list(session.scalars(stmt))


def update_channel(
    session: Session,
    *,
    channel_id: int,
    data: ChannelUpdate,
    box: SecretBox,
    allow_hosts: Sequence[str],
) -> NotifyChannel:
    """Change a channel; a new URL (or re-enabling) clears ``broken`` and ``last_error``.

    Raises:
        NotFound, BadRequest, Conflict: as :func:`create_channel`.
    """
    channel = get_channel(session, channel_id=channel_id)
    before = audit.snapshot(channel_audit_state(channel, box))
    redacted_changed = []
    fields = data.model_fields_set
    if "name" in fields and data.name is not None:
        _name_free(session, data.name, other_than=channel.id)
        channel.name = data.name
    if "url" in fields or "secret" in fields or "options" in fields:
        url = data.url if data.url is not None else box.decrypt(channel.url_encrypted)
        if "secret" in fields:
            secret = data.secret or None
        else:
            secret = box.decrypt(channel.secret_encrypted) if channel.secret_encrypted else None
        options = data.options if data.options is not None else dict(channel.options or {})
        _validate(channel.kind, ChannelConfig(url=url, secret=secret, options=options), allow_hosts)
        if url != _readable(box, channel.url_encrypted):
            redacted_changed.append("url")
        if secret != _readable(box, channel.secret_encrypted):
            redacted_changed.append("secret")
        channel.url_encrypted = box.encrypt(url)
        channel.secret_encrypted = box.encrypt(secret) if secret else None
        channel.options = options
        channel.broken, channel.last_error = False, None
    if "team" in fields:
        channel.team = data.team
    if "enabled" in fields and data.enabled is not None:
        channel.enabled = data.enabled
        if data.enabled:
            channel.broken, channel.last_error = False, None
    channel.updated_at = utcnow()
    session.flush()
    audit.note_change(
        "channel",
        channel.id,
        before=before,
        after=channel_audit_state(channel, box),
        redacted_changed=redacted_changed,
    )
    return channel


def delete_channel(session: Session, *, channel_id: int) -> None:
    """Delete a channel, its routes and its delivery log. Raises NotFound."""
    channel = get_channel(session, channel_id=channel_id)
    before = {"name": channel.name, "kind": channel.kind, "team": channel.team}
    session.delete(channel)
    session.flush()
    audit.note_change("channel", channel_id, before=before, after=None)


def send_test(session: Session, *, channel_id: int) -> NotifyDelivery:
    """Queue the "send test message" notice, due now (the worker, woken by the commit, sends it).

    Raises:
        NotFound: no such channel. BadRequest: the channel is disabled.
    """
    channel = get_channel(session, channel_id=channel_id)
    if not channel.enabled:
        raise BadRequest(f"channel {channel.name!r} is disabled; enable it first")
    if channel.broken:
        channel.broken = False  # a test is how a user checks a fixed endpoint
    now = utcnow()
    row = NotifyDelivery(
        channel_id=channel.id,
        group_key=f"test:{channel.id}",
        kind="test",
        status="queued",
        payload=test_payload(channel_name=channel.name, team=channel.team, now=now),
        attempts=0,
        not_before=now,
        deadline_at=now + timedelta(seconds=DEADLINE_S),
        created_at=now,
    )
    session.add(row)
    session.flush()
    wakeups.signal_on_commit(session, wakeups.OUTBOX_CHANNEL)
    return row


def delivery_out(row: NotifyDelivery) -> DeliveryOut:
    """A delivery log entry."""
    payload = row.payload or {}
    return DeliveryOut(
        id=row.id,
        created_at=row.created_at,
        delivered_at=row.delivered_at,
        kind=row.kind,
        status=row.status,
        alert_id=row.instance_id,
        rule=str(payload.get("rule_name", "")),
        summary=str(payload.get("summary", "")),
        group_key=row.group_key,
        attempts=row.attempts,
        not_before=row.not_before,
        last_status_code=row.last_status_code,
        last_error=row.last_error,
        latency_ms=row.latency_ms,
        part=row.part,
        parts=row.parts,
        truncated=row.truncated,
        incident_id=row.incident_id,
    )


def list_deliveries(
    session: Session,
    *,
    channel_id: int,
    status: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> list[NotifyDelivery]:
    """A channel's delivery log, newest first, ``offset`` rows skipped. Raises NotFound."""
    get_channel(session, channel_id=channel_id)
    stmt = select(NotifyDelivery).where(NotifyDelivery.channel_id == channel_id)
    if status is not None:
        stmt = stmt.where(NotifyDelivery.status == status)
    stmt = stmt.order_by(NotifyDelivery.created_at.desc(), NotifyDelivery.id.desc())
    stmt = stmt.limit(limit).offset(offset)
    return list(session.scalars(stmt))


def create_route(session: Session, *, data: RouteIn) -> NotifyRoute:
    """Store a route. Raises BadRequest when ``channel_id`` names no channel."""
    if session.get(NotifyChannel, data.channel_id) is None:
        raise BadRequest(f"channel_id: no channel with id {data.channel_id}")
    route = NotifyRoute(**data.model_dump(), created_at=utcnow())
    session.add(route)
    session.flush()
    audit.note_change("route", route.id, before=None, after=route_audit_state(route))
    return route


def list_routes(session: Session, *, channel_id: int | None = None) -> list[NotifyRoute]:
    """Routes, oldest first (optionally of one channel)."""
    stmt = select(NotifyRoute).order_by(NotifyRoute.id)
    if channel_id is not None:
        stmt = stmt.where(NotifyRoute.channel_id == channel_id)
    return list(session.scalars(stmt))


def get_route(session: Session, *, route_id: int) -> NotifyRoute:
    """One route. Raises NotFound."""
    route = session.get(NotifyRoute, route_id)
    if route is None:
        raise NotFound(f"no route with id {route_id}")
    return route


def replace_route(session: Session, *, route_id: int, data: RouteIn) -> NotifyRoute:
    """Replace a route's settings. Raises NotFound, BadRequest."""
    route = get_route(session, route_id=route_id)
    if session.get(NotifyChannel, data.channel_id) is None:
        raise BadRequest(f"channel_id: no channel with id {data.channel_id}")
    before = audit.snapshot(route_audit_state(route))
    for key, value in data.model_dump().items():
        setattr(route, key, value)
    session.flush()
    audit.note_change("route", route.id, before=before, after=route_audit_state(route))
    return route


def delete_route(session: Session, *, route_id: int) -> None:
    """Delete a route. Raises NotFound."""
    route = get_route(session, route_id=route_id)
    before = audit.snapshot(route_audit_state(route))
    session.delete(route)
    session.flush()
    audit.note_change("route", route_id, before=before, after=None)


DEMO_CHANNEL = "demo-webhook"


def ensure_webhook_channel(
    session: Session,
    *,
    url: str,
    secret: str | None,
    box: SecretBox,
    allow_hosts: Sequence[str],
    name: str = DEMO_CHANNEL,
) -> NotifyChannel:
    """A generic-webhook channel ``name`` for every team with a catch-all route (all teams,
    all severities, default grouping): created, or updated to ``url``/``secret`` and
    re-enabled when it exists (``fleetwatch demo --webhook``).

    Raises:
        BadRequest: the URL is refused (see :func:`create_channel`).
    """
    existing = session.scalar(select(NotifyChannel).where(NotifyChannel.name == name))
    if existing is None:
        channel = create_channel(
            session,
            data=ChannelIn(name=name, kind="webhook", url=url, secret=secret),
            box=box,
            allow_hosts=allow_hosts,
        )
    else:
        channel = update_channel(
            session,
            channel_id=existing.id,
            data=ChannelUpdate(url=url, secret=secret or "", team=None, enabled=True),
            box=box,
            allow_hosts=allow_hosts,
        )
    catch_all = [r for r in list_routes(session, channel_id=channel.id) if r.team is None]
    if not catch_all:
        create_route(session, data=RouteIn(channel_id=channel.id))
    return channel


def count_deliveries(session: Session, *, channel_id: int, status: str | None = None) -> int:
    """How many rows :func:`list_deliveries` would page through (for the log's pagination)."""
    stmt = select(func.count()).where(NotifyDelivery.channel_id == channel_id)
    if status is not None:
        stmt = stmt.where(NotifyDelivery.status == status)
    return int(session.scalar(stmt) or 0)


def latest_deliveries(session: Session) -> dict[int, NotifyDelivery]:
    """Each channel's newest delivery row (channel id → row), for the channels page: one
    statement over the ``(channel_id, created_at)`` index."""
    newest = (
        select(NotifyDelivery.channel_id, func.max(NotifyDelivery.id).label("id"))
        .group_by(NotifyDelivery.channel_id)
        .subquery()
    )
    rows = session.scalars(select(NotifyDelivery).join(newest, NotifyDelivery.id == newest.c.id))
    return {row.channel_id: row for row in rows}


def list_alert_deliveries(
    session: Session, *, alert_id: int, limit: int = 200
) -> list[tuple[NotifyDelivery, str]]:
    """An alert instance's deliveries with their channel's name, newest first (the alert
    page's "Notifications" section; uses the ``(instance_id, channel_id)`` index)."""
    stmt = (
        select(NotifyDelivery, NotifyChannel.name)
        .join(NotifyChannel, NotifyChannel.id == NotifyDelivery.channel_id)
        .where(NotifyDelivery.instance_id == alert_id)
        .order_by(NotifyDelivery.id.desc())
        .limit(limit)
    )
    return [(row, name) for row, name in session.execute(stmt).all()]
