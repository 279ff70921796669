"""Settings read the plain form a person types (``a,b``, ``key=value``, ``yes``) as well as JSON,
and every refusal names the variable, the value and the form expected (issue 14)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.config import Settings, SettingsError, load_settings

#: Every boolean setting (a new one is covered without listing it here).
BOOLS = [n for n, f in Settings.model_fields.items() if f.annotation is bool]

#: (variable, text, attribute, parsed value): the plain forms of every list, map and boolean.
PLAIN = [
    ("FLEETWATCH_NOTIFY_ALLOW_HOSTS", "127.0.0.1", "notify_allow_hosts", ["127.0.0.1"]),
    ("FLEETWATCH_METRICS_NODE_LABELS", "cluster, rack", "metrics_node_labels", ["cluster", "rack"]),
    (
        "FLEETWATCH_NOTIFY_ALLOW_HOSTS",
        "127.0.0.1,10.0.0.0/8",
        "notify_allow_hosts",
        ["127.0.0.1", "10.0.0.0/8"],
    ),
    (
        "FLEETWATCH_NOTIFY_ALLOW_HOSTS",
        " Hooks.Internal , 10.0.0.0/8  fd00::/8 ",
        "notify_allow_hosts",
        ["hooks.internal", "10.0.0.0/8", "fd00::/8"],
    ),
    (
        "FLEETWATCH_NOTIFY_RATE_LIMITS",
        "slack=1/1s,discord=5/2s",
        "notify_rate_limits",
        {"slack": "1/1s", "discord": "5/2s"},
    ),
    (
        "FLEETWATCH_NOTIFY_RATE_LIMITS",
        "slack = 1/1s webhook=off",
        "notify_rate_limits",
        {"slack": "1/1s", "webhook": "off"},
    ),
    ("FLEETWATCH_HEALTH_XID_UNHEALTHY", "48,79", "health_xid_unhealthy", [48, 79]),
    ("FLEETWATCH_HEALTH_XID_DEGRADED", "94 95", "health_xid_degraded", [94, 95]),
    ("FLEETWATCH_HEALTH_XID_IGNORED", "13, 31, 43", "health_xid_ignored", [13, 31, 43]),
    *[
        (f"FLEETWATCH_{name.upper()}", text, name, value)
        for name in BOOLS
        for text, value in [
            ("true", True),
            ("false", False),
            ("1", True),
            ("0", False),
            ("yes", True),
            ("no", False),
            ("on", True),
            ("off", False),
            (" Off ", False),
            ("TRUE", True),
        ]
    ],
]

#: (variable, JSON text, attribute, parsed value): the JSON forms keep working.
JSON_FORMS = [
    (
        "FLEETWATCH_NOTIFY_ALLOW_HOSTS",
        '["127.0.0.1", "10.0.0.0/8"]',
        "notify_allow_hosts",
        ["127.0.0.1", "10.0.0.0/8"],
    ),
    (
        "FLEETWATCH_NOTIFY_RATE_LIMITS",
        '{"slack": "1/1s", "webhook": "off"}',
        "notify_rate_limits",
        {"slack": "1/1s", "webhook": "off"},
    ),
    ("FLEETWATCH_HEALTH_XID_UNHEALTHY", "[48, 79]", "health_xid_unhealthy", [48, 79]),
    ("FLEETWATCH_HEALTH_XID_DEGRADED", " [94] ", "health_xid_degraded", [94]),
    ("FLEETWATCH_HEALTH_XID_IGNORED", "[]", "health_xid_ignored", []),
]

_HOSTS = "host names or CIDRs separated by commas (e.g. 127.0.0.1,10.0.0.0/8) or a JSON list"
_PACES = "kind=pace pairs separated by commas"
_XIDS = "Xids (whole numbers) separated by commas"
_BOOL = "true or false (also 1/0, yes/no, on/off)"

#: (variable, text, expected form, detail the message must also give, or None).
REFUSED = [
    ("FLEETWATCH_NOTIFY_ALLOW_HOSTS", "not a host!", _HOSTS, "neither a host name nor a CIDR"),
    ("FLEETWATCH_NOTIFY_ALLOW_HOSTS", '["127.0.0.1",', _HOSTS, "not a valid JSON list"),
    ("FLEETWATCH_NOTIFY_ALLOW_HOSTS", '{"a": 1}', _HOSTS, None),
    ("FLEETWATCH_NOTIFY_RATE_LIMITS", "slack", _PACES, "'slack' is not kind=pace"),
    ("FLEETWATCH_NOTIFY_RATE_LIMITS", "slack=fast", _PACES, "slack"),
    ("FLEETWATCH_NOTIFY_RATE_LIMITS", "pigeon=1/1s", _PACES, "not a channel kind"),
    ("FLEETWATCH_NOTIFY_RATE_LIMITS", "slack=1/1s,slack=2/1s", _PACES, "'slack' twice"),
    ("FLEETWATCH_NOTIFY_RATE_LIMITS", '{"slack": ', _PACES, "not a valid JSON object"),
    ("FLEETWATCH_HEALTH_XID_UNHEALTHY", "48,x", _XIDS, "'x' is not a whole number"),
    ("FLEETWATCH_HEALTH_XID_DEGRADED", "[48, -1]", _XIDS, "from 0 to 2**31 - 1"),
    ("FLEETWATCH_HEALTH_XID_IGNORED", '[13, "x"]', _XIDS, "item 2"),
    ("FLEETWATCH_ALERTS_ENABLED", "maybe", _BOOL, None),
    ("FLEETWATCH_NOTIFY_ENABLED", "2", _BOOL, None),
    ("FLEETWATCH_PORT", "eighty", "a whole number from 1 to 65535", None),
    ("FLEETWATCH_PORT", "70000", "a whole number from 1 to 65535", None),
    ("FLEETWATCH_STALE_AFTER_S", "soon", "a number of seconds, more than 0 and at most", None),
    ("FLEETWATCH_STALE_AFTER_S", "-1", "a number of seconds, more than 0 and at most", None),
    ("FLEETWATCH_RETENTION_DAYS", "0", "a number of days", None),
    ("FLEETWATCH_SESSION_IDLE_S", "8h", "a number of seconds from 60 to 2592000", None),
    ("FLEETWATCH_SESSION_IDLE_S", "59", "a number of seconds from 60 to 2592000", None),
    ("FLEETWATCH_SESSION_IDLE_S", "nan", "a number of seconds from 60 to 2592000", None),
    ("FLEETWATCH_AUDIT_RETENTION_DAYS", "400d", "a number of days, more than 0", None),
    ("FLEETWATCH_AUDIT_RETENTION_DAYS", "0", "a number of days, more than 0", None),
    ("FLEETWATCH_AUDIT_RETENTION_DAYS", "inf", "a number of days, more than 0", None),
    ("FLEETWATCH_INGEST_MAX_BYTES", "12", "a whole number of bytes from 1024", None),
    ("FLEETWATCH_LOG_LEVEL", "loud", "one of critical, error, warning, info, debug", None),
    ("FLEETWATCH_DATABASE_URL", "mysql://x/y", "a postgresql:// or sqlite:/// URL", None),
]


@pytest.fixture(autouse=True)
def _no_config_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLEETWATCH_CONFIG_FILE", raising=False)


@pytest.mark.parametrize(("variable", "text", "attribute", "value"), PLAIN)
def test_the_plain_form_of_a_list_map_or_boolean_is_accepted(
    monkeypatch: pytest.MonkeyPatch, variable: str, text: str, attribute: str, value: Any
) -> None:
    monkeypatch.setenv(variable, text)
    assert getattr(load_settings(), attribute) == value


@pytest.mark.parametrize(("variable", "text", "attribute", "value"), JSON_FORMS)
def test_the_json_form_of_a_list_or_map_is_still_accepted(
    monkeypatch: pytest.MonkeyPatch, variable: str, text: str, attribute: str, value: Any
) -> None:
    monkeypatch.setenv(variable, text)
    assert getattr(load_settings(), attribute) == value


@pytest.mark.parametrize(
    ("variable", "attribute"),
    [
        ("FLEETWATCH_NOTIFY_ALLOW_HOSTS", "notify_allow_hosts"),
        ("FLEETWATCH_NOTIFY_RATE_LIMITS", "notify_rate_limits"),
        ("FLEETWATCH_HEALTH_XID_UNHEALTHY", "health_xid_unhealthy"),
        ("FLEETWATCH_HEALTH_XID_DEGRADED", "health_xid_degraded"),
        ("FLEETWATCH_HEALTH_XID_IGNORED", "health_xid_ignored"),
    ],
)
def test_an_empty_list_or_map_variable_means_the_default(
    monkeypatch: pytest.MonkeyPatch, variable: str, attribute: str
) -> None:
    monkeypatch.setenv(variable, "  ")
    assert getattr(load_settings(), attribute) == Settings.model_fields[attribute].get_default(
        call_default_factory=True
    )


@pytest.mark.parametrize(("variable", "text", "form", "detail"), REFUSED)
def test_a_refused_value_names_the_variable_the_expected_form_and_the_value(
    monkeypatch: pytest.MonkeyPatch, variable: str, text: str, form: str, detail: str | None
) -> None:
    monkeypatch.setenv(variable, text)
    with pytest.raises(SettingsError) as excinfo:
        load_settings()
    line = _line_of(str(excinfo.value), variable)
    assert f"expected {form}" in line
    assert f"got {text!r}" in line
    if detail is not None:
        assert detail in line


def test_every_setting_that_refuses_a_value_names_the_variable_the_form_and_the_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whatever the setting, a refusal says what to write instead."""
    refused = []
    for name in Settings.model_fields:
        variable = f"FLEETWATCH_{name.upper()}"
        monkeypatch.setenv(variable, "garbage [")
        try:
            load_settings()
        except SettingsError as exc:
            refused.append(name)
            line = _line_of(str(exc), variable)
            assert "expected " in line
            if name != "secret_key":
                assert "got 'garbage ['" in line
        monkeypatch.delenv(variable)
    numbers = [n for n, f in Settings.model_fields.items() if f.annotation in (int, float)]
    assert set(numbers) <= set(refused)
    assert {"notify_allow_hosts", "notify_rate_limits", "alerts_enabled", "notify_enabled"} <= set(
        refused
    )


