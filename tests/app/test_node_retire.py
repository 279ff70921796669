"""Retiring a node through a real server on Postgres and SQLite: it leaves the node list, the
fleet health and the alert evaluation (its alerts resolve, an event rule on it does not fail),
its tokens stop working, its page stays with a banner, and a batch under a new token brings it
back; the API, the page forms and the CLI refuse bad input naming the field."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.app.helpers import post_batch
from tests.app.section_factories import disk
from tests.factories import (
    add_rules,
    batch,
    create_token,
    evaluate_at,
    wipe_alerts,
    xid_batch,
)
from tests.live_server import LiveServer

HOT = {"kind": "threshold", "target": "gpu", "metric": "temp_c", "op": ">", "threshold": 85}
XID = {"kind": "event", "event_kinds": ["xid"], "window": "10m"}
SLOW = {
    "kind": "threshold",
    "target": "disk",
    "metric": "avg_wait_s",
    "aggregation": "avg",
    "window": "5m",
    "op": ">",
    "threshold": 0.05,
}
STALE = {"kind": "absence", "target": "node"}


@pytest.fixture
def fleet(server: LiveServer, db_url: str) -> Iterator[dict[str, Any]]:
    """node-a and node-b reporting (node-b's GPU at 90 °C with an Xid 79, a slow disk), rules
    ``hot`` (keeps firing 5 min), ``xid``, ``slow`` (a disk window) and ``stale`` evaluated:
    node-b's alerts firing."""
    now = datetime.now(UTC)
    tokens = {h: create_token(db_url, h) for h in ("node-a", "node-b")}
    assert post_batch(server.url, tokens["node-a"], batch("node-a")).status_code == 200
    hot = xid_batch("node-b", now - timedelta(seconds=5), temp_c=90)
    hot["disks"] = [disk(now - timedelta(seconds=5), avg_wait_s=0.5)]
    assert post_batch(server.url, tokens["node-b"], hot).status_code == 200
    add_rules(
        db_url,
        {"name": "hot", "severity": "critical", "keep_firing_for": "5m", "condition": HOT},
        {"name": "xid", "severity": "critical", "condition": XID},
        {"name": "slow", "severity": "warning", "condition": SLOW},
        {"name": "stale", "severity": "critical", "condition": STALE},
    )
    evaluate_at(db_url, now)
    yield {"url": server.url, "tokens": tokens, "now": now}
    wipe_alerts(db_url)


def firing(url: str) -> list[tuple[str, str]]:
    alerts = httpx.get(f"{url}/api/v1/alerts", params={"state": "firing"}, timeout=30).json()
    return sorted((a["rule"], a["labels"]["hostname"]) for a in alerts)


def test_a_retired_node_leaves_lists_health_and_alerts_and_comes_back_with_a_new_token(
    fleet: dict[str, Any], db_url: str
) -> None:
    url = fleet["url"]
    assert firing(url) == [("hot", "node-b"), ("slow", "node-b"), ("xid", "node-b")]

    retired = httpx.post(
        f"{url}/api/v1/nodes/node-b/retire", json={"reason": "  replaced by node-c "}, timeout=30
    )

    assert retired.status_code == 200, retired.text
    body = retired.json()
    assert (body["hostname"], body["retired_reason"], body["tokens_revoked"]) == (
        "node-b",
        "replaced by node-c",
        1,
    )
    # No rule fails on its rows (the disk window scans every node's), and every alert
    # resolves now, keep_firing_for or not.
    evaluate_at(db_url, fleet["now"] + timedelta(seconds=10))
    assert firing(url) == []
    assert [n["hostname"] for n in httpx.get(f"{url}/api/v1/nodes").json()] == ["node-a"]
    gone = httpx.get(f"{url}/api/v1/nodes", params={"retired": "true"}).json()
    assert [n["hostname"] for n in gone] == ["node-b"]
    assert "node-b" not in httpx.get(f"{url}/").text  # not in the grid, events or filters
    health = httpx.get(f"{url}/api/v1/health").json()
    assert [n["hostname"] for n in health["nodes"]] == ["node-a"]
    counts = health["counts"]
    assert sum(counts[s] for s in ("healthy", "degraded", "unhealthy", "unknown")) == 1
    detail = httpx.get(f"{url}/api/v1/nodes/node-b").json()
    assert detail["retired_reason"] == "replaced by node-c" and detail["retired_at"]
    page = httpx.get(f"{url}/nodes/node-b").text
    assert 'id="node-retired"' in page and "replaced by node-c" in page
    assert 'id="node-retire"' not in page
    late = xid_batch("node-b", datetime.now(UTC))
    assert post_batch(url, fleet["tokens"]["node-b"], late).status_code == 401

    new_token = create_token(db_url, "node-b")
    again = xid_batch("node-b", datetime.now(UTC), temp_c=90)
    again["disks"] = [disk(datetime.now(UTC), avg_wait_s=0.5)]
    back = post_batch(url, new_token, again)

    assert back.status_code == 200
    nodes = httpx.get(f"{url}/api/v1/nodes").json()
    assert [n["hostname"] for n in nodes] == ["node-a", "node-b"]
    assert httpx.get(f"{url}/api/v1/nodes/node-b").json()["retired_at"] is None
    evaluate_at(db_url, datetime.now(UTC))
    assert firing(url) == [("hot", "node-b"), ("slow", "node-b"), ("xid", "node-b")]


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"reason": ""}, ["body", "reason"]),
        ({"reason": "   "}, ["body", "reason"]),
        ({"reason": "\u200b\u200b"}, ["body", "reason"]),  # zero-width spaces only
        ({"reason": "bad\u0000byte"}, ["body", "reason"]),
        ({"reason": "x" * 1025}, ["body", "reason"]),
        ({}, ["body", "reason"]),
        ({"reason": "ok", "force": True}, ["body", "force"]),
    ],
)
def test_the_retire_api_refuses_a_bad_reason_naming_it(
    fleet: dict[str, Any], body: dict[str, Any], loc: list[str]
) -> None:
    got = httpx.post(f"{fleet['url']}/api/v1/nodes/node-b/retire", json=body, timeout=30)

    assert got.status_code == 422
    assert got.json()["detail"][0]["loc"] == loc
    assert httpx.get(f"{fleet['url']}/api/v1/nodes/node-b").json()["retired_at"] is None


