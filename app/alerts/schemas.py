"""Pydantic in/out models of the alerting JSON API."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.alerts.silences import check_regex


class RuleOut(BaseModel):
    """A stored rule: its columns and its document (``spec``, durations as text)."""

    id: int
    name: str
    kind: str
    severity: str
    owner_team: str | None
    enabled: bool
    source: str
    created_at: datetime
    updated_at: datetime
    spec: dict[str, Any]


class PreviewEntity(BaseModel):
    """One entity a rule matches now and the state it would be in."""

    fingerprint: str
    entity: str
    labels: dict[str, str]
    value: float | None
    condition: bool | None = Field(description="true/false, or null for no data")
    state: Literal["inactive", "pending", "firing", "resolved"]
    summary: str


class AlertEventOut(BaseModel):
    """One transition of an alert instance."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    at: datetime
    from_state: str
    to_state: str
    value: float | None
    severity: str
    summary: str
    silenced: bool
    acked: bool
    notified_at: datetime | None


class AckOut(BaseModel):
    """An acknowledgement."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    owner: str
    note: str
    at: datetime


class AlertOut(BaseModel):
    """An alert instance (rule × entity)."""

    id: int
    rule: str
    severity: str
    owner_team: str | None
    fingerprint: str
    state: str
    labels: dict[str, Any]
    value: float | None
    summary: str
    description: str
    runbook_url: str | None
    runbook: str | None
    active_since: datetime | None
    fired_at: datetime | None
    resolved_at: datetime | None
    last_evaluated_at: datetime
    silenced: bool
    acked: bool


class AlertDetailOut(AlertOut):
    """An instance with its transitions and acknowledgements."""

    events: list[AlertEventOut]
    acks: list[AckOut]


class AckIn(BaseModel):
    """``POST /api/v1/alerts/{id}/ack`` body."""

    model_config = ConfigDict(extra="forbid")

    owner: str = Field(min_length=1, max_length=128)
    note: str = Field(default="", max_length=4096)


class Matcher(BaseModel):
    """An Alertmanager label matcher."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=128)
    op: Literal["=", "!=", "=~", "!~"] = "="
    value: str = Field(max_length=1024)

    @field_validator("value")
    @classmethod
    def _regex(cls, v: str, info: Any) -> str:
        if info.data.get("op") in ("=~", "!~"):
            check_regex(v)
        return v


class SilenceIn(BaseModel):
    """``POST /api/v1/silences`` body; ``starts_at`` defaults to now."""

    model_config = ConfigDict(extra="forbid")

    matchers: list[Matcher] = Field(min_length=1, max_length=32)
    starts_at: datetime | None = None
    ends_at: datetime
    created_by: str = Field(min_length=1, max_length=128)
    comment: str = Field(default="", max_length=4096)

    @field_validator("starts_at", "ends_at")
    @classmethod
    def _aware(cls, v: datetime | None) -> datetime | None:
        if v is not None and v.tzinfo is None:
            raise ValueError("a time needs a time zone (e.g. 2026-11-29T12:00:00Z)")
        return v


class SilenceOut(BaseModel):
    """A silence."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    matchers: list[dict[str, str]]
    starts_at: datetime
    ends_at: datetime
    created_by: str
    comment: str
    created_at: datetime
