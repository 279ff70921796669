"""The notification pages' forms: what each channel kind asks for, and form bodies turned into
:class:`ChannelIn` / :class:`ChannelUpdate` / :class:`RouteIn` with errors keyed by field name
for inline display (the service's ``BadRequest`` texts start with the field: ``"url: …"``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from app.forms import Form
from app.notify.channels.registry import KINDS
from app.notify.schemas import ChannelIn, ChannelUpdate, RouteIn

ALLOW_ENV = "FLEETWATCH_NOTIFY_ALLOW_HOSTS"


@dataclass(frozen=True)
class KindForm:
    """What the form asks for one kind: the URL's help text, the secret's label (``None``:
    the kind has no secret), whether the secret is required, and option fields
    ``(name, label, help)``."""

    title: str
    url_help: str
    secret_label: str | None = None
    secret_required: bool = False
    options: tuple[tuple[str, str, str], ...] = ()


KIND_FORMS: dict[str, KindForm] = {
    "slack": KindForm("Slack", "Incoming webhook URL (https://hooks.slack.com/services/…)"),
    "slack_app": KindForm(
        "Slack app (one message per incident, edited in place)",
        "Empty: Slack's Web API (https://slack.com/api)",
        secret_label="Bot token (xoxb-…, scope chat:write)",
        secret_required=True,
        options=(("channel", "Channel ID", "C0123ABCD (the channel's details; not its name)"),),
    ),
    "teams": KindForm("Microsoft Teams", "The Workflows webhook's HTTP POST URL"),
    "discord": KindForm("Discord", "https://discord.com/api/webhooks/<id>/<token>"),
    "pagerduty": KindForm(
        "PagerDuty",
        "Empty: the Events API v2 (https://events.pagerduty.com/v2/enqueue)",
        secret_label="Integration (routing) key",
        secret_required=True,
    ),
    "webhook": KindForm(
        "Generic webhook",
        "Your endpoint; it receives Alertmanager's webhook JSON (version 4)",
        secret_label="HMAC signing key (optional)",
        options=(
            ("max_alerts", "Alerts per body", "0 = no limit; more are split into several bodies"),
            ("truncate", "Truncate", "true: drop the alerts over the limit instead of splitting"),
        ),
    ),
    "alertmanager": KindForm("Alertmanager", "Its base URL (/api/v2/alerts is added)"),
}
assert set(KIND_FORMS) == set(KINDS), "every registered kind needs a form"

#: Options chosen from a list: option → (value, label); ``""`` leaves the option unset.
OPTION_CHOICES: dict[str, tuple[tuple[str, str], ...]] = {
    "truncate": (("", "no: split into several bodies"), ("true", "yes: drop the extra alerts")),
}

Errors = dict[str, str]
_FIELD = re.compile(r"^([a-z_]+(?:\.[a-z_]+)?): ")


def error_key(message: str) -> tuple[str, str]:
    """``"url: host … loopback …"`` → ``("url", message)``; ``"options.max_alerts: …"`` →
    ``("options.max_alerts", …)``; a message naming no field → ``("form", message)``. SSRF
    refusals get the environment variable that allows them."""
    found = _FIELD.match(message)
    message = message.replace(
        "(allow it with the notify_allow_hosts setting)",
        f"(allow it with {ALLOW_ENV}, hosts or CIDRs separated by commas such as "
        "127.0.0.1,10.0.0.0/8, and restart)",
    )
    return (found.group(1) if found else "form"), message


def _pydantic_errors(exc: ValidationError) -> Errors:
    errors: Errors = {}
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]] or ["form"]
        name = ".".join(loc[:2]) if loc[0] == "options" else loc[0]
        text = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "string_pattern_mismatch" and name == "name":
            text = "use letters, digits, space, _ . - (starting with a letter or digit)"
        errors.setdefault(name, f"{name}: {text}")
    return errors


def _build(model: type[BaseModel], data: dict[str, Any]) -> tuple[Any, Errors]:
    try:
        return model.model_validate(data), {}
    except ValidationError as exc:
        return None, _pydantic_errors(exc)


@dataclass
class ChannelForm:
    """A channel form as typed (``typed``: the non-secret fields to show again; the URL and
    secret are never echoed back) and its ``errors`` (field → message)."""

    kind: str
    typed: dict[str, str] = field(default_factory=dict)
    errors: Errors = field(default_factory=dict)


def _options(form: Form, kind: str) -> dict[str, str]:
    spec = KIND_FORMS.get(kind)
    names = [name for name, _, _ in spec.options] if spec else []
    return {n: form.one(f"opt_{n}") for n in names if form.one(f"opt_{n}")}


def _default_url(kind: str, url: str) -> str:
    found = KINDS.get(kind)
    return url or (found.default_url or "" if found else "")


def channel_in(form: Form) -> tuple[ChannelIn | None, ChannelForm]:
    """A new channel from the create form (fields ``name``, ``kind``, ``team``, ``url``,
    ``secret``, ``opt_<option>``, ``enabled``); an empty PagerDuty URL is its Events API."""
    kind = form.one("kind")
    shown = ChannelForm(kind, {k: form.one(k) for k in ("name", "team")})
    shown.typed.update({f"opt_{k}": v for k, v in _options(form, kind).items()})
    data = {
        "name": form.one("name"),
        "kind": kind,
        "url": _default_url(kind, form.one("url")),
        "secret": form.one("secret") or None,
        "team": form.one("team") or None,
        "options": _options(form, kind),
        "enabled": form.one("enabled") != "false",
    }
    model, shown.errors = _build(ChannelIn, data)
    return model, shown


def channel_update(
    form: Form, kind: str, current_options: dict[str, str]
) -> tuple[ChannelUpdate | None, ChannelForm]:
    """Changes from the edit form: an empty ``url`` or ``secret`` leaves it unchanged,
    ``remove_secret`` = ``1`` removes the secret; name and team are replaced, options only
    when they differ from ``current_options`` (a changed URL, secret or options clears the
    channel's broken state, so a rename must not)."""
    shown = ChannelForm(kind, {k: form.one(k) for k in ("name", "team")})
    options = _options(form, kind)
    shown.typed.update({f"opt_{k}": v for k, v in options.items()})
    data: dict[str, Any] = {"name": form.one("name"), "team": form.one("team") or None}
    if options != current_options:
        data["options"] = options
    if form.one("url"):
        data["url"] = form.one("url")
    if form.one("remove_secret") == "1":
        data["secret"] = ""
    elif form.one("secret"):
        data["secret"] = form.one("secret")
    model, shown.errors = _build(ChannelUpdate, data)
    return model, shown


@dataclass
class RouteForm:
    """A route form as typed and its errors."""

    typed: dict[str, Any] = field(default_factory=dict)
    errors: Errors = field(default_factory=dict)


def route_in(form: Form) -> tuple[RouteIn | None, RouteForm]:
    """A route from its form: ``channel_id``, ``team``, ``severity`` (repeated checkboxes),
    ``group_by`` (comma-separated labels), ``group_wait_s``, ``repeat_interval_s``."""
    severities = [s for s in form.get("severity", []) if s]
    typed: dict[str, Any] = {
        "channel_id": form.one("channel_id"),
        "team": form.one("team"),
        "severities": severities,
        "group_by": form.one("group_by"),
        "group_wait_s": form.one("group_wait_s"),
        "repeat_interval_s": form.one("repeat_interval_s"),
    }
    shown = RouteForm(typed)
    data: dict[str, Any] = {
        "channel_id": typed["channel_id"] or None,
        "team": typed["team"] or None,
        "severities": severities,
        "group_by": [g.strip() for g in form.one("group_by").split(",") if g.strip()],
    }
    for key in ("group_wait_s", "repeat_interval_s"):
        if typed[key]:
            data[key] = typed[key]
    model, shown.errors = _build(RouteIn, data)
    return model, shown


def route_typed(route: Any) -> dict[str, Any]:
    """A stored route as the form shows it."""
    return {
        "channel_id": str(route.channel_id),
        "team": route.team or "",
        "severities": list(route.severities),
        "group_by": ", ".join(route.group_by),
        "group_wait_s": f"{route.group_wait_s:g}",
        "repeat_interval_s": f"{route.repeat_interval_s:g}",
    }