def test_unknown_nodes_are_404_twice_is_409_and_return_undoes_a_retire(
    fleet: dict[str, Any],
) -> None:
    url = fleet["url"]
    assert httpx.post(f"{url}/api/v1/nodes/nope/retire", json={"reason": "x"}).status_code == 404
    assert httpx.post(f"{url}/api/v1/nodes/nope/return").status_code == 404
    assert httpx.post(f"{url}/api/v1/nodes/node-b/return").status_code == 409

    httpx.post(f"{url}/api/v1/nodes/node-b/retire", json={"reason": "rma"})
    again = httpx.post(f"{url}/api/v1/nodes/node-b/retire", json={"reason": "rma, chassis 7"})
    returned = httpx.post(f"{url}/api/v1/nodes/node-b/return")

    assert again.status_code == 409
    assert again.json()["detail"].startswith("node-b is retired already, since ")
    assert again.json()["detail"].endswith(": rma")
    assert returned.status_code == 200 and returned.json()["retired_at"] is None
    assert [n["hostname"] for n in httpx.get(f"{url}/api/v1/nodes").json()] == ["node-a", "node-b"]


def test_the_node_page_forms_retire_and_return_with_a_redirect(fleet: dict[str, Any]) -> None:
    url = fleet["url"]
    page = httpx.get(f"{url}/nodes/node-b").text
    assert '<form method="post" action="/nodes/node-b/retire">' in page

    empty = httpx.post(f"{url}/nodes/node-b/retire", data={"reason": " "})
    done = httpx.post(f"{url}/nodes/node-b/retire", data={"reason": "<b>gone</b>"})
    shown = httpx.get(f"{url}/nodes/node-b").text
    back = httpx.post(f"{url}/nodes/node-b/return")

    assert empty.status_code == 400 and "reason" in empty.text
    assert done.status_code == 303 and done.headers["location"] == "/nodes/node-b"
    assert "&lt;b&gt;gone&lt;/b&gt;" in shown and "<b>gone</b>" not in shown
    assert back.status_code == 303
    assert 'id="node-retired"' not in httpx.get(f"{url}/nodes/node-b").text


def fleetwatch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=120
    )


def test_cli_retires_and_returns_a_node_and_names_bad_input(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    assert fleetwatch("migrate", "--database-url", url).returncode == 0
    assert fleetwatch("token", "create", "node-z", "--database-url", url).returncode == 0

    retired = fleetwatch("node", "retire", "node-z", "--reason", "sold", "--database-url", url)
    blank = fleetwatch("node", "retire", "node-z", "--reason", " ", "--database-url", url)
    unknown = fleetwatch("node", "retire", "nope", "--reason", "x", "--database-url", url)
    twice = fleetwatch("node", "retire", "node-z", "--reason", "y", "--database-url", url)
    returned = fleetwatch("node", "return", "node-z", "--database-url", url)
    not_retired = fleetwatch("node", "return", "node-z", "--database-url", url)

    assert retired.returncode == 0, retired.stderr
    assert retired.stdout.strip() == "retired node-z; revoked 1 token(s)"
    assert blank.returncode == 2
    assert blank.stderr.strip() == "fleetwatch: --reason: say why, in 1 to 1024 characters"
    assert unknown.returncode == 1 and "no node named 'nope'" in unknown.stderr
    assert twice.returncode == 1 and "node-z is retired already, since" in twice.stderr
    assert returned.returncode == 0 and returned.stdout.strip() == "node-z is back in the fleet"
    assert not_retired.returncode == 1
    assert not_retired.stderr.strip() == "fleetwatch: node-z is not retired"
