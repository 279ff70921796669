"""Rules that quarantine, on Postgres and SQLite: an ``automatic`` rule quarantines the node of
each alert that fires (drain logged with its command) within the circuit breaker's limits;
past them the quarantine is blocked, the breaker stays open until a person resets it, and the
node gets a ``quarantine_blocked`` event that the default rule pages; ``dry_run`` records what
would have run and changes nothing; ``recommend`` records a recommendation; silenced and
self-test alerts and nodes out of service are skipped."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.alerts.rulefiles import DEFAULT_RULES_DIR, load_path
from app.remediation import automation
from app.remediation.service import Backends
from tests.app.helpers import post_batch
from tests.conftest import make_settings
from tests.dbs import session_factory
from tests.factories import add_rules, batch, create_token, evaluate_at, wipe_alerts
from tests.live_server import LiveServer

ECHO = "/bin/echo"
HOT = {"kind": "threshold", "target": "gpu", "metric": "temp_c", "op": ">", "threshold": 85}


def _rule(mode: str) -> dict[str, Any]:
    return {
        "name": f"hot-{mode}",
        "severity": "critical",
        "condition": HOT,
        "action": "quarantine",
        "action_mode": mode,
    }


@pytest.fixture
def url(db_url: str) -> Iterator[str]:
    """``db_url`` with the alert tables wiped after the test."""
    yield db_url
    wipe_alerts(db_url)


def _fleet(live: LiveServer, url: str, hosts: list[str], cluster: str = "a") -> None:
    """``hosts`` reporting one GPU each at 90 °C, labelled ``cluster``."""
    for host in hosts:
        token = create_token(url, host)
        payload = batch(host, gpus=1, labels={"cluster": cluster})
        for s in payload["samples"]:
            s["temp_c"] = 90
        assert post_batch(live.url, token, payload).status_code == 200


def _decide(url: str, limits: automation.Limits) -> list[tuple[str | None, str]]:
    with session_factory(url) as factory:
        made = automation.run_due(factory, backends=Backends(scontrol=ECHO), limits=limits)
    return sorted((d.hostname, d.outcome) for d in made)


def _state(live: LiveServer, host: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{live.url}/api/v1/nodes/{host}/lifecycle").json()
    return body


@pytest.fixture
def live(url: str, tmp_path: Path) -> Iterator[LiveServer]:
    server = LiveServer(make_settings(url, tmp_path, slurm_scontrol=ECHO))
    server.start()
    yield server
    server.stop()


def test_automatic_quarantine_within_the_breaker_then_blocked_and_paged(
    live: LiveServer, url: str
) -> None:
    hosts = ["n1", "n2", "n3", "n4"]
    _fleet(live, url, hosts)
    add_rules(url, _rule("automatic"))
    now = datetime.now(UTC)
    evaluate_at(url, now)
    limits = automation.Limits(max_nodes=2, max_pct=100.0, window_s=3600, group_label="cluster")
    decided = _decide(url, limits)
    assert [o for _, o in decided].count("quarantined") == 2
    assert [o for _, o in decided].count("blocked") == 2
    quarantined = [h for h, o in decided if o == "quarantined"]
    blocked = [h for h, o in decided if o == "blocked"]
    for host in quarantined:
        state = _state(live, host)
        assert (state["state"], state["cause"], state["cause_ref"]) == (
            "quarantined",
            "rule",
            "hot-automatic",
        )
        assert state["actor"] == "fleetwatch rule hot-automatic"
        assert state["actions"][0]["command"][:4] == [
            ECHO,
            "update",
            f"NodeName={host}",
            "State=DRAIN",
        ]
    for host in blocked:
        assert _state(live, host)["state"] == "in_service"
    report = httpx.get(f"{live.url}/api/v1/automation").json()
    assert report["breaker"]["open"] is True
    assert (
        "3 automatic quarantines within 3600 s would exceed the limit of 2"
        in report["breaker"]["reason"]
    )
    details = {d["hostname"]: d["detail"] for d in report["decisions"] if d["outcome"] == "blocked"}
    assert any(d.startswith("the circuit breaker tripped") for d in details.values())
    assert any(d.startswith("the circuit breaker is open") for d in details.values())
    assert _decide(url, limits) == []  # one decision per firing alert

    # The blocked nodes page through the default rule.
    ((spec, _),) = [
        (s, n)
        for s, n in load_path(DEFAULT_RULES_DIR, source_prefix="defaults")
        if s.name == "node-quarantine-blocked"
    ]
    add_rules(url, spec.document())
    evaluate_at(url, now + timedelta(seconds=5))
    alerts = httpx.get(f"{live.url}/api/v1/alerts", params={"state": "firing"}).json()
    paged = sorted(
        a["labels"]["hostname"] for a in alerts if a["rule"] == "node-quarantine-blocked"
    )
    assert paged == sorted(blocked)

    # A person resets the breaker: the next alert that fires is acted on again.
    reset = httpx.post(f"{live.url}/api/v1/automation/breaker/reset", json={"actor": "alice"})
    assert reset.status_code == 200
    assert (
        reset.json()["breaker"]["open"] is False and reset.json()["breaker"]["reset_by"] == "alice"
    )
    # The quarantines before the reset no longer count: the same limits let the next one go.
    _fleet(live, url, ["n5"])
    evaluate_at(url, now + timedelta(seconds=10))
    assert _decide(url, limits) == [("n5", "quarantined")]


def test_the_breaker_trips_on_a_share_of_a_group(live: LiveServer, url: str) -> None:
    _fleet(live, url, ["a1", "a2", "a3", "a4"], cluster="a")
    _fleet(live, url, ["b1"], cluster="b")
    add_rules(url, _rule("automatic"))
    evaluate_at(url, datetime.now(UTC))
    limits = automation.Limits(max_nodes=100, max_pct=50.0, window_s=3600, group_label="cluster")
    decided = dict(_decide(url, limits))
    outcomes = sorted(o for h, o in decided.items() if h.startswith("a"))
    assert outcomes == ["blocked", "blocked", "quarantined", "quarantined"]  # 3 of 4 > 50 %
    breaker = httpx.get(f"{live.url}/api/v1/automation").json()["breaker"]
    assert "of the 4 nodes of cluster=a" in breaker["reason"] and "50 %" in breaker["reason"]


def test_dry_run_records_what_would_run_and_changes_nothing(live: LiveServer, url: str) -> None:
    _fleet(live, url, ["n1"])
    add_rules(url, _rule("dry_run"))
    evaluate_at(url, datetime.now(UTC))
    assert _decide(url, automation.Limits()) == [("n1", "dry_run")]
    (decision,) = httpx.get(f"{live.url}/api/v1/automation").json()["decisions"]
    alerts = httpx.get(f"{live.url}/api/v1/alerts", params={"state": "firing"}).json()
    (alert,) = alerts
    assert decision["detail"] == (
        f"would quarantine and run: {ECHO} update NodeName=n1 State=DRAIN "
        f"'Reason=fleetwatch: alert {alert['id']} (hot-dry_run) firing'"
    )
    state = _state(live, "n1")
    assert state["state"] == "in_service" and state["actions"] == [] and state["transitions"] == []


def test_recommend_records_and_changes_nothing(live: LiveServer, url: str) -> None:
    _fleet(live, url, ["n1"])
    add_rules(url, _rule("recommend"))
    evaluate_at(url, datetime.now(UTC))
    assert _decide(url, automation.Limits()) == [("n1", "recommended")]
    assert _state(live, "n1")["state"] == "in_service"


def test_silenced_alerts_and_nodes_out_of_service_are_skipped(live: LiveServer, url: str) -> None:
    _fleet(live, url, ["quiet", "away"])
    silence = httpx.post(
        f"{live.url}/api/v1/silences",
        json={
            "matchers": [{"name": "hostname", "value": "quiet"}],
            "ends_at": (datetime.now(UTC) + timedelta(hours=1)).isoformat(),
            "created_by": "ops",
            "comment": "maintenance: BIOS update",
        },
    )
    assert silence.status_code == 201, silence.text
    moved = httpx.post(
        f"{live.url}/api/v1/nodes/away/lifecycle",
        json={"to_state": "quarantined", "reason": "by hand"},
    )
    assert moved.status_code == 200
    add_rules(url, _rule("automatic"))
    evaluate_at(url, datetime.now(UTC))
    assert _decide(url, automation.Limits(max_pct=100.0)) == [
        ("away", "skipped"),
        ("quiet", "skipped"),
    ]
    details = {
        d["hostname"]: d["detail"]
        for d in httpx.get(f"{live.url}/api/v1/automation").json()["decisions"]
    }
    assert details == {
        "quiet": "the alert is silenced",
        "away": "the node is quarantined already",
    }
    assert _state(live, "quiet")["state"] == "in_service"


def test_the_alert_page_offers_the_quarantine_in_one_click(live: LiveServer, url: str) -> None:
    _fleet(live, url, ["n1"])
    add_rules(url, _rule("recommend"))
    evaluate_at(url, datetime.now(UTC))
    (alert,) = httpx.get(f"{live.url}/api/v1/alerts", params={"state": "firing"}).json()
    page = httpx.get(f"{live.url}/alerts/{alert['id']}").text
    assert 'id="accept-alert-quarantine"' in page and "action_mode: recommend" in page
    clicked = httpx.post(
        f"{live.url}/nodes/n1/lifecycle",
        data={
            "to_state": "quarantined",
            "cause": "alert",
            "cause_ref": str(alert["id"]),
            "reason": f"alert {alert['id']} (hot-recommend) firing",
            "back": f"/alerts/{alert['id']}#alert-quarantine",
        },
    )
    assert clicked.status_code == 303
    state = _state(live, "n1")
    assert (state["state"], state["cause"], state["cause_ref"]) == (
        "quarantined",
        "alert",
        str(alert["id"]),
    )
    page = httpx.get(f"{live.url}/alerts/{alert['id']}").text
    assert 'id="accept-alert-quarantine"' not in page and ">Quarantined<" in page


def test_callers_cannot_claim_automations_causes_or_a_mode_without_action(
    live: LiveServer, url: str
) -> None:
    _fleet(live, url, ["n1"])
    for cause in ("rule", "system"):
        refused = httpx.post(
            f"{live.url}/api/v1/nodes/n1/lifecycle",
            json={"to_state": "quarantined", "reason": "x", "cause": cause},
        )
        assert refused.status_code == 422 and refused.json()["detail"][0]["loc"][-1] == "cause"
    rule = {"name": "half", "condition": HOT, "action_mode": "automatic"}
    made = httpx.post(f"{live.url}/api/v1/rules", json=rule)
    assert made.status_code == 422 and "action_mode needs an action" in made.text
