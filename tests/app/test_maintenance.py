"""Maintenance windows on Postgres and SQLite: a window for one node or a label group mutes its
nodes' alerts (and only theirs) while it is in force and they page again when it ends; an
``automatic`` rule leaves a node in maintenance alone (decision ``skipped`` naming the
window); the reliability figures leave the window's hours out of availability and its
incidents out of the interruptions; the API, the page forms, the node page and the CLI; bad
input refused naming the field."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update
from typer.testing import CliRunner

from app.alerts.models import AlertInstance
from app.cli import cli
from app.db import session_scope
from app.fleet.models import Node
from app.maintenance.models import MaintenanceWindow
from app.remediation import automation
from app.remediation.service import Backends
from tests.app.helpers import post_batch
from tests.conftest import make_settings
from tests.dbs import session_factory
from tests.factories import add_rules, batch, create_token, evaluate_at, wipe_alerts, xid_batch
from tests.live_server import LiveServer

HOT = {"kind": "threshold", "target": "gpu", "metric": "temp_c", "op": ">", "threshold": 85}


@pytest.fixture
def url(db_url: str) -> Iterator[str]:
    """``db_url`` with the alert and maintenance tables wiped after the test."""
    yield db_url
    wipe_alerts(db_url)
    with session_factory(db_url) as factory, session_scope(factory) as session:
        session.execute(MaintenanceWindow.__table__.delete())


@pytest.fixture
def live(url: str, tmp_path: Path) -> Iterator[LiveServer]:
    server = LiveServer(make_settings(url, tmp_path, slurm_scontrol="/bin/echo"))
    server.start()
    yield server
    server.stop()


def _hot_fleet(live: LiveServer, url: str) -> None:
    """m1, m2 in rack r1 and m3 in rack r2, one GPU each at 90 °C."""
    for host, rack in (("m1", "r1"), ("m2", "r1"), ("m3", "r2")):
        payload = batch(host, gpus=1, labels={"rack": rack})
        for s in payload["samples"]:
            s["temp_c"] = 90
        assert post_batch(live.url, create_token(url, host), payload).status_code == 200


def _silenced(url: str) -> dict[str, bool]:
    """Hostname → whether its firing hot-GPU alert is silenced."""
    with session_factory(url) as factory, session_scope(factory) as session:
        rows = session.scalars(select(AlertInstance).where(AlertInstance.state == "firing"))
        return {
            r.labels["hostname"]: r.silenced for r in rows if r.labels["alertname"] == "gpu-hot"
        }


def _window(live: LiveServer, **body: Any) -> httpx.Response:
    body.setdefault("reason", "firmware update")
    body.setdefault("created_by", "alice")
    body.setdefault("ends_at", (datetime.now(UTC) + timedelta(hours=2)).isoformat())
    return httpx.post(f"{live.url}/api/v1/maintenance", json=body)


def test_a_window_mutes_its_nodes_alerts_until_it_ends(live: LiveServer, url: str) -> None:
    _hot_fleet(live, url)
    add_rules(url, {"name": "gpu-hot", "severity": "critical", "condition": HOT})
    evaluate_at(url, datetime.now(UTC))
    assert _silenced(url) == {"m1": False, "m2": False, "m3": False}

    rack = _window(live, matchers=[{"name": "rack", "op": "=", "value": "r1"}])
    assert rack.status_code == 201, rack.text
    body = rack.json()
    assert (body["nodes"], body["in_force"], body["reason"]) == (
        ["m1", "m2"],
        True,
        "firmware update",
    )
    # At once (not only at the next evaluation), and the evaluation keeps it so.
    assert _silenced(url) == {"m1": True, "m2": True, "m3": False}
    evaluate_at(url, datetime.now(UTC))
    assert _silenced(url) == {"m1": True, "m2": True, "m3": False}

    one = _window(live, hostname="m3")
    assert one.status_code == 201 and one.json()["nodes"] == ["m3"]
    evaluate_at(url, datetime.now(UTC))
    assert _silenced(url) == {"m1": True, "m2": True, "m3": True}
    listed = httpx.get(f"{live.url}/api/v1/maintenance").json()
    assert [w["id"] for w in listed] == [body["id"], one.json()["id"]]

    ended = httpx.post(f"{live.url}/api/v1/maintenance/{body['id']}/end", json={"ended_by": "bob"})
    assert ended.status_code == 200 and ended.json()["ended_by"] == "bob"
    assert ended.json()["in_force"] is False
    assert _silenced(url) == {"m1": False, "m2": False, "m3": True}
    evaluate_at(url, datetime.now(UTC))
    assert _silenced(url) == {"m1": False, "m2": False, "m3": True}
    again = httpx.post(f"{live.url}/api/v1/maintenance/{body['id']}/end", json={"ended_by": "bob"})
    assert again.status_code == 409
    assert [w["id"] for w in httpx.get(f"{live.url}/api/v1/maintenance").json()] == [
        one.json()["id"]
    ]
    everything = httpx.get(f"{live.url}/api/v1/maintenance", params={"include_ended": "true"})
    assert len(everything.json()) == 2


def test_a_scheduled_window_mutes_nothing_before_it_starts(live: LiveServer, url: str) -> None:
    _hot_fleet(live, url)
    add_rules(url, {"name": "gpu-hot", "severity": "critical", "condition": HOT})
    now = datetime.now(UTC)
    later = _window(
        live,
        hostname="m1",
        starts_at=(now + timedelta(hours=1)).isoformat(),
        ends_at=(now + timedelta(hours=3)).isoformat(),
    )
    assert later.status_code == 201 and later.json()["in_force"] is False
    evaluate_at(url, now)
    assert _silenced(url)["m1"] is False
    with session_factory(url) as factory, session_scope(factory) as session:
        session.execute(  # the hour has passed
            update(MaintenanceWindow).values(starts_at=datetime.now(UTC) - timedelta(seconds=1))
        )
    evaluate_at(url, datetime.now(UTC))
    assert _silenced(url)["m1"] is True
    with session_factory(url) as factory, session_scope(factory) as session:
        session.execute(update(MaintenanceWindow).values(starts_at=now + timedelta(hours=1)))
    # Cancelled before it starts: it never covers anything, is listed as ended, and cannot
    # be cancelled twice.
    end_url = f"{live.url}/api/v1/maintenance/{later.json()['id']}/end"
    cancelled = httpx.post(end_url, json={"ended_by": "bob"}).json()
    assert cancelled["ends_at"] == cancelled["starts_at"]
    assert httpx.post(end_url, json={"ended_by": "eve"}).status_code == 409
    assert httpx.get(f"{live.url}/api/v1/maintenance").json() == []
    listing = httpx.get(f"{live.url}/maintenance").text
    assert 'id="no-windows"' in listing and "ended-windows" in listing


def test_automation_leaves_a_node_in_maintenance_alone(live: LiveServer, url: str) -> None:
    _hot_fleet(live, url)
    add_rules(
        url,
        {
            "name": "hot-auto",
            "severity": "critical",
            "condition": HOT,
            "action": "quarantine",
            "action_mode": "automatic",
        },
    )
    window = _window(live, hostname="m1", reason="GPU swap").json()
    evaluate_at(url, datetime.now(UTC))
    limits = automation.Limits(max_nodes=10, max_pct=100.0, window_s=3600, group_label="rack")
    with session_factory(url) as factory:
        made = automation.run_due(factory, backends=Backends(scontrol="/bin/echo"), limits=limits)
    decided = {d.hostname: (d.outcome, d.detail) for d in made}
    assert decided["m1"][0] == "skipped"
    assert decided["m1"][1].startswith(f"the node is in maintenance window {window['id']} until")
    assert decided["m1"][1].endswith(": GPU swap")
    assert decided["m2"][0] == decided["m3"][0] == "quarantined"
    state = httpx.get(f"{live.url}/api/v1/nodes/m1/lifecycle").json()
    assert state["state"] == "in_service" and state["actions"] == []


def test_reliability_leaves_maintenance_out(live: LiveServer, url: str) -> None:
    now = datetime.now(UTC)
    for host in ("r1", "r2"):
        payload = batch(host, labels={"cluster": "c"})
        assert post_batch(live.url, create_token(url, host), payload).status_code == 200
    with session_factory(url) as factory, session_scope(factory) as session:
        session.execute(update(Node).values(first_seen_at=now - timedelta(days=10)))
    # r1: 24 h of maintenance 3 days ago, out of service for 12 h of it and 6 h after it,
    # and a job-fatal Xid 79 inside it.
    window = _window(live, hostname="r1", reason="rack power work").json()
    start, end = now - timedelta(days=3), now - timedelta(days=2)
    with session_factory(url) as factory, session_scope(factory) as session:
        session.execute(
            update(MaintenanceWindow)
            .where(MaintenanceWindow.id == window["id"])
            .values(starts_at=start, ends_at=end)
        )
    fault = xid_batch("r1", start + timedelta(hours=1), xid=79)
    fault["node"]["labels"] = {"cluster": "c"}
    assert post_batch(live.url, create_token(url, "r1"), fault).status_code == 200
    for to_state in ("quarantined", "in_service"):
        moved = httpx.post(
            f"{live.url}/api/v1/nodes/r1/lifecycle", json={"to_state": to_state, "reason": "x"}
        )
        assert moved.status_code == 200
    from app.lifecycle.models import LifecycleTransition

    with session_factory(url) as factory, session_scope(factory) as session:
        ids = list(session.scalars(select(LifecycleTransition.id).order_by(LifecycleTransition.id)))
        for row_id, at in zip(
            ids, (start + timedelta(hours=12), end + timedelta(hours=6)), strict=True
        ):
            session.execute(
                update(LifecycleTransition).where(LifecycleTransition.id == row_id).values(at=at)
            )

    body = httpx.get(f"{live.url}/api/v1/reliability", params={"range": "7d"}).json()
    fleet = body["fleet"]
    assert fleet["maintenance_hours"] == pytest.approx(24, abs=0.01)
    assert fleet["node_hours"] == pytest.approx(2 * 168 - 24, abs=0.1)
    assert fleet["out_of_service_hours"] == pytest.approx(6, abs=0.01)  # the 12 h inside: planned
    assert fleet["availability_pct"] == pytest.approx(100 * (312 - 6) / 312, abs=0.01)
    assert (fleet["incidents"], fleet["interruptions"], fleet["mtbi_h"]) == (1, 0, None)
    assert "Maintenance, h" in httpx.get(f"{live.url}/reliability", params={"range": "7d"}).text


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"hostname": "m1", "reason": "   "}, 400, "reason"),
        ({"hostname": "nope"}, 404, "nope"),
        ({"matchers": [{"name": "rack", "value": "r9"}]}, 400, "matchers"),
        ({"matchers": [{"name": "rack", "op": "=~", "value": "("}]}, 422, "matchers"),
        ({"hostname": "m1", "matchers": [{"name": "rack", "value": "r1"}]}, 422, "hostname"),
        ({}, 422, "hostname"),
        ({"hostname": "m1", "ends_at": "2020-01-01T00:00:00Z"}, 400, "ends_at"),
        ({"hostname": "m1", "ends_at": "2099-01-01T00:00:00"}, 422, "ends_at"),
        ({"hostname": "m1", "ends_at": "2099-01-01T00:00:00Z"}, 400, "ends_at"),
        ({"hostname": "m1", "created_by": ""}, 422, "created_by"),
        ({"hostname": "m1", "created_by": "   "}, 400, "created_by"),
        ({"hostname": "m1", "reason": "x" * 1025}, 422, "reason"),
        ({"hostname": "m1", "reason": "a\x01b"}, 400, "reason"),
        # Backdated: it would erase interruptions already counted.
        ({"hostname": "m1", "starts_at": "2026-01-01T00:00:00Z"}, 400, "starts_at"),
    ],
)
def test_bad_windows_are_refused_naming_the_field(
    live: LiveServer, url: str, body: dict[str, Any], status: int, field: str
) -> None:
    _hot_fleet(live, url)
    answer = _window(live, **body)
    assert answer.status_code == status, answer.text
    assert field in answer.text
    assert httpx.get(f"{live.url}/api/v1/maintenance").json() == []


def test_the_page_and_the_node_page_forms(live: LiveServer, url: str) -> None:
    _hot_fleet(live, url)
    page = httpx.get(f"{live.url}/maintenance", params={"hostname": "m2"})
    assert page.status_code == 200 and 'value="m2"' in page.text
    # The node page's form: one node, a duration, back to the node page.
    made = httpx.post(
        f"{live.url}/maintenance",
        data={
            "matcher_name": "hostname",
            "matcher_op": "=",
            "matcher_value": "m2",
            "duration": "4h",
            "reason": "NVLink bridge swap",
            "created_by": "carol",
            "back": "/nodes/m2#maintenance",
        },
    )
    assert made.status_code == 303 and made.headers["location"] == "/nodes/m2#maintenance"
    node_page = httpx.get(f"{live.url}/nodes/m2")
    assert "in maintenance" in node_page.text and "NVLink bridge swap" in node_page.text
    window_id = httpx.get(f"{live.url}/api/v1/maintenance").json()[0]["id"]
    listing = httpx.get(f"{live.url}/maintenance").text
    assert f'data-window-id="{window_id}"' in listing and ">m2</a>" in listing
    # Errors beside their fields, nothing created.
    bad = httpx.post(
        f"{live.url}/maintenance",
        data={"matcher_name": "rack", "matcher_value": "r9", "duration": "x", "reason": ""},
    )
    assert bad.status_code == 422
    assert 'id="maintenance-duration-error"' in bad.text
    assert 'id="maintenance-reason-error"' in bad.text
    assert 'id="maintenance-created_by-error"' in bad.text
    assert "who puts the nodes in maintenance (required)" in bad.text
    assert "silence" not in bad.text.split('id="new-window-heading"')[1].split("</section>")[0]
    # A node page's form with an error comes back with its way home kept (an outside one not).
    from_node = {"matcher_name": "hostname", "matcher_value": "m1", "duration": "2h"}
    again = httpx.post(
        f"{live.url}/maintenance",
        data={**from_node, "reason": "", "created_by": "carol", "back": "/nodes/m1#maintenance"},
    )
    assert again.status_code == 422
    assert '<input type="hidden" name="back" value="/nodes/m1#maintenance">' in again.text
    fixed = httpx.post(
        f"{live.url}/maintenance",
        data={**from_node, "reason": "PSU", "created_by": "carol", "back": "/nodes/m1#maintenance"},
    )
    assert fixed.status_code == 303 and fixed.headers["location"] == "/nodes/m1#maintenance"
    evil = httpx.post(
        f"{live.url}/maintenance",
        data={**from_node, "reason": "", "created_by": "c", "back": "https://evil.example/"},
    )
    assert evil.status_code == 422 and 'name="back"' not in evil.text
    m1 = [
        w["id"] for w in httpx.get(f"{live.url}/api/v1/maintenance").json() if w["id"] != window_id
    ]
    assert len(m1) == 1
    assert httpx.post(f"{live.url}/maintenance/{m1[0]}/end").status_code == 303
    no_node = httpx.post(
        f"{live.url}/maintenance",
        data={
            "matcher_name": "rack",
            "matcher_value": "r9",
            "duration": "1h",
            "reason": "x",
            "created_by": "carol",
        },
    )
    assert no_node.status_code == 422 and "select no node" in no_node.text
    ended = httpx.post(
        f"{live.url}/maintenance/{window_id}/end",
        data={"back": "https://evil.example/"},
    )
    assert ended.status_code == 303 and ended.headers["location"] == "/maintenance"
    assert httpx.get(f"{live.url}/api/v1/maintenance").json() == []
    assert httpx.post(f"{live.url}/maintenance/{window_id}/end").status_code == 409
    assert httpx.post(f"{live.url}/maintenance/abc/end").status_code == 400


def test_the_cli(live: LiveServer, url: str) -> None:
    _hot_fleet(live, url)
    runner = CliRunner()
    started = runner.invoke(
        cli,
        [
            "maintenance",
            "start",
            "--match",
            "rack=r1",
            "--for",
            "3h",
            "--reason",
            "BIOS",
            "--by",
            "dave",
            "--database-url",
            url,
        ],
    )
    assert started.exit_code == 0, started.output
    assert "2 node(s)" in started.output and "m1, m2" in started.output
    listed = runner.invoke(cli, ["maintenance", "list", "--database-url", url])
    assert "[rack=r1] 2 node(s)  by dave: BIOS" in listed.output
    window_id = started.output.split()[2].rstrip(":")
    ended = runner.invoke(cli, ["maintenance", "end", window_id, "--database-url", url])
    assert ended.exit_code == 0 and f"window {window_id} ended" in ended.output
    again = runner.invoke(cli, ["maintenance", "end", window_id, "--database-url", url])
    assert again.exit_code == 1 and "already" in again.output
    for huge in ("9223372036854775808", "2147483648", "0"):
        out_of_range = runner.invoke(cli, ["maintenance", "end", huge, "--database-url", url])
        assert out_of_range.exit_code == 2 and "window_id" in out_of_range.output.lower()
    for args, message in (
        (["--match", "rack", "--for", "1h", "--reason", "x"], "expected LABEL=VALUE"),
        (["m1", "--for", "soon", "--reason", "x"], "--for"),
        (["m1", "--until", "2099-01-01T00:00", "--reason", "x"], "needs a time zone"),
        (["m1", "--reason", "x"], "--for DURATION or --until"),
        (["m1", "--for", "1h"], "reason"),
        (["nope", "--for", "1h", "--reason", "x"], "no node named 'nope'"),
        (["m1", "--for", "1h", "--reason", "x", "--by", "b" * 300], "created_by"),
        (["m1", "--for", "1h", "--reason", "y" * 5000], "at most 1024"),
    ):
        failed = runner.invoke(cli, ["maintenance", "start", *args, "--database-url", url])
        assert failed.exit_code != 0, args
        assert message in failed.output, (args, failed.output)
