"""API shapes of a node's lifecycle and its action log."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from app.fleet.retire import checked_reason
from app.ingest.fields import plain_text
from app.lifecycle.service import MAX_ACTOR, MAX_CAUSE_REF

StateName = Literal["in_service", "quarantined", "remediating", "validating", "rma"]
#: The causes a caller may give: ``rule`` and ``system`` are the server's own (automation's
#: quarantines count towards the circuit breaker by them).
CauseName = Literal["person", "incident", "alert"]


def _stripped_text(value: str) -> str:
    value = plain_text(value.strip())
    if not value:
        raise ValueError("must say something")
    return value


class LifecycleIn(BaseModel):
    """``POST /api/v1/nodes/{hostname}/lifecycle`` body."""

    model_config = ConfigDict(extra="forbid")

    to_state: StateName = Field(description="the state to move the node to")
    reason: Annotated[str, AfterValidator(checked_reason)] = Field(
        min_length=1, max_length=1024, description="why; a drain's Slurm Reason starts with it"
    )
    actor: Annotated[str, AfterValidator(_stripped_text)] = Field(
        default="api", min_length=1, max_length=MAX_ACTOR, description="who asks"
    )
    cause: CauseName = Field(default="person", description="what caused the transition")
    cause_ref: Annotated[str, AfterValidator(_stripped_text)] | None = Field(
        default=None, max_length=MAX_CAUSE_REF, description="the incident or alert id"
    )
    dry_run: bool = Field(
        default=False, description="record the scheduler actions as dry_run, never run them"
    )


class TransitionOut(BaseModel):
    """One lifecycle transition."""

    id: int
    at: datetime
    from_state: str
    to_state: str
    reason: str
    cause: str
    cause_ref: str | None
    actor: str


class ActionOut(BaseModel):
    """One action of the log: the exact command and what came of it."""

    id: int
    transition_id: int | None
    system: str
    verb: str
    target: str
    command: list[Any]
    status: str
    attempts: int
    requested_at: datetime
    next_attempt_at: datetime | None
    finished_at: datetime | None
    returncode: int | None
    output: str
    actor: str


class LifecycleOut(BaseModel):
    """A node's lifecycle: its state now, its transitions and actions (newest first)."""

    hostname: str
    state: StateName
    since: datetime | None
    reason: str | None
    cause: str | None
    cause_ref: str | None
    actor: str | None
    managed: list[str] = Field(
        description="the systems a transition acts on: slurm, kubernetes, hook (remediation)"
    )
    transitions: list[TransitionOut]
    actions: list[ActionOut]


class OutOfServiceOut(BaseModel):
    """A node out of service now (``GET /api/v1/lifecycle``)."""

    hostname: str
    state: StateName
    since: datetime
    reason: str
    cause: str
    cause_ref: str | None


class TransitionMadeOut(BaseModel):
    """The answer to a transition: the row and the actions it logged."""

    hostname: str
    transition: TransitionOut
    actions: list[ActionOut]


class DecisionOut(BaseModel):
    """What automation decided for one firing alert of a rule with an ``action``."""

    id: int
    alert_event_id: int
    at: datetime
    rule: str
    mode: str
    hostname: str | None
    outcome: str = Field(description="quarantined, recommended, dry_run, blocked or skipped")
    detail: str
    transition_id: int | None


class BreakerOut(BaseModel):
    """The automatic-quarantine circuit breaker."""

    open: bool
    opened_at: datetime | None
    reason: str
    reset_at: datetime | None
    reset_by: str | None
    max_nodes: int
    max_pct: float
    window_s: float
    group_label: str


class AutomationOut(BaseModel):
    """The breaker and the newest decisions."""

    breaker: BreakerOut
    decisions: list[DecisionOut]


class BreakerResetIn(BaseModel):
    """``POST /api/v1/automation/breaker/reset`` body."""

    model_config = ConfigDict(extra="forbid")

    actor: Annotated[str, AfterValidator(_stripped_text)] = Field(
        min_length=1, max_length=MAX_ACTOR, description="who resets it"
    )


class RetryIn(BaseModel):
    """``POST /api/v1/actions/{id}/retry`` body."""

    model_config = ConfigDict(extra="forbid")

    actor: Annotated[str, AfterValidator(_stripped_text)] = Field(
        default="api", min_length=1, max_length=MAX_ACTOR, description="who asks"
    )
