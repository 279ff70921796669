"""The one small interface every notification channel kind implements.

A channel kind turns a :class:`NoticeGroup` (alerts that changed state, grouped by the team's
route) into the HTTP requests its service expects (:meth:`ChannelKind.build`), and reads that
service's answer into an :class:`Outcome` (:meth:`ChannelKind.interpret`). It never sends
anything itself: the delivery worker (``app.notify.worker``) sends, applies the SSRF guard,
timeouts, retries with backoff and the delivery deadline, so every kind gets them the same way.

Kinds are pure: no database, no network, no clock (times come in the notices), which is what
lets their payloads be checked field by field in unit tests.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import ClassVar, Literal

NoticeStatus = Literal["firing", "resolved"]


@dataclass(frozen=True)
class AlertNotice:
    """One alert instance's state to tell a channel about.

    ``labels`` are the instance's labels (``alertname``, ``severity``, ``team``, ``hostname``,
    ``gpu`` …, Prometheus style); ``annotations`` hold at least ``summary`` and ``description``
    (already filled from the rule's templates). ``fingerprint`` is stable per rule × entity (the
    PagerDuty ``dedup_key``, Alertmanager's fingerprint). URLs are absolute: ``dashboard_url``
    is the alert's page, ``entity_url`` the node or GPU page, ``ack_url`` the signed one-click
    acknowledgement (``None`` for resolved notices), ``runbook_url`` the rule's runbook
    (external ``runbook_url`` or the in-app page). ``value`` is the value that made the rule
    fire, in the metric's unit (``None`` for event and absence rules). ``jobs_hit``: the jobs
    the node's incident hit (``slurm job 4242 llm-pretrain (alice, RUNNING, GPUs 0,1)``, or
    ``none``), empty where Fleetwatch does not know (no scheduler read, no incident).
    """

    alert_id: int
    fingerprint: str
    rule_name: str
    status: NoticeStatus
    severity: str
    team: str | None
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    value: float | None
    starts_at: datetime
    ends_at: datetime | None
    dashboard_url: str
    entity_url: str | None = None
    ack_url: str | None = None
    runbook_url: str | None = None
    jobs_hit: tuple[str, ...] = ()
    #: The incident (:mod:`app.incidents`) the alert belongs to (``None``: none), its page,
    #: and how many other alerts of it the channel was told fire (set at send time; ``None``:
    #: not counted).
    incident_id: int | None = None
    incident_url: str | None = None
    incident_firing: int | None = None

    @property
    def summary(self) -> str:
        """The ``summary`` annotation, or the rule name when the rule has none."""
        return self.annotations.get("summary") or self.rule_name


@dataclass(frozen=True)
class IncidentCard:
    """One incident as its chat message tells it (read when the message is built).

    ``gpu_indexes`` and ``xids`` sorted; ``state`` the worst health state its events cause
    (``unhealthy``, ``degraded``); ``open`` False once ``closes_at`` passed (its quiet period
    without a new event); ``action_text`` its strongest suggested repair; ``url`` its page;
    ``test`` a self-test incident. ``changes`` are the lines saying what changed since the
    message was last posted or updated (a thread reply on Slack), oldest first."""

    id: int
    hostname: str
    url: str
    opened_at: datetime
    last_event_at: datetime
    closes_at: datetime
    open: bool
    state: str
    job_fatal: bool
    gpu_indexes: tuple[int, ...]
    xids: tuple[int, ...]
    action_text: str
    test: bool = False
    changes: tuple[str, ...] = ()


@dataclass(frozen=True)
class NoticeGroup:
    """Notices sent together in one message (Alertmanager's group): same route and
    ``group_key`` (by default rule + cluster). ``status`` is ``firing`` when any notice fires.
    ``is_test`` marks the "send test message" button's group. ``external_url`` is Fleetwatch's
    own base URL (for links back and Alertmanager's ``externalURL``). ``sent_at`` is when the
    requests are built (set by the worker at each attempt): the signed generic webhook's
    ``X-Fleetwatch-Timestamp``; ``None`` → the newest notice time (kinds stay clock-free)."""

    group_key: str
    receiver: str
    notices: tuple[AlertNotice, ...]
    external_url: str
    group_labels: Mapping[str, str] = field(default_factory=dict)
    is_test: bool = False
    sent_at: datetime | None = None
    #: Set for one incident's message (channels that edit): ``notices`` are then every alert
    #: of the incident told to the channel, each in its latest state.
    incident: IncidentCard | None = None

    @property
    def status(self) -> NoticeStatus:
        """``firing`` when at least one notice fires, else ``resolved``."""
        return "firing" if any(n.status == "firing" for n in self.notices) else "resolved"


@dataclass(frozen=True)
class ChannelConfig:
    """A channel's settings, secrets already decrypted: ``url`` is the webhook / API endpoint
    (a secret: never logged), ``secret`` the HMAC key for signed kinds or the routing/
    integration key (PagerDuty ``routing_key``), ``options`` kind-specific extras (strings)."""

    url: str
    secret: str | None = None
    options: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class OutboundRequest:
    """One HTTP POST to make: ``body`` is the exact bytes sent (what a signature covers).
    ``covers`` are the indexes (into ``NoticeGroup.notices``) of the notices this part tells,
    ``None`` for all of them: the worker records each part's outcome on those notices' rows
    alone, so a retry resends only the parts not yet accepted."""

    url: str
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)
    method: str = "POST"
    covers: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Outcome:
    """What a service's answer means.

    ``ok``: delivered. Otherwise ``retryable`` (timeout-like: 429, 5xx, a body that says
    "throttled") with ``retry_after_s`` when the service said how long to wait (RFC 9110
    ``Retry-After``), or permanent; ``broken`` marks the channel itself as broken (404/410: the
    webhook was deleted). ``detail`` is a short, secret-free description for the delivery log.
    """

    ok: bool
    detail: str
    retryable: bool = False
    retry_after_s: float | None = None
    broken: bool = False


class ChannelKind(ABC):
    """A notification service (Slack, Microsoft Teams, Discord, PagerDuty, generic webhook,
    Alertmanager). Subclasses set ``kind`` (the name stored on the channel) and implement
    :meth:`build` and :meth:`interpret`; :meth:`validate` checks a channel's settings when it is
    created. ``default_url`` is the endpoint used when a channel's ``url`` is empty (PagerDuty's
    Events API); ``None`` when a URL is required."""

    kind: ClassVar[str]
    default_url: ClassVar[str | None] = None
    #: The service's documented pace per destination, ``(requests, per seconds)``; ``None``:
    #: no limit. The ``notify_rate_limits`` setting and a channel's ``rate_limit`` option
    #: override it (:mod:`app.notify.pacing`).
    rate_limit: ClassVar[tuple[int, float] | None] = None

    def rate_key(self, config: ChannelConfig) -> str:
        """What the service rate-limits by: the webhook URL (a secret: the pacer stores only
        a hash of it). PagerDuty overrides it with the routing key."""
        return config.url

    @abstractmethod
    def build(self, group: NoticeGroup, config: ChannelConfig) -> list[OutboundRequest]:
        """The requests that tell ``group`` to the service, in order. More than one when the
        service's size limits require splitting; never fewer notices than ``group`` holds
        (a message is truncated or split, never dropped)."""

    def interpret(self, status_code: int, headers: Mapping[str, str], body: bytes) -> Outcome:
        """Read the service's answer. The default: 2xx ok; 404/410 broken; 408, 425, 429 and
        5xx retryable (honouring ``Retry-After`` in seconds or as an HTTP date); other 4xx
        permanent. Kinds whose services answer differently (Teams: 200 with an error in the
        body) override it."""
        return default_interpret(status_code, headers, body)

    def validate(self, config: ChannelConfig) -> None:  # noqa: B027 - optional hook
        """Raise ``ValueError`` naming the wrong setting (``"options.severity_map: …"``); the
        default accepts any config (the URL is checked by the SSRF guard)."""


class EditingKind(ChannelKind):
    """A kind whose service can edit a message it posted (Slack's Web API, Discord
    webhooks): one message per incident, posted by its first notice and updated by every
    later change (:mod:`app.notify.incident_messages`)."""

    @abstractmethod
    def build_post(self, group: NoticeGroup, config: ChannelConfig) -> OutboundRequest:
        """The request that posts ``group.incident``'s message (its answer carries the
        message's reference, read by :meth:`message_ref`)."""

    @abstractmethod
    def build_update(
        self, group: NoticeGroup, config: ChannelConfig, ref: Mapping[str, str]
    ) -> list[OutboundRequest]:
        """The requests that update the message ``ref`` to ``group.incident``'s state: the
        edit first (whose outcome counts), then optional extras (a thread reply)."""

    @abstractmethod
    def message_ref(self, body: bytes) -> dict[str, str] | None:
        """The posted message's reference from a successful post's answer; ``None`` when the
        answer holds none (the next change then posts a new message)."""

    def message_here(self, config: ChannelConfig, ref: Mapping[str, str]) -> bool:
        """Whether message ``ref`` is where ``config`` posts now (False: the settings moved
        the channel elsewhere since, so the incident's next change is posted there anew
        rather than edited in a channel no longer configured)."""
        return True

    @abstractmethod
    def message_gone(self, status_code: int, body: bytes) -> bool:
        """Whether a failed update means the message cannot be edited any more (deleted, too
        old, not found): the change is then posted as a new message, never lost."""


def default_interpret(status_code: int, headers: Mapping[str, str], body: bytes) -> Outcome:
    """The HTTP status rules of :meth:`ChannelKind.interpret` (RFC 9110 §15)."""
    snippet = body[:200].decode("utf-8", "replace").strip()
    detail = f"HTTP {status_code}" + (f": {snippet}" if snippet else "")
    if 200 <= status_code < 300:
        return Outcome(ok=True, detail=f"HTTP {status_code}")
    if status_code in (404, 410):
        return Outcome(ok=False, detail=detail, broken=True)
    if status_code in (408, 425, 429) or status_code >= 500:
        return Outcome(
            ok=False, detail=detail, retryable=True, retry_after_s=retry_after_s(headers)
        )
    return Outcome(ok=False, detail=detail)


def retry_after_s(headers: Mapping[str, str], *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP-date, RFC 9110
    §10.2.3), at least 0; ``None`` when absent or unreadable. Header names are matched
    case-insensitively."""
    value = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)  # RFC 9110 says whole seconds; some services send "1.5"
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    reference = now or datetime.now(UTC)
    return max(0.0, (when - reference).total_seconds())
