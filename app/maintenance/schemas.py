"""API shapes of maintenance windows."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from app.alerts.schemas import Matcher, PersonName, StorableText


def _aware(value: datetime | None) -> datetime | None:
    if value is not None and value.tzinfo is None:
        raise ValueError("a time needs a time zone (e.g. 2026-12-05T22:00:00Z)")
    return value


class MaintenanceIn(BaseModel):
    """``POST /api/v1/maintenance`` body: one node (``hostname``) or the nodes ``matchers``
    select (over node labels and ``hostname``), exactly one of the two."""

    model_config = ConfigDict(extra="forbid")

    hostname: str | None = Field(default=None, min_length=1, max_length=255)
    matchers: list[Matcher] | None = Field(default=None, min_length=1, max_length=32)
    reason: StorableText = Field(min_length=1, max_length=1024, description="why")
    starts_at: datetime | None = Field(default=None, description="default: now")
    ends_at: datetime
    created_by: PersonName = Field(min_length=1, max_length=128)

    _times = field_validator("starts_at", "ends_at")(_aware)

    @model_validator(mode="after")
    def _one_scope(self) -> MaintenanceIn:
        if (self.hostname is None) == (self.matchers is None):
            raise ValueError("give exactly one of hostname (one node) or matchers (a group)")
        return self


class MaintenanceEndIn(BaseModel):
    """``POST /api/v1/maintenance/{id}/end`` body."""

    model_config = ConfigDict(extra="forbid")

    ended_by: PersonName = Field(min_length=1, max_length=128)


class MaintenanceOut(BaseModel):
    """A maintenance window; ``nodes``: the hostnames it selects now, ``in_force``: whether
    it covers them now."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    matchers: list[dict[str, str]]
    reason: str
    starts_at: datetime
    ends_at: datetime
    created_by: str
    created_at: datetime
    ended_by: str | None
    in_force: bool = False
    nodes: list[str] = []
