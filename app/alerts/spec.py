"""The rule document (``RuleSpec``): common fields plus one ``condition`` per kind, validated
with precise, field-named errors. The same document is the JSON API body, a YAML file entry and
``alert_rule.spec``.

Vocabulary follows Prometheus alerting rules: ``for``, ``keep_firing_for``, ``labels``,
``annotations``-like ``summary``/``description`` templates and ``runbook_url``.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from app.health import reasons
from app.series.rule_targets import ALL_TARGET_METRICS, COUNTER_TARGET_METRICS

DURATION_RE = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?$")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
OPS = (">", ">=", "<", "<=", "==", "!=")
#: The longest duration anything takes (rules, silences): 1 year, far below ``timedelta``'s limit.
MAX_DURATION_S = 365 * 86400
#: A rule's severities, most urgent first (the values of :attr:`RuleSpec.severity`).
SEVERITIES = ("critical", "warning", "info")


def parse_duration(value: Any) -> float:
    """Seconds from ``"90s"``, ``"5m"``, ``"1h30m"``, ``"2d"`` (Prometheus duration syntax) or a
    number of seconds.

    Raises:
        ValueError: anything else, a negative number, NaN, or more than
            :data:`MAX_DURATION_S` (1 year).
    """
    seconds = _seconds(value)
    if seconds > MAX_DURATION_S:
        raise ValueError(f"a duration is at most 365d (1 year), not {str(value)[:40]!r}")
    return seconds


def _seconds(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or text like '5m', '1h30m'")
    if isinstance(value, int | float):
        if value != value:
            raise ValueError("a duration is a finite number of seconds, not NaN")
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return float(value)
    if isinstance(value, str) and value and (m := DURATION_RE.match(value.strip())):
        d, h, mi, s = m.groups()
        return int(d or 0) * 86400 + int(h or 0) * 3600 + int(mi or 0) * 60 + float(s or 0)
    raise ValueError(f"not a duration: {value!r} (use seconds or text like '30s', '5m', '1h')")


def format_duration(seconds: float) -> str:
    """The shortest Prometheus-style text for ``seconds`` (``300`` → ``"5m"``)."""
    if seconds != int(seconds):
        return f"{seconds:g}s"
    rest, out = int(seconds), ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if rest >= size:
            out += f"{rest // size}{unit}"
            rest %= size
    return out + (f"{rest}s" if rest or not out else "")


Duration = Annotated[float, Field(ge=0, le=90 * 86400)]


class _Strict(BaseModel):
    # No NaN or ±inf anywhere (YAML ``.nan``/``.inf``, JSON ``NaN``): a comparison with NaN is
    # never true, and PostgreSQL's JSON refuses what SQLite would store.
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)


class Scope(_Strict):
    """Which entities a rule applies to: exact node label values (``cluster``, ``pod``,
    ``rack``, ``team`` or any other label), hostname glob patterns (``gpu-a-*``) and GPU model
    glob patterns (``*H100*``, matched against ``nvmlDeviceGetName``). Empty means all."""

    labels: dict[str, str] = Field(default_factory=dict)
    nodes: list[str] = Field(default_factory=list)
    gpu_models: list[str] = Field(default_factory=list)


class ThresholdCondition(_Strict):
    """``aggregation(metric over window) op threshold`` per entity of ``target``. ``last`` uses
    the newest sample only (``window`` ignored). A null aggregate (no samples, not supported,
    NaN stored as null) is no data, never a comparison."""

    kind: Literal["threshold"]
    target: Literal["gpu", "node", "disk", "mount", "nfs", "nic"]
    metric: str
    aggregation: Literal["last", "avg", "min", "max"] = "last"
    window: Duration = 60.0
    op: Literal[">", ">=", "<", "<=", "==", "!="]
    threshold: float

    @field_validator("window", mode="before")
    @classmethod
    def _dur(cls, v: Any) -> float:
        return parse_duration(v)

    @field_validator("metric")
    @classmethod
    def _metric_of_target(cls, v: str, info: ValidationInfo) -> str:
        target = info.data.get("target", "gpu")
        known = ALL_TARGET_METRICS[target]
        if v not in known:
            raise ValueError(f"{v!r} is not a {target} metric; one of: {', '.join(sorted(known))}")
        return v


class RateCondition(_Strict):
    """How fast a cumulative counter of ``target`` rises: (newest − oldest value within
    ``window``) ÷ elapsed time, per ``per`` (``s``, ``m``, ``h``); compared with ``op threshold``.
    Fewer than two samples, or a counter reset (a decrease), is no data."""

    kind: Literal["rate"]
    target: Literal["gpu", "nfs", "nic"] = "gpu"
    metric: str
    window: Duration = 3600.0
    per: Literal["s", "m", "h"] = "h"
    op: Literal[">", ">=", "<", "<=", "==", "!="] = ">"
    threshold: float

    @field_validator("window", mode="before")
    @classmethod
    def _dur(cls, v: Any) -> float:
        return parse_duration(v)

    @field_validator("metric")
    @classmethod
    def _counter(cls, v: str, info: ValidationInfo) -> str:
        target = info.data.get("target", "gpu")
        known = COUNTER_TARGET_METRICS[target]
        if v not in known:
            raise ValueError(f"{v!r} is not a {target} counter; one of: {', '.join(sorted(known))}")
        return v

    @field_validator("window")
    @classmethod
    def _positive(cls, v: float) -> float:
        if v <= 0:
            raise ValueError("window must be longer than 0 s")
        return v


class AbsenceCondition(_Strict):
    """Nothing received for ``after``: a node (no batch, by ``node.last_seen_at``, the server's
    receive time), a GPU (no sample received) or a GPU ``metric`` (no non-null value received).
    Judged by server receive time, so agent clock skew cannot make a node look dead. Without
    ``after``, the server's ``stale_after_s`` setting (what makes a node stale everywhere else)."""

    kind: Literal["absence"]
    target: Literal["node", "gpu", "metric"]
    metric: str | None = None
    after: Duration | None = None

    @field_validator("after", mode="before")
    @classmethod
    def _dur(cls, v: Any) -> float | None:
        return None if v is None else parse_duration(v)

    @model_validator(mode="after")
    def _metric_given(self) -> AbsenceCondition:
        if self.target == "metric":
            if self.metric not in ALL_TARGET_METRICS["gpu_stored"]:
                raise ValueError(f"target metric needs a stored GPU metric, not {self.metric!r}")
        elif self.metric is not None:
            raise ValueError(f"metric is only for target metric, not {self.target}")
        return self


