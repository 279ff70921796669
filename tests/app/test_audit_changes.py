"""Before/after states in the audit trail, reported by the owning services through
:func:`app.audit.service.note_change`: a rule edit, a channel edit (URL and secret never in the
trail, only that they changed), an inhibition rule, a silence created then expired, a refused
change (no state).
Both backends, over a live server."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.access_helpers import add_agent_token
from tests.conftest import make_settings
from tests.factories import wipe_alerts
from tests.live_server import LiveServer
from tests.notify_helpers import wipe_notify

SECRET_PATH = "/services/T0SECRET/B0SECRET/audit-SECRET-token"


@pytest.fixture
def api(db_url: str, tmp_path: Path) -> Iterator[str]:
    server = LiveServer(make_settings(db_url, tmp_path, notify_allow_hosts=["127.0.0.1"]))
    server.start()
    yield f"{server.url}/api/v1"
    server.stop()
    wipe_alerts(db_url)
    wipe_notify(db_url)


def _last(api: str, action: str) -> dict[str, Any]:
    """The newest audit event whose action is exactly ``action``."""
    events = httpx.get(f"{api}/audit", params={"action": action}).json()
    found = [e for e in events if e["action"] == action]
    assert found, events
    return found[0]


def test_a_rule_edit_keeps_the_rule_before_and_after(api: str) -> None:
    rule = {
        "name": "audit-hot",
        "condition": {"kind": "threshold", "target": "gpu", "metric": "temp_c", "op": ">",
                      "threshold": 85},
        "severity": "warning",
    }  # fmt: skip
    assert httpx.post(f"{api}/rules", json=rule).status_code == 201
    created = _last(api, "POST /api/v1/rules")["detail"]
    assert (created["object"], created["key"], created["before"]) == ("rule", "audit-hot", None)
    spec_before = created["after"]["spec"]
    assert spec_before["condition"]["threshold"] == 85 and spec_before["severity"] == "warning"

    edited = {**rule, "condition": {**rule["condition"], "threshold": 90}, "severity": "critical"}
    assert httpx.put(f"{api}/rules/audit-hot", json=edited).status_code == 200
    event = _last(api, "PUT /api/v1/rules/{name}")
    assert event["target"] == {"name": "audit-hot"} and event["status"] == 200
    detail = event["detail"]
    assert detail["before"] == {"spec": spec_before, "source": "api"}
    spec_after = {
        **spec_before,
        "condition": {**spec_before["condition"], "threshold": 90.0},
        "severity": "critical",
    }
    assert detail["after"] == {"spec": spec_after, "source": "api"}
    assert (detail["object"], detail["key"]) == ("rule", "audit-hot")

    assert httpx.post(f"{api}/rules/audit-hot/disable").status_code == 200
    disabled = _last(api, "POST /api/v1/rules/{name}/{action}")["detail"]
    assert disabled["before"]["spec"]["enabled"] is True
    assert disabled["after"]["spec"] == {**spec_after, "enabled": False}

    assert httpx.delete(f"{api}/rules/audit-hot").status_code == 204
    deleted = _last(api, "DELETE /api/v1/rules/{name}")["detail"]
    assert deleted["before"]["spec"]["enabled"] is False and deleted["after"] is None

    # A refused change made nothing: its event has no state.
    assert httpx.put(f"{api}/rules/audit-gone", json=edited).status_code == 404
    refused = _last(api, "PUT /api/v1/rules/{name}")
    assert (refused["status"], refused["detail"]) == (404, None)


def test_an_inhibition_rule_keeps_its_spec_before_and_after(api: str) -> None:
    rule = {
        "name": "audit-mute",
        "source_matchers": ['alertname="gpu-lost"'],
        "target_matchers": ['alertname="gpu-temperature-high"'],
        "equal": ["hostname"],
    }
    assert httpx.put(f"{api}/inhibit-rules/audit-mute", json=rule).status_code == 201
    created = _last(api, "PUT /api/v1/inhibit-rules/{name}")["detail"]
    assert (created["object"], created["key"], created["before"]) == (
        "inhibit_rule",
        "audit-mute",
        None,
    )
    spec = created["after"]["spec"]
    assert spec["equal"] == ["hostname"] and created["after"]["source"] == "api"
    assert spec["source_matchers"] == [{"name": "alertname", "op": "=", "value": "gpu-lost"}]

    # The same document again changes nothing: its event has no state.
    assert httpx.put(f"{api}/inhibit-rules/audit-mute", json=rule).status_code == 200
    assert _last(api, "PUT /api/v1/inhibit-rules/{name}")["detail"] is None

    wider = {**rule, "equal": ["hostname", "gpu_uuid"]}
    assert httpx.put(f"{api}/inhibit-rules/audit-mute", json=wider).status_code == 200
    edited = _last(api, "PUT /api/v1/inhibit-rules/{name}")["detail"]
    assert edited["before"] == {"spec": spec, "source": "api"}
    assert edited["after"] == {"spec": {**spec, "equal": ["hostname", "gpu_uuid"]}, "source": "api"}

    assert httpx.delete(f"{api}/inhibit-rules/audit-mute").status_code == 204
    deleted = _last(api, "DELETE /api/v1/inhibit-rules/{name}")["detail"]
    assert deleted["before"] == edited["after"] and deleted["after"] is None


def test_a_channel_edit_keeps_settings_with_the_url_and_secret_redacted(api: str) -> None:
    body = {
        "name": "audit-hook",
        "kind": "webhook",
        "url": f"http://127.0.0.1:9{SECRET_PATH}",
        "secret": "hmac-SECRET-one",
        "options": {},
    }
    made = httpx.post(f"{api}/channels", json=body)
    assert made.status_code == 201, made.text
    channel_id = made.json()["id"]
    state = {
        "name": "audit-hook",
        "kind": "webhook",
        "team": None,
        "url": "http://127.0.0.1:9/…",
        "secret": "…",
        "options": {},
        "enabled": True,
    }
    created = _last(api, "POST /api/v1/channels")["detail"]
    assert created == {"object": "channel", "key": channel_id, "before": None, "after": state}

    patch = {"name": "audit-hook-2", "url": f"http://127.0.0.1:10{SECRET_PATH}/v2",
             "enabled": False}  # fmt: skip
    assert httpx.patch(f"{api}/channels/{channel_id}", json=patch).status_code == 200
    detail = _last(api, "PATCH /api/v1/channels/{channel_id}")["detail"]
    assert detail == {
        "object": "channel",
        "key": channel_id,
        "before": state,
        "after": {**state, "name": "audit-hook-2", "url": "http://127.0.0.1:10/…",
                  "enabled": False},
        "redacted_changed": ["url"],
    }  # fmt: skip

    assert httpx.patch(f"{api}/channels/{channel_id}", json={"secret": ""}).status_code == 200
    cleared = _last(api, "PATCH /api/v1/channels/{channel_id}")["detail"]
    assert cleared["redacted_changed"] == ["secret"] and cleared["after"]["secret"] is None

    trail = httpx.get(f"{api}/audit").text
    assert "SECRET" not in trail


def test_a_silence_created_then_expired_keeps_its_state(api: str) -> None:
    ends = (datetime.now(UTC) + timedelta(hours=2)).replace(microsecond=0)
    matchers = [{"name": "alertname", "op": "=", "value": "audit-hot"}]
    made = httpx.post(
        f"{api}/silences",
        json={"matchers": matchers, "ends_at": ends.isoformat(), "created_by": "alice",
              "comment": "reboot"},
    )  # fmt: skip
    assert made.status_code == 201, made.text
    silence = made.json()
    created = _last(api, "POST /api/v1/silences")["detail"]
    after = created["after"]
    assert (created["object"], created["key"], created["before"]) == (
        "silence",
        silence["id"],
        None,
    )
    assert datetime.fromisoformat(after["ends_at"]) == ends
    starts = datetime.fromisoformat(after["starts_at"])
    assert after == {
        "matchers": matchers,
        "starts_at": starts.isoformat(),
        "ends_at": ends.isoformat(),
        "created_by": "alice",
        "comment": "reboot",
        "team": None,
    }

    assert httpx.post(f"{api}/silences/{silence['id']}/expire").status_code == 200
    expired = _last(api, "POST /api/v1/silences/{silence_id}/expire")["detail"]
    assert expired["before"] == after
    ended = datetime.fromisoformat(expired["after"]["ends_at"])
    assert starts <= ended < ends
    assert expired["after"] == {**after, "ends_at": ended.isoformat()}


def test_runbook_maintenance_and_lifecycle_changes_keep_their_states(api: str, db_url: str) -> None:
    assert httpx.put(f"{api}/runbooks/audit-rb", json={"markdown": "# one"}).status_code == 200
    assert httpx.put(f"{api}/runbooks/audit-rb", json={"markdown": "# two"}).status_code == 200
    edited = _last(api, "PUT /api/v1/runbooks/{name}")["detail"]
    assert edited == {
        "object": "runbook",
        "key": "audit-rb",
        "before": {"markdown": "# one", "source": "ui", "team": None},
        "after": {"markdown": "# two", "source": "ui", "team": None},
    }
    assert httpx.delete(f"{api}/runbooks/audit-rb").status_code == 204
    reverted = _last(api, "DELETE /api/v1/runbooks/{name}")["detail"]
    assert reverted["before"]["markdown"] == "# two" and reverted["after"] is None

    add_agent_token(db_url, "audit-node-1")
    ends = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0)
    made = httpx.post(
        f"{api}/maintenance",
        json={"hostname": "audit-node-1", "reason": "PSU swap", "ends_at": ends.isoformat(),
              "created_by": "bob"},
    )  # fmt: skip
    assert made.status_code == 201, made.text
    window_id = made.json()["id"]
    opened = _last(api, "POST /api/v1/maintenance")["detail"]
    assert (opened["object"], opened["key"], opened["before"]) == (
        "maintenance_window",
        window_id,
        None,
    )
    assert opened["after"]["reason"] == "PSU swap" and opened["after"]["ended_by"] is None
    assert datetime.fromisoformat(opened["after"]["ends_at"]) == ends
    ended = httpx.post(f"{api}/maintenance/{window_id}/end", json={"ended_by": "bob"})
    assert ended.status_code == 200, ended.text
    closed = _last(api, "POST /api/v1/maintenance/{window_id}/end")["detail"]
    assert closed["before"] == opened["after"]
    assert closed["after"]["ended_by"] == "bob"
    assert datetime.fromisoformat(closed["after"]["ends_at"]) < ends

    moved = httpx.post(
        f"{api}/nodes/audit-node-1/lifecycle",
        json={"to_state": "quarantined", "reason": "Xid 79 on GPU 3", "actor": "carol"},
    )
    assert moved.status_code in (200, 201), moved.text
    change = _last(api, "POST /api/v1/nodes/{hostname}/lifecycle")["detail"]
    assert (change["object"], change["key"]) == ("node_lifecycle", "audit-node-1")
    assert change["before"] == {
        "state": "in_service", "since": None, "reason": None, "cause": None, "cause_ref": None,
        "actor": None,
    }  # fmt: skip
    after = change["after"]
    assert (after["state"], after["reason"], after["cause"]) == (
        "quarantined",
        "Xid 79 on GPU 3",
        "person",
    )
    assert isinstance(after["transition_id"], int)