def test_a_refused_database_url_is_shown_without_its_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FLEETWATCH_DATABASE_URL", "mysql://fleet:hunter2@db.example/fleet")
    with pytest.raises(SettingsError) as excinfo:
        load_settings()
    message = str(excinfo.value)
    assert "hunter2" not in message
    assert "mysql://fleet:***@db.example/fleet" in message


def test_the_config_file_takes_the_plain_forms_as_text_and_lists_as_toml(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "fleetwatch.toml"
    config.write_text(
        'notify_allow_hosts = "127.0.0.1, 10.0.0.0/8"\n'
        "health_xid_unhealthy = [48, 79]\n"
        'notify_rate_limits = { slack = "1/1s" }\n'
        'alerts_enabled = "off"\n'
    )
    monkeypatch.setenv("FLEETWATCH_CONFIG_FILE", str(config))
    settings = load_settings()
    assert settings.notify_allow_hosts == ["127.0.0.1", "10.0.0.0/8"]
    assert settings.health_xid_unhealthy == [48, 79]
    assert settings.notify_rate_limits == {"slack": "1/1s"}
    assert settings.alerts_enabled is False


def test_a_config_file_that_is_not_toml_is_named_with_the_form_expected(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text("port = = 1\n")
    monkeypatch.setenv("FLEETWATCH_CONFIG_FILE", str(broken))
    with pytest.raises(SettingsError) as excinfo:
        load_settings()
    message = str(excinfo.value)
    assert f"FLEETWATCH_CONFIG_FILE: {broken} is not valid TOML" in message
    assert "expected a TOML file of settings" in message


def _line_of(message: str, variable: str) -> str:
    """The line of a SettingsError message about ``variable``."""
    lines = [line.strip() for line in message.splitlines() if f"{variable}:" in line]
    assert len(lines) == 1, message
    return lines[0]