class EventCondition(_Strict):
    """At least ``min_count`` events of ``event_kinds`` (``["*"]``: any kind) — Xid events
    restricted to ``xids`` when given — within ``window`` (by the agent's ``occurred_at``), per
    GPU (per node for events naming no GPU; ``per: node`` counts every event of the node
    together). With ``count: occurrences`` (the default) every stored occurrence counts: two
    identical Xids a minute apart are two. With ``count: incidents`` the separate incidents
    (``app.incidents``) holding such events count: a storm of 500 lines is one, the same fault
    back an hour later is two — the repeat offenders."""

    kind: Literal["event"]
    event_kinds: list[str] = Field(default_factory=lambda: ["xid"], min_length=1)
    xids: list[Annotated[int, Field(ge=0, lt=2**31)]] = Field(default_factory=list)
    min_count: int = Field(default=1, ge=1, le=1_000_000)
    window: Duration = 600.0
    count: Literal["occurrences", "incidents"] = "occurrences"
    per: Literal["gpu", "node"] = "gpu"

    @field_validator("window", mode="before")
    @classmethod
    def _dur(cls, v: Any) -> float:
        return parse_duration(v)

    @model_validator(mode="after")
    def _window(self) -> EventCondition:
        if self.window <= 0:
            raise ValueError("window must be longer than 0 s")
        return self


HEALTH_CODE = re.compile(r"[a-z0-9_]{1,64}\*?")


def check_codes(codes: list[str]) -> list[str]:
    """``codes`` as given, each a health reason code or a ``*`` prefix of some.

    Raises:
        ValueError: a code malformed or matching no reason, naming it and the reasons.
    """
    for code in codes:
        if not HEALTH_CODE.fullmatch(code):
            raise ValueError(
                f"health code {code[:80]!r}: up to 64 lowercase letters, digits and _ (a"
                " reason code such as ib_port_down), optionally ending in * for every code"
                " starting so"
            )
        if not reasons.names_a_reason(code):
            known = ", ".join(sorted(reasons.CODES))
            raise ValueError(
                f"health code {code!r} matches no health reason; the reasons are {known}"
                " (xid_* is xid_<n> for every Xid)"
            )
    return codes


def code_named(code: str, wanted: list[str]) -> bool:
    """Whether reason ``code`` is one of ``wanted`` (codes, or prefixes ending in ``*``)."""
    return any(code == w or (w.endswith("*") and code.startswith(w[:-1])) for w in wanted)


