"""The alerting JSON API through a real HTTP server on Postgres and SQLite: rules (create,
validation, preview, edit, enable/disable, delete), alerts (list, detail, ack) and silences."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.factories import batch, evaluate_at, gpu, iso, sample, store_payload, wipe_alerts
from tests.live_server import LiveServer

HOT = {"kind": "threshold", "target": "gpu", "metric": "temp_c", "op": ">", "threshold": 85}


@pytest.fixture
def api(server: LiveServer, db_url: str) -> Iterator[str]:
    """The server's ``/api/v1`` URL, with node-a's GPU 1 at 90 °C stored; alert tables wiped
    after."""
    now = datetime.now(UTC)
    gpus = [gpu(0), gpu(1)]
    payload = batch("node-a", gpus=gpus, samples_per_gpu=0)
    payload["samples"] = [sample(gpus[0], now, temp_c=50), sample(gpus[1], now, temp_c=90)]
    store_payload(db_url, payload, received_at=now)
    yield f"{server.url}/api/v1"
    wipe_alerts(db_url)


def post(url: str, body: Any = None) -> httpx.Response:
    """POST JSON."""
    return httpx.post(url, json=body, timeout=30)


def test_create_get_list_and_reject_a_duplicate_name(api: str) -> None:
    created = post(f"{api}/rules", {"name": "hot", "for": 300, "condition": HOT})
    again = post(f"{api}/rules", {"name": "hot", "condition": HOT})

    assert created.status_code == 201, created.text
    body = created.json()
    assert (body["name"], body["kind"], body["severity"], body["enabled"]) == (
        "hot",
        "threshold",
        "warning",
        True,
    )
    assert body["spec"]["for"] == "5m"
    assert again.status_code == 409
    assert again.json()["detail"] == "an alert rule named 'hot' already exists"
    assert [r["name"] for r in httpx.get(f"{api}/rules").json()] == ["hot"]
    assert httpx.get(f"{api}/rules/hot").json()["spec"]["condition"]["threshold"] == 85


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        (
            {"name": "x", "condition": {**HOT, "metric": "tmp"}},
            ["condition", "threshold", "metric"],
        ),
        ({"name": "x", "condition": {**HOT, "op": "=>"}}, ["condition", "threshold", "op"]),
        ({"name": "x", "for": "soon", "condition": HOT}, ["for"]),
        ({"name": "x y", "condition": HOT}, ["name"]),
        (
            {"name": "x", "condition": {"kind": "event", "min_count": 0}},
            ["condition", "event", "min_count"],
        ),
        ({"name": "x", "condition": {"kind": "nope"}}, ["condition"]),
        ({"name": "x", "runbook_url": "javascript:x", "condition": HOT}, ["runbook_url"]),
    ],
)
def test_an_invalid_rule_is_422_naming_the_field(
    api: str, body: dict[str, Any], loc: list[str]
) -> None:
    response = post(f"{api}/rules", body)

    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", *loc]


def test_preview_shows_matching_entities_and_their_state_without_storing(api: str) -> None:
    response = post(f"{api}/rules/preview", {"name": "hot", "for": "1m", "condition": HOT})

    assert response.status_code == 200, response.text
    (entity,) = response.json()
    assert (entity["entity"], entity["value"], entity["condition"], entity["state"]) == (
        "node-a GPU 1",
        90.0,
        True,
        "pending",
    )
    assert entity["summary"] == "hot on node-a GPU 1"
    assert httpx.get(f"{api}/rules").json() == []


def test_edit_rename_disable_enable_and_delete(api: str) -> None:
    post(f"{api}/rules", {"name": "hot", "condition": HOT})

    renamed = httpx.put(
        f"{api}/rules/hot", json={"name": "hotter", "severity": "critical", "condition": HOT}
    )
    disabled = post(f"{api}/rules/hotter/disable")
    enabled = post(f"{api}/rules/hotter/enable")
    deleted = httpx.delete(f"{api}/rules/hotter")

    assert renamed.status_code == 200 and renamed.json()["severity"] == "critical"
    assert disabled.json()["enabled"] is False and enabled.json()["enabled"] is True
    assert deleted.status_code == 204
    assert httpx.get(f"{api}/rules/hotter").status_code == 404
    assert httpx.delete(f"{api}/rules/hotter").status_code == 404
    assert post(f"{api}/rules/hotter/mute").status_code == 422


def test_alerts_list_detail_ack_and_filters(api: str, db_url: str) -> None:
    post(
        f"{api}/rules",
        {
            "name": "hot",
            "owner_team": "gpu-ops",
            "runbook": "gpu-temperature-high",
            "summary": "{hostname} GPU {gpu_index} at {value} °C",
            "condition": HOT,
        },
    )
    evaluate_at(db_url, datetime.now(UTC))

    (alert,) = httpx.get(f"{api}/alerts", params={"state": "firing"}).json()
    ack = post(f"{api}/alerts/{alert['id']}/ack", {"owner": "alice", "note": "on it"})
    detail = httpx.get(f"{api}/alerts/{alert['id']}").json()

    assert (alert["rule"], alert["state"], alert["summary"], alert["runbook"]) == (
        "hot",
        "firing",
        "node-a GPU 1 at 90 °C",
        "gpu-temperature-high",
    )
    assert alert["labels"]["gpu_index"] == "1" and alert["labels"]["alertname"] == "hot"
    assert ack.status_code == 201 and ack.json()["owner"] == "alice"
    assert detail["acked"] is True
    assert [(e["from_state"], e["to_state"]) for e in detail["events"]] == [("inactive", "firing")]
    assert [a["note"] for a in detail["acks"]] == ["on it"]
    assert httpx.get(f"{api}/alerts", params={"state": "resolved"}).json() == []
    assert httpx.get(f"{api}/alerts", params={"owner_team": "storage"}).json() == []
    assert httpx.get(f"{api}/alerts", params={"state": "gone"}).status_code == 422
    assert httpx.get(f"{api}/alerts/999999").status_code == 404
    assert post(f"{api}/alerts/{alert['id']}/ack", {"note": "x"}).status_code == 422

    post(f"{api}/rules/hot/disable")
    late = post(f"{api}/alerts/{alert['id']}/ack", {"owner": "bob"})
    assert late.status_code == 400
    assert (
        late.json()["detail"] == f"alert {alert['id']} is resolved; only pending or firing alerts"
    )


def test_silences_create_list_expire_and_validate(api: str, db_url: str) -> None:
    post(f"{api}/rules", {"name": "hot", "condition": HOT})
    evaluate_at(db_url, datetime.now(UTC))
    ends = iso(datetime.now(UTC) + timedelta(hours=2))

    created = post(
        f"{api}/silences",
        {
            "matchers": [
                {"name": "alertname", "op": "=", "value": "hot"},
                {"name": "hostname", "op": "=~", "value": "node-.*"},
            ],
            "ends_at": ends,
            "created_by": "alice",
            "comment": "reboot",
        },
    )
    silenced = httpx.get(f"{api}/alerts").json()[0]["silenced"]
    expired = post(f"{api}/silences/{created.json()['id']}/expire")

    assert created.status_code == 201, created.text
    assert silenced is True
    assert expired.status_code == 200
    assert httpx.get(f"{api}/silences").json() == []
    assert len(httpx.get(f"{api}/silences", params={"include_expired": True}).json()) == 1
    assert httpx.get(f"{api}/alerts").json()[0]["silenced"] is False
    bad_regex = post(
        f"{api}/silences",
        {"matchers": [{"name": "a", "op": "=~", "value": "("}], "ends_at": ends, "created_by": "a"},
    )
    naive = post(
        f"{api}/silences",
        {
            "matchers": [{"name": "a", "value": "b"}],
            "ends_at": "2030-01-01T00:00:00",
            "created_by": "a",
        },
    )
    backwards = post(
        f"{api}/silences",
        {
            "matchers": [{"name": "a", "value": "b"}],
            "starts_at": ends,
            "ends_at": iso(datetime.now(UTC)),
            "created_by": "a",
        },
    )
    assert bad_regex.status_code == 422
    assert bad_regex.json()["detail"][0]["loc"] == ["body", "matchers", 0, "value"]
    assert naive.status_code == 422 and naive.json()["detail"][0]["loc"] == ["body", "ends_at"]
    assert backwards.status_code == 400
    assert post(f"{api}/silences/424242/expire").status_code == 404


def test_inhibit_rules_put_get_delete_and_the_alerts_they_mute(api: str, db_url: str) -> None:
    post(f"{api}/rules", {"name": "hot", "condition": HOT})
    post(f"{api}/rules", {"name": "warm", "condition": {**HOT, "threshold": 60}})
    evaluate_at(db_url, datetime.now(UTC))
    rule = {
        "name": "hot-mutes-warm",
        "source_matchers": ['alertname="hot"'],
        "target_matchers": [{"name": "alertname", "op": "=", "value": "warm"}],
        "equal": ["hostname", "gpu_uuid"],
    }

    created = httpx.put(f"{api}/inhibit-rules/hot-mutes-warm", json=rule)
    again = httpx.put(f"{api}/inhibit-rules/hot-mutes-warm", json=rule)
    renamed = httpx.put(f"{api}/inhibit-rules/other", json=rule)
    bad = httpx.put(
        f"{api}/inhibit-rules/x", json={**rule, "name": "x", "source_matchers": ["hot"]}
    )
    alerts = {a["rule"]: a for a in httpx.get(f"{api}/alerts").json()}

    assert created.status_code == 201, created.text
    assert created.json()["spec"]["source_matchers"] == [
        {"name": "alertname", "op": "=", "value": "hot"}
    ]
    assert again.status_code == 200 and again.json() == created.json()
    assert renamed.status_code == 422
    assert renamed.json()["detail"][0]["loc"] == ["body", "name"]
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"][:2] == ["body", "source_matchers"]
    assert alerts["warm"]["inhibited_by"] == [alerts["hot"]["id"]]
    assert alerts["hot"]["inhibited_by"] == []
    detail = httpx.get(f"{api}/alerts/{alerts['warm']['id']}").json()
    assert detail["inhibited_by"] == [alerts["hot"]["id"]]
    assert [r["name"] for r in httpx.get(f"{api}/inhibit-rules").json()] == ["hot-mutes-warm"]

    assert httpx.delete(f"{api}/inhibit-rules/hot-mutes-warm").status_code == 204
    assert httpx.get(f"{api}/inhibit-rules/hot-mutes-warm").status_code == 404
    assert httpx.delete(f"{api}/inhibit-rules/hot-mutes-warm").status_code == 404
    warm = [a for a in httpx.get(f"{api}/alerts").json() if a["rule"] == "warm"]
    assert warm[0]["inhibited_by"] == []
