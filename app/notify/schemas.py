"""Pydantic in/out models of ``/api/v1/channels`` and ``/api/v1/routes``. Out models never
carry a webhook URL or secret: ``url_masked`` is ``scheme://host/…`` and ``has_secret`` says
whether a secret is set."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from app.api_params import MAX_ID
from app.notify.outbox import (
    CRITICAL_GROUP_WAIT_S,
    DEFAULT_GROUP_BY,
    DEFAULT_GROUP_WAIT_S,
    DEFAULT_REPEAT_INTERVAL_S,
)
from app.notify.ssrf import BadURL, url_syntax

SEVERITIES = ("critical", "warning", "info")
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9 _.\-]{0,127}$"


def _no_control(value: str | None) -> str | None:
    """Refuse NUL and other control characters (Postgres text cannot hold NUL; SQLite and
    the pages would cut the value there)."""
    if value is not None and any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise ValueError("may not contain NUL or other control characters")
    return value


def _url_syntax(value: str | None) -> str | None:
    """:func:`app.notify.ssrf.url_syntax`'s checks (port, brackets, user:password@), as a
    422 naming ``url``; the scheme and address are judged by the service."""
    if value is not None:
        try:
            url_syntax(value)
        except BadURL as exc:
            raise ValueError(str(exc)) from None
    return value


def _options_clean(value: dict[str, str] | None) -> dict[str, str] | None:
    for key, item in (value or {}).items():
        _no_control(key)
        _no_control(item)
    return value


class ChannelIn(BaseModel):
    """A new channel: ``kind`` from the registry (``webhook``, ``slack`` …), ``url`` the
    endpoint (a secret), ``secret`` the HMAC key or integration key, ``team`` ``None`` for a
    channel any team's routes may use."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_PATTERN)
    kind: str = Field(min_length=1, max_length=32)
    url: str = Field(min_length=1, max_length=2048)
    secret: str | None = Field(default=None, max_length=1024)
    team: str | None = Field(default=None, min_length=1, max_length=128)
    options: dict[str, str] = Field(default_factory=dict)
    enabled: bool = True

    _text = field_validator("name", "team", "secret", mode="before")(
        classmethod(lambda cls, v: _no_control(v) if isinstance(v, str) else v)
    )
    _url = field_validator("url")(classmethod(lambda cls, v: _url_syntax(v)))
    _opts = field_validator("options")(classmethod(lambda cls, v: _options_clean(v)))


class ChannelUpdate(BaseModel):
    """Fields to change; a new ``url`` clears ``broken``. ``secret`` ``""`` removes it."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, pattern=NAME_PATTERN)
    url: str | None = Field(default=None, min_length=1, max_length=2048)
    secret: str | None = Field(default=None, max_length=1024)
    team: str | None = Field(default=None, min_length=1, max_length=128)
    options: dict[str, str] | None = None
    enabled: bool | None = None

    _text = field_validator("name", "team", "secret", mode="before")(
        classmethod(lambda cls, v: _no_control(v) if isinstance(v, str) else v)
    )
    _url = field_validator("url")(classmethod(lambda cls, v: _url_syntax(v)))
    _opts = field_validator("options")(classmethod(lambda cls, v: _options_clean(v)))


class ChannelOut(BaseModel):
    """A channel as shown: the URL masked."""

    id: int
    name: str
    kind: str
    team: str | None
    url_masked: str
    has_secret: bool
    options: dict[str, str]
    enabled: bool
    broken: bool
    last_error: str | None
    created_at: datetime
    updated_at: datetime


class RouteIn(BaseModel):
    """A route: alerts of ``team`` (``None``: all teams) with one of ``severities`` (empty:
    all) go to ``channel_id``, grouped by ``group_by`` labels. ``group_wait_s`` left out: 0 s
    for a route of critical alerts only (a page must not wait for company), else 5 s."""

    model_config = ConfigDict(extra="forbid")

    channel_id: int = Field(ge=1, le=MAX_ID, description="a channel's id, 1 .. 2^31-1")
    team: str | None = Field(default=None, min_length=1, max_length=128)
    severities: list[str] = Field(default_factory=list)
    group_by: list[str] = Field(default_factory=lambda: list(DEFAULT_GROUP_BY), max_length=16)
    group_wait_s: float | None = Field(default=None, ge=0, le=3600)
    repeat_interval_s: float = Field(default=DEFAULT_REPEAT_INTERVAL_S, ge=60, le=30 * 86400)

    _team = field_validator("team", mode="before")(
        classmethod(lambda cls, v: _no_control(v) if isinstance(v, str) else v)
    )

    @field_validator("severities")
    @classmethod
    def _severities(cls, value: list[str]) -> list[str]:
        bad = [s for s in value if s not in SEVERITIES]
        if bad:
            raise ValueError(f"unknown severities {bad}; use {', '.join(SEVERITIES)}")
        return sorted(set(value), key=SEVERITIES.index)

    @field_validator("group_by")
    @classmethod
    def _group_by(cls, value: list[str]) -> list[str]:
        for name in value:
            if not name or len(name) > 128 or not name.replace("_", "a").isalnum():
                raise ValueError(f"{name!r} is not a label name")
        return value

    @model_validator(mode="after")
    def _default_group_wait(self) -> RouteIn:
        if self.group_wait_s is None:
            critical_only = self.severities == ["critical"]
            self.group_wait_s = CRITICAL_GROUP_WAIT_S if critical_only else DEFAULT_GROUP_WAIT_S
        return self


class RouteOut(RouteIn):
    """A stored route."""

    model_config = ConfigDict(extra="ignore")

    id: int
    created_at: datetime


class DeliveryOut(BaseModel):
    """One row of a channel's delivery log: ``status`` queued/delivered/failed/suppressed,
    ``latency_ms`` the wait for the last attempt's answer(s), ``last_error`` secret-free;
    ``part`` of ``parts``: the request of its message that carries it; ``truncated``: what was
    cut to fit the service's limits."""

    id: int
    created_at: datetime
    delivered_at: datetime | None
    kind: str
    status: str
    alert_id: int | None
    rule: str
    summary: str
    group_key: str
    attempts: int
    not_before: datetime
    last_status_code: int | None
    last_error: str | None
    latency_ms: float | None
    part: int | None = None
    parts: int | None = None
    truncated: str | None = None
    incident_id: int | None = Field(
        default=None, description="the incident the row's alert belongs to (its chat message)"
    )
