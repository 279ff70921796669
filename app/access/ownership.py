"""Which team owns the object a route acts on, asked of each owner's service.

Each function takes the request's path parameters (strings) and answers the owning team's
name, or ``None`` when the object has no owner or does not exist (the endpoint then answers
404 or 422 itself).
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy.orm import Session

from app.alerts import service as alerts_service
from app.alerts import store as alerts_store
from app.api_params import MAX_ID
from app.errors import FleetwatchError
from app.notify import service as notify_service
from app.runbooks import service as runbook_service


def _int(params: Mapping[str, str], key: str) -> int | None:
    """The id ``params[key]`` when it can name a row (1 .. 2^31-1), else ``None``: Postgres
    would raise "integer out of range", and the endpoint answers 422 for it anyway."""
    try:
        value = int(params[key])
    except (KeyError, ValueError):
        return None
    return value if 1 <= value <= MAX_ID else None


def rule_team(session: Session, params: Mapping[str, str]) -> str | None:
    """``owner_team`` of the alert rule ``{name}``."""
    try:
        return alerts_store.get_rule(session, name=params["name"]).owner_team
    except (KeyError, FleetwatchError):
        return None


def alert_team(session: Session, params: Mapping[str, str]) -> str | None:
    """``owner_team`` of the rule of alert ``{alert_id}``."""
    alert_id = _int(params, "alert_id")
    if alert_id is None:
        return None
    try:
        return alerts_service.get_alert(session, alert_id=alert_id)[1].owner_team
    except FleetwatchError:
        return None


def silence_team(session: Session, params: Mapping[str, str]) -> str | None:
    """``team`` of silence ``{silence_id}``."""
    silence_id = _int(params, "silence_id")
    if silence_id is None:
        return None
    try:
        return alerts_service.get_silence(session, silence_id=silence_id).team
    except FleetwatchError:
        return None


def runbook_team(session: Session, params: Mapping[str, str]) -> str | None:
    """``team`` of the stored edit of runbook ``{name}`` (a runbook file alone is shared)."""
    try:
        return runbook_service.edit_team(session, name=params["name"])
    except KeyError:
        return None


def channel_team(session: Session, params: Mapping[str, str]) -> str | None:
    """``team`` of notification channel ``{channel_id}``."""
    channel_id = _int(params, "channel_id")
    if channel_id is None:
        return None
    try:
        return notify_service.get_channel(session, channel_id=channel_id).team
    except FleetwatchError:
        return None


def route_team(session: Session, params: Mapping[str, str]) -> str | None:
    """``team`` of notification route ``{route_id}``."""
    route_id = _int(params, "route_id")
    if route_id is None:
        return None
    try:
        return notify_service.get_route(session, route_id=route_id).team
    except FleetwatchError:
        return None
