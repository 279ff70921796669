"""Settings: environment, config file, defaults, and errors that name the setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.config import SettingsError, load_settings
from app.health.rules import rules_from_settings


def test_the_default_database_is_a_sqlite_file_in_the_data_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("FLEETWATCH_DATABASE_URL", raising=False)
    monkeypatch.setenv("FLEETWATCH_DATA_DIR", str(tmp_path))
    settings = load_settings()
    assert settings.effective_database_url == f"sqlite:///{tmp_path / 'fleetwatch.db'}"


def test_environment_variables_override_the_config_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "fleetwatch.toml"
    config.write_text('port = 9001\nstale_after_s = 30\nhost = "0.0.0.0"\n')
    monkeypatch.setenv("FLEETWATCH_CONFIG_FILE", str(config))
    monkeypatch.setenv("FLEETWATCH_PORT", "9002")
    settings = load_settings()
    assert settings.port == 9002
    assert settings.stale_after_s == 30
    assert settings.host == "0.0.0.0"


@pytest.mark.parametrize(
    ("name", "value", "named"),
    [
        ("FLEETWATCH_PORT", "eighty", "FLEETWATCH_PORT"),
        ("FLEETWATCH_PORT", "70000", "FLEETWATCH_PORT"),
        ("FLEETWATCH_DATABASE_URL", "mysql://x/y", "FLEETWATCH_DATABASE_URL"),
        ("FLEETWATCH_DATABASE_URL", "not a url", "FLEETWATCH_DATABASE_URL"),
        ("FLEETWATCH_STALE_AFTER_S", "-1", "FLEETWATCH_STALE_AFTER_S"),
        ("FLEETWATCH_INGEST_MAX_BYTES", "12", "FLEETWATCH_INGEST_MAX_BYTES"),
        ("FLEETWATCH_RETENTION_DAYS", "0", "FLEETWATCH_RETENTION_DAYS"),
        ("FLEETWATCH_LOG_LEVEL", "loud", "FLEETWATCH_LOG_LEVEL"),
    ],
)
def test_a_bad_setting_stops_start_up_with_its_name(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, named: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as excinfo:
        load_settings()
    assert named in str(excinfo.value)


def test_a_missing_or_broken_config_file_is_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FLEETWATCH_CONFIG_FILE", str(tmp_path / "absent.toml"))
    with pytest.raises(SettingsError, match="FLEETWATCH_CONFIG_FILE"):
        load_settings()
    broken = tmp_path / "broken.toml"
    broken.write_text("port = = 1\n")
    monkeypatch.setenv("FLEETWATCH_CONFIG_FILE", str(broken))
    with pytest.raises(SettingsError):
        load_settings()


def test_an_unknown_key_in_the_config_file_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "fleetwatch.toml"
    config.write_text("prot = 9000\n")
    monkeypatch.setenv("FLEETWATCH_CONFIG_FILE", str(config))
    with pytest.raises(SettingsError, match="PROT"):
        load_settings()


def test_an_incident_longest_span_under_its_quiet_period_stops_start_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FLEETWATCH_INCIDENT_QUIET_S", "600")
    monkeypatch.setenv("FLEETWATCH_INCIDENT_MAX_S", "300")
    with pytest.raises(SettingsError) as err:
        load_settings()
    assert "FLEETWATCH_INCIDENT_MAX_S (300 s) is shorter than" in str(err.value)
    monkeypatch.setenv("FLEETWATCH_INCIDENT_MAX_S", "1800")
    settings = load_settings()
    assert rules_from_settings(settings).burst_max_s == 1800


def test_an_event_retention_shorter_than_the_escalation_window_stops_start_up_naming_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The escalation ladder counts repeated faults in the stored events: two days of events
    under a 7-day window would quietly stop escalating."""
    monkeypatch.setenv("FLEETWATCH_RETENTION_DAYS", "2")
    with pytest.raises(SettingsError) as err:
        load_settings()
    message = str(err.value)
    assert "FLEETWATCH_RETENTION_DAYS (2 days)" in message
    assert "FLEETWATCH_HEALTH_ESCALATION_WINDOW_S (604800 s)" in message
    monkeypatch.setenv("FLEETWATCH_HEALTH_ESCALATION_WINDOW_S", "86400")
    assert load_settings().retention_days == 2  # the window fits: accepted
