"""Pydantic in/out models of the alerting JSON API."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from app.alerts.silences import check_regex
from app.ingest.fields import plain_text

#: Prometheus label names (data model docs): ``[a-zA-Z_][a-zA-Z0-9_]*``.
LABEL_NAME_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable_text(value: str) -> str:
    """``value`` unchanged unless it holds NUL (PostgreSQL text refuses it) or a lone UTF-16
    surrogate (UTF-8 cannot encode it): refused on every backend alike, so SQLite does not keep
    what PostgreSQL would reject.

    Raises:
        ValueError: naming the offending code point.
    """
    if bad := _UNSTORABLE.search(value):
        raise ValueError(f"contains the character U+{ord(bad.group()):04X}, which cannot be stored")
    return value


#: Multi-line free text (comments, notes): newlines kept, NUL and lone surrogates refused.
StorableText = Annotated[str, AfterValidator(storable_text)]
#: One-line names (author, owner): every control character and lone surrogate refused.
PersonName = Annotated[str, AfterValidator(plain_text)]


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
    inhibited_by: list[int] = Field(
        default_factory=list,
        description="ids of the firing alerts that inhibit this one (it pages nobody); "
        "empty when none does",
    )


class InhibitRuleOut(BaseModel):
    """A stored inhibition rule; ``spec`` is its document (``PUT`` takes it back)."""

    name: str
    enabled: bool
    source: str
    created_at: datetime
    updated_at: datetime
    spec: dict[str, Any]


class AlertDetailOut(AlertOut):
    """An instance with its transitions and acknowledgements."""

    events: list[AlertEventOut]
    acks: list[AckOut]


class AckIn(BaseModel):
    """``POST /api/v1/alerts/{id}/ack`` body."""

    model_config = ConfigDict(extra="forbid")

    owner: PersonName = Field(min_length=1, max_length=128)
    note: StorableText = Field(default="", max_length=4096)


class Matcher(BaseModel):
    """An Alertmanager label matcher: ``name`` a Prometheus label name, ``value`` text or, for
    ``=~``/``!~``, an RE2 regex matched against the whole label value."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=128)
    op: Literal["=", "!=", "=~", "!~"] = "="
    value: StorableText = Field(max_length=1024)

    @field_validator("name")
    @classmethod
    def _label_name(cls, v: str) -> str:
        if not LABEL_NAME_RE.fullmatch(v):
            raise ValueError("a label name is a letter or '_' then letters, digits, '_'")
        return v

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
    created_by: PersonName = Field(min_length=1, max_length=128)
    comment: StorableText = Field(default="", max_length=4096)
    team: PersonName | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        description="owning team; left out: the matched rules' one team, else the caller's "
        "only team, else shared",
    )

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
    team: str | None
