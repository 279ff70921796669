"""A rule may not read further back than the server keeps what it reads: raw samples for
``FLEETWATCH_RAW_RETENTION_DAYS``, events and incidents for ``FLEETWATCH_RETENTION_DAYS``.
Refused with the field and the setting through the API, the rules page and rule files; a
stored rule that a shortened retention cuts short is named at start-up. HTTP cases run through
a real server on Postgres and SQLite."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
import yaml

from app.alerts.rule_reach import Kept, beyond, stored_beyond
from app.alerts.rulefiles import RuleFilesInvalid, load_all
from app.alerts.spec import RuleSpec
from app.db import make_engine, make_session_factory, session_scope
from tests.app.test_cli import fleetwatch
from tests.conftest import make_settings
from tests.factories import wipe_alerts
from tests.live_server import LiveServer

DAY = 86400.0
#: Raw samples kept 2 days, events 8 days (the incident escalation window needs 7).
KEPT = Kept(samples_s=2 * DAY, events_s=8 * DAY)


def rule(condition: dict[str, Any], name: str = "far") -> dict[str, Any]:
    return {"name": name, "condition": condition}


def hot(window: str, aggregation: str = "avg") -> dict[str, Any]:
    return {
        "kind": "threshold",
        "target": "gpu",
        "metric": "temp_c",
        "aggregation": aggregation,
        "window": window,
        "op": ">",
        "threshold": 85,
    }


def xids(window: str, count: str = "occurrences") -> dict[str, Any]:
    return {"kind": "event", "event_kinds": ["xid"], "window": window, "count": count}


def far(condition: dict[str, Any]) -> list[tuple[tuple[str, ...], str]]:
    return beyond(RuleSpec.model_validate(rule(condition)), KEPT)


def test_sample_windows_longer_than_the_raw_retention_are_named_with_the_setting() -> None:
    [(loc, message)] = far(hot("3d"))
    assert loc == ("condition", "window")
    assert message == (
        "window 3 d reaches back further than raw samples are kept "
        "(FLEETWATCH_RAW_RETENTION_DAYS=2, 2 d): shorten it or keep them longer"
    )
    rate = {
        "kind": "rate",
        "metric": "ecc_corrected_aggregate_count",
        "window": "49h",
        "threshold": 1,
    }
    assert [loc for loc, _ in far(rate)] == [("condition", "window")]
    absent = {"kind": "absence", "target": "metric", "metric": "power_w", "after": "3d"}
    [(loc, message)] = far(absent)
    assert loc == ("condition", "after") and message.startswith("after 3 d reaches back")


def test_windows_within_what_is_kept_and_windows_never_read_pass() -> None:
    assert far(hot("2d")) == []  # exactly what is kept
    node = {"kind": "threshold", "target": "node", "metric": "gpu_missing_count"}
    assert far({**node, "aggregation": "max", "window": "8d", "op": ">", "threshold": 0}) == []
    assert far(hot("30d", aggregation="last")) == []  # last reads the newest sample only
    assert far({"kind": "absence", "target": "node", "after": "30d"}) == []  # node.last_seen_at
    assert far({"kind": "health", "states": ["unhealthy"]}) == []
    assert far(xids("8d")) == []


def test_a_window_a_fraction_past_the_limit_is_said_in_seconds() -> None:
    [(_, message)] = far(hot("172800.5s"))
    assert message.startswith("window 172800.5 s reaches back further than raw samples are kept")
    assert "2 d): shorten" not in message and "172800 s): shorten" in message


def test_event_windows_are_held_against_the_event_retention() -> None:
    [(loc, message)] = far(xids("9d"))
    assert loc == ("condition", "window")
    assert "further than events are kept (FLEETWATCH_RETENTION_DAYS=8, 8 d)" in message
    [(_, message)] = far(xids("9d", count="incidents"))
    assert "further than incidents are kept" in message


def test_rule_files_name_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    ok = rule(hot("1d"), name="near")
    path.write_text(yaml.safe_dump({"rules": [ok, rule(hot("3d"))]}, sort_keys=False))

    with pytest.raises(RuleFilesInvalid) as caught:
        load_all(path, kept=KEPT)

    [error] = caught.value.errors
    assert (error.path, error.where) == (str(path), "far.condition.window")
    lines = path.read_text().splitlines()
    assert error.line == lines.index("    window: 3d") + 1  # the field's line, not the rule's
    assert "FLEETWATCH_RAW_RETENTION_DAYS=2" in error.message
    assert [spec.name for spec, _ in load_all(path)[0]] == ["near", "far"]  # no limits given


def test_cli_apply_refuses_the_file_by_the_settings(tmp_path: Path, postgres_url: str) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"rules": [rule(hot("3d"))]}))
    env = {"FLEETWATCH_RAW_RETENTION_DAYS": "2"}

    done = fleetwatch("rules", "apply", str(path), "--database-url", postgres_url, env=env)

    assert done.returncode == 1
    line = path.read_text().splitlines().index("    window: 3d") + 1
    assert f"{path}:{line}: far.condition.window: window 3 d reaches back" in done.stderr


@pytest.fixture
def short(db_url: str, tmp_path: Path) -> Iterator[LiveServer]:
    """A server keeping raw samples 2 days and events 8 days."""
    live = LiveServer(make_settings(db_url, tmp_path, raw_retention_days=2, retention_days=8))
    live.start()
    yield live
    live.stop()
    wipe_alerts(db_url)


def test_the_api_refuses_with_422_naming_the_field(short: LiveServer) -> None:
    url = f"{short.url}/api/v1/rules"
    created = httpx.post(url, json=rule(hot("3d")), timeout=30)
    previewed = httpx.post(f"{url}/preview", json=rule(xids("9d")), timeout=30)
    ok = httpx.post(url, json=rule(hot("1d")), timeout=30)
    replaced = httpx.put(f"{url}/far", json=rule(hot("50h")), timeout=30)

    assert created.status_code == 422, created.text
    [detail] = created.json()["detail"]
    assert detail["loc"] == ["body", "condition", "window"]
    assert "FLEETWATCH_RAW_RETENTION_DAYS=2" in detail["msg"]
    assert previewed.status_code == 422
    assert "FLEETWATCH_RETENTION_DAYS=8" in previewed.json()["detail"][0]["msg"]
    assert ok.status_code == 201, ok.text
    assert replaced.status_code == 422
    assert httpx.get(f"{url}/far", timeout=30).json()["spec"]["condition"]["window"] == "1d"


def test_a_disabled_rule_too_long_for_a_shortened_retention_cannot_be_enabled(
    db_url: str, tmp_path: Path
) -> None:
    wide = LiveServer(make_settings(db_url, tmp_path))  # raw samples kept 7 days
    wide.start()
    try:
        made = httpx.post(
            f"{wide.url}/api/v1/rules", json={**rule(hot("3d")), "enabled": False}, timeout=30
        )
        assert made.status_code == 201, made.text
    finally:
        wide.stop()
    narrow = LiveServer(make_settings(db_url, tmp_path, raw_retention_days=2, retention_days=8))
    narrow.start()
    try:
        api = httpx.post(f"{narrow.url}/api/v1/rules/far/enable", timeout=30)
        page = httpx.post(
            f"{narrow.url}/rules/far/enable",
            headers={"content-type": "application/x-www-form-urlencoded"},
            timeout=30,
        )
        still = httpx.get(f"{narrow.url}/api/v1/rules/far", timeout=30).json()
    finally:
        narrow.stop()
        wipe_alerts(db_url)
    assert api.status_code == 409
    assert api.json()["detail"].startswith(
        "cannot enable it: rule far: condition.window: window 3 d reaches back further"
    )
    assert page.status_code == 409
    assert still["enabled"] is False


def test_the_rules_page_shows_the_error_beside_the_field(short: LiveServer) -> None:
    document = yaml.safe_dump(rule(hot("3d")))
    response = httpx.post(
        f"{short.url}/rules",
        content=urlencode({"document": document}),
        headers={"content-type": "application/x-www-form-urlencoded"},
        timeout=30,
    )

    assert response.status_code == 422
    assert '<code class="error-field">condition.window</code>: window 3 d reaches back' in (
        response.text
    )
    assert httpx.get(f"{short.url}/api/v1/rules/far", timeout=30).status_code == 404


def test_stored_rules_cut_short_by_a_shorter_retention_are_logged_at_start_up(
    db_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    wide = LiveServer(make_settings(db_url, tmp_path))  # raw samples kept 7 days
    wide.start()
    try:
        made = httpx.post(f"{wide.url}/api/v1/rules", json=rule(hot("3d")), timeout=30)
        assert made.status_code == 201, made.text
    finally:
        wide.stop()
    engine = make_engine(db_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            assert stored_beyond(session, KEPT) == [
                "rule far: condition.window: window 3 d reaches back further than raw samples "
                "are kept (FLEETWATCH_RAW_RETENTION_DAYS=2, 2 d): shorten it or keep them longer"
            ]
        with caplog.at_level(logging.WARNING, logger="app.main"):
            narrow = LiveServer(
                make_settings(db_url, tmp_path, raw_retention_days=2, retention_days=8),
                run_jobs=True,  # the process that evaluates rules says so
            )
            narrow.start()
            narrow.stop()
        assert any(
            r.name == "app.main" and "rule far: condition.window" in r.getMessage()
            for r in caplog.records
        )
    finally:
        engine.dispose()
        wipe_alerts(db_url)
