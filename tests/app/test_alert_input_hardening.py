"""Hostile input to alerting: RE2 matchers (no catastrophic backtracking), Prometheus label
names, silence durations past a year, NUL and lone surrogates in silences and acks, non-finite
rule numbers, and rule files with duplicate names or no rules. HTTP cases run through a real
server on Postgres and SQLite."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from app.alerts.rulefiles import RuleFilesInvalid, load_path
from app.alerts.silences import check_regex, matches
from tests.app.test_cli import fleetwatch
from tests.app.test_rule_files import GOOD
from tests.factories import batch, evaluate_at, gpu, iso, sample, store_payload, wipe_alerts
from tests.live_server import LiveServer

HOT = {"kind": "threshold", "target": "gpu", "metric": "temp_c", "op": ">", "threshold": 85}
EVIL = "(.+)+x"


@pytest.fixture
def site(server: LiveServer, db_url: str) -> Iterator[str]:
    """The server's base URL with node-a's GPU 0 at 90 °C and a firing-or-pending ``hot`` alert;
    alert tables wiped after."""
    now = datetime.now(UTC)
    g = gpu(0)
    payload = batch("node-a", gpus=[g], samples_per_gpu=0)
    payload["samples"] = [sample(g, now, temp_c=90)]
    store_payload(db_url, payload, received_at=now)
    created = httpx.post(
        f"{server.url}/api/v1/rules", json={"name": "hot", "condition": HOT}, timeout=30
    )
    assert created.status_code == 201, created.text
    evaluate_at(db_url, now)
    yield server.url
    wipe_alerts(db_url)


def post_json(url: str, body: Any) -> httpx.Response:
    """POST ``body`` (text sent as is, anything else as JSON that may hold NaN)."""
    content = body if isinstance(body, str) else json.dumps(body)
    headers = {"content-type": "application/json"}
    return httpx.post(url, content=content, headers=headers, timeout=30)


def post_form(url: str, data: list[tuple[str, str]]) -> httpx.Response:
    """POST a urlencoded form, not following the redirect."""
    headers = {"content-type": "application/x-www-form-urlencoded"}
    return httpx.post(url, content=urlencode(data), headers=headers, timeout=30)


def silence(**fields: Any) -> dict[str, Any]:
    """A valid silence body for 2 h, ``fields`` replacing."""
    ends = iso(datetime.now(UTC) + timedelta(hours=2))
    body = {"matchers": [{"name": "alertname", "value": "hot"}], "ends_at": ends}
    return {**body, "created_by": "alice", "comment": "", **fields}


def silence_form(name: str = "alertname", value: str = "hot", **fields: str) -> list[Any]:
    """The /silences form with one matcher and a 2 h duration, ``fields`` replacing."""
    base = {"duration": "2h", "created_by": "alice", "comment": "", **fields}
    matcher = [("matcher_name", name), ("matcher_op", "=~"), ("matcher_value", value)]
    return matcher + list(base.items())


def test_the_backtracking_pattern_matches_a_long_value_in_linear_time() -> None:
    labels = {"hostname": "a" * 10_000}

    assert matches([{"name": "hostname", "op": "=~", "value": EVIL}], labels) is False
    assert matches([{"name": "hostname", "op": "!~", "value": EVIL}], labels) is True
    assert matches([{"name": "hostname", "op": "=~", "value": EVIL}], {"hostname": "ax"}) is True
    assert matches([{"name": "hostname", "op": "=~", "value": "a"}], labels) is False  # anchored


def test_patterns_outside_re2_syntax_are_refused() -> None:
    with pytest.raises(
        ValueError, match=r"not a valid regular expression \(RE2 syntax\): invalid perl"
    ):
        check_regex("(?=x)")
    with pytest.raises(
        ValueError, match=r"not a valid regular expression \(RE2 syntax\): missing \)"
    ):
        check_regex("(")


def test_a_silence_with_the_pathological_matcher_is_created_and_mutes_nothing(site: str) -> None:
    body = silence(matchers=[{"name": "hostname", "op": "=~", "value": EVIL}])

    created = post_json(f"{site}/api/v1/silences", body)
    alerts = httpx.get(f"{site}/api/v1/alerts", timeout=30).json()
    lookahead = post_json(
        f"{site}/api/v1/silences",
        silence(matchers=[{"name": "hostname", "op": "=~", "value": "(?!x)"}]),
    )

    assert created.status_code == 201, created.text
    assert [(a["rule"], a["silenced"]) for a in alerts] == [("hot", False)]
    assert httpx.get(f"{site}/healthz", timeout=30).status_code == 200
    assert lookahead.status_code == 422
    assert lookahead.json()["detail"][0]["loc"] == ["body", "matchers", 0, "value"]


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        (silence(matchers=[{"name": "<script>", "value": "x"}]), ["body", "matchers", 0, "name"]),
        (silence(matchers=[{"name": "0gpu", "value": "x"}]), ["body", "matchers", 0, "name"]),
        (silence(created_by="al\x00ice"), ["body", "created_by"]),
        (silence(comment="reboot\x00"), ["body", "comment"]),
        (silence(matchers=[{"name": "a", "value": "x\x00"}]), ["body", "matchers", 0, "value"]),
    ],
)
def test_bad_silence_fields_are_422_naming_the_field(
    site: str, body: dict[str, Any], loc: list[Any]
) -> None:
    got = post_json(f"{site}/api/v1/silences", body)

    assert got.status_code == 422, got.text
    assert got.json()["detail"][0]["loc"] == loc
    assert httpx.get(f"{site}/api/v1/silences", timeout=30).json() == []


@pytest.mark.parametrize("field", ["created_by", "comment"])
def test_a_lone_surrogate_in_a_silence_is_422(site: str, field: str) -> None:
    text = json.dumps(silence()).replace(f'"{field}": "', f'"{field}": "\\ud800', 1)

    got = post_json(f"{site}/api/v1/silences", text)

    assert got.status_code == 422, got.text
    assert got.json()["detail"][0]["loc"] == ["body", field]


def test_a_comment_keeps_its_newlines(site: str) -> None:
    got = post_json(f"{site}/api/v1/silences", silence(comment="line 1\r\nline 2\ttab"))

    assert got.status_code == 201, got.text
    assert got.json()["comment"] == "line 1\r\nline 2\ttab"


@pytest.mark.parametrize(
    ("body", "field"),
    [({"owner": "bob\x00"}, "owner"), ({"owner": "bob", "note": "\x00"}, "note")],
)
def test_nul_in_an_ack_is_422_naming_the_field(site: str, body: dict[str, str], field: str) -> None:
    (alert,) = httpx.get(f"{site}/api/v1/alerts", timeout=30).json()

    got = post_json(f"{site}/api/v1/alerts/{alert['id']}/ack", body)

    assert got.status_code == 422, got.text
    assert got.json()["detail"][0]["loc"] == ["body", field]
    assert httpx.get(f"{site}/api/v1/alerts/{alert['id']}", timeout=30).json()["acks"] == []


@pytest.mark.parametrize(
    ("form", "field", "message"),
    [
        (silence_form(duration="99999999999d"), "duration", "a duration is at most 365d"),
        (silence_form(duration="366d"), "duration", "a duration is at most 365d"),
        (silence_form(created_by="al\x00ice"), "created_by", "U+0000"),
        (silence_form(comment="x\x00"), "comment", "U+0000"),
        (silence_form(name="<script>"), "matchers.0", "name: Value error, a label name is"),
        (
            silence_form(value="(?=x)"),
            "matchers.0",
            "value: Value error, not a valid regular expression (RE2",
        ),
    ],
)
def test_the_silence_form_refuses_bad_fields_inline(
    site: str, form: list[Any], field: str, message: str
) -> None:
    got = post_form(f"{site}/silences", form)

    assert got.status_code == 422, got.text[:500]
    assert message in got.text
    assert httpx.get(f"{site}/api/v1/silences", timeout=30).json() == []


def test_a_year_long_silence_from_the_form_is_accepted(site: str) -> None:
    got = post_form(f"{site}/silences", silence_form(duration="365d"))

    (stored,) = httpx.get(f"{site}/api/v1/silences", timeout=30).json()
    assert got.status_code == 303
    starts, ends = (datetime.fromisoformat(stored[k]) for k in ("starts_at", "ends_at"))
    assert ends - starts == timedelta(days=365)


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity"])
def test_a_non_finite_threshold_is_422_on_both_backends(site: str, number: str) -> None:
    text = json.dumps({"name": "odd", "condition": HOT}).replace("85", number)

    got = post_json(f"{site}/api/v1/rules", text)

    assert got.status_code == 422, got.text
    assert got.json()["detail"][0]["loc"] == ["body", "condition", "threshold", "threshold"]
    assert [r["name"] for r in httpx.get(f"{site}/api/v1/rules", timeout=30).json()] == ["hot"]


def errors_of(path: Path) -> list[str]:
    """The error lines ``load_path`` raises for ``path``."""
    with pytest.raises(RuleFilesInvalid) as info:
        load_path(path)
    return [str(e) for e in info.value.errors]


@pytest.mark.parametrize("number", [".nan", ".inf", "-.inf"])
def test_a_non_finite_threshold_in_a_rule_file_is_reported_at_its_line(
    tmp_path: Path, number: str
) -> None:
    path = tmp_path / "nan.yaml"
    path.write_text(GOOD.replace("threshold: 85", f"threshold: {number}"))

    assert errors_of(path) == [
        f"{path}:12: rules[0].condition.threshold.threshold: Input should be a finite number"
    ]


def test_a_rule_name_twice_in_one_file_is_reported_at_the_second(tmp_path: Path) -> None:
    path = tmp_path / "twice.yaml"
    path.write_text(GOOD + GOOD.removeprefix("rules:\n"))

    assert errors_of(path) == [f"{path}:13: hot-gpu: rule name already defined at {path}:2"]


@pytest.mark.parametrize(("text", "line"), [("", 1), ("# nothing\n", 1), ("rules: []\n", 1)])
def test_a_file_without_rules_is_an_error_naming_it(tmp_path: Path, text: str, line: int) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text(text)

    assert errors_of(path) == [
        f"{path}:{line}: no rules in this file (expected 'rules:' followed by a list of rules, "
        "and/or 'inhibit_rules:' followed by a list of inhibition rules)"
    ]


def test_a_directory_without_rule_files_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not rules")

    assert errors_of(tmp_path) == [f"{tmp_path}:0: no *.yaml or *.yml files"]


def test_cli_apply_of_an_empty_file_exits_1_naming_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    assert fleetwatch("migrate", "--database-url", url).returncode == 0
    empty = tmp_path / "empty.yaml"
    empty.write_text("")

    got = fleetwatch("rules", "apply", str(empty), "--database-url", url)

    assert got.returncode == 1
    assert got.stderr.splitlines() == [
        f"{empty}:1: no rules in this file (expected 'rules:' followed by a list of rules, "
        "and/or 'inhibit_rules:' followed by a list of inhibition rules)"
    ]
    assert "created" not in got.stdout


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ([("owner", "bob\x00"), ("note", "")], "contains the control character U+0000"),
        ([("owner", "bob"), ("note", "\x00")], "contains the character U+0000, which cannot be"),
    ],
)
def test_nul_in_the_ack_form_is_422_beside_the_field(
    site: str, form: list[tuple[str, str]], message: str
) -> None:
    (alert,) = httpx.get(f"{site}/api/v1/alerts", timeout=30).json()

    got = post_form(f"{site}/alerts/{alert['id']}/ack", form)

    assert got.status_code == 422, got.text[:500]
    assert message in got.text
    assert httpx.get(f"{site}/api/v1/alerts/{alert['id']}", timeout=30).json()["acks"] == []