class HealthCondition(_Strict):
    """An entity of ``target`` is in one of ``states`` (``app.health``), optionally only for the
    reason ``codes`` given (``gpu_lost``, ``nvlink_down``, ``xid_79`` …; ``app.health.reasons``
    lists them). A code ending in ``*`` matches every code that starts with the rest:
    ``xid_*`` is any Xid."""

    kind: Literal["health"]
    target: Literal["node", "gpu"] = "node"
    states: list[Literal["degraded", "unhealthy", "unknown"]] = Field(min_length=1)
    codes: list[str] = Field(default_factory=list)

    @field_validator("codes")
    @classmethod
    def _codes(cls, codes: list[str]) -> list[str]:
        return check_codes(codes)

    def matches(self, codes: tuple[str, ...]) -> bool:
        """Whether any of an entity's reason ``codes`` is one of this condition's (every code
        when it names none)."""
        return not self.codes or any(code_named(c, self.codes) for c in codes)


class DriftCondition(_Strict):
    """A node's topology or inventory differs from its group's majority
    (``app.topology.drift``); ``drift_kinds`` narrows to some finding kinds (empty: all)."""

    kind: Literal["drift"]
    drift_kinds: list[str] = Field(default_factory=list)


Condition = Annotated[
    ThresholdCondition
    | RateCondition
    | AbsenceCondition
    | EventCondition
    | HealthCondition
    | DriftCondition,
    Field(discriminator="kind"),
]


class RuleSpec(_Strict):
    """A whole rule. ``for`` and ``keep_firing_for`` are durations; ``no_data`` says what an
    entity with no data does: ``ok`` (condition false), ``firing`` (condition true) or ``keep``
    (no change). ``summary`` and ``description`` are templates with ``{hostname}``,
    ``{gpu_index}``, ``{value}``, ``{threshold}`` and the entity's labels."""

    name: str
    enabled: bool = True
    severity: Literal["critical", "warning", "info"] = "warning"
    owner_team: str | None = Field(default=None, max_length=128)
    summary: str = Field(default="{rule} on {entity}", max_length=1024)
    description: str = Field(default="", max_length=8192)
    runbook_url: str | None = Field(default=None, max_length=2048)
    runbook: str | None = Field(default=None, max_length=128)
    scope: Scope = Field(default_factory=Scope)
    for_s: Duration = Field(default=0.0, alias="for")
    keep_firing_for_s: Duration = Field(default=0.0, alias="keep_firing_for")
    no_data: Literal["ok", "firing", "keep"] = "ok"
    condition: Condition
    #: The health reason codes whose suggested repair ``{suggested_action}`` names (``*``
    #: prefixes allowed); empty: every reason of the entity (a node's with its GPUs'), or a
    #: health rule's own ``codes``.
    action_codes: list[str] = Field(default_factory=list, max_length=64)
    #: What Fleetwatch does to the node of an alert of this rule when it fires
    #: (:mod:`app.remediation.automation`): ``quarantine`` it (Slurm drain …), per
    #: ``action_mode``: ``recommend`` (a person accepts it in one click on the alert page),
    #: ``automatic`` (within the circuit breaker's limits) or ``dry_run`` (recorded only).
    action: Literal["quarantine"] | None = None
    action_mode: Literal["recommend", "automatic", "dry_run"] = "recommend"

    @field_validator("action_codes")
    @classmethod
    def _action_codes(cls, codes: list[str]) -> list[str]:
        return check_codes(codes)

    @model_validator(mode="after")
    def _action_mode_needs_action(self) -> RuleSpec:
        if self.action is None and self.action_mode != "recommend":
            raise ValueError("action_mode needs an action (action: quarantine)")
        return self

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError("a rule name is 1-128 letters, digits, '_', '.', '-'")
        return v

    @field_validator("for_s", "keep_firing_for_s", mode="before")
    @classmethod
    def _dur(cls, v: Any) -> float:
        return parse_duration(v)

    @field_validator("runbook_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^https?://\S+$", v):
            raise ValueError("runbook_url must be an http:// or https:// URL")
        return v

    @field_validator("runbook")
    @classmethod
    def _runbook(cls, v: str | None) -> str | None:
        if v is not None and not NAME_RE.match(v):
            raise ValueError("a runbook name is 1-128 letters, digits, '_', '.', '-'")
        return v

    def document(self) -> dict[str, Any]:
        """The rule as its YAML/JSON document (aliases, durations as text, defaults kept)."""
        doc = self.model_dump(mode="json", by_alias=True)
        for key in ("for", "keep_firing_for"):
            doc[key] = format_duration(doc[key])
        cond = doc["condition"]
        for key in ("window", "after"):
            if key in cond and cond[key] is not None:
                cond[key] = format_duration(cond[key])
        return doc
