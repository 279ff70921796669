"""The client commands (``fleetwatch nodes|alerts|incidents|silence|ack|health``) through
typer's CliRunner against a real server on Postgres and SQLite: tables for people, the API's
JSON with --json, health's exit codes per state, the server's refusals as one line and bad
silences named by option (test_client_cli_errors.py: no server, wrong server, completion)."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner, Result

from app.cli import cli
from tests.app.helpers import post_batch
from tests.factories import (
    add_rules,
    batch,
    create_token,
    evaluate_at,
    iso,
    store_payload,
    wipe_alerts,
    xid_batch,
)
from tests.live_server import LiveServer

HOT = {"kind": "threshold", "target": "gpu", "metric": "temp_c", "op": ">", "threshold": 58}


def run(server: str, *args: str, **env: str) -> Result:
    """``fleetwatch ARGS`` in-process with ``FLEETWATCH_SERVER=server``."""
    result = CliRunner().invoke(cli, list(args), env={"FLEETWATCH_SERVER": server, **env})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    return result


def rows(text: str) -> list[dict[str, str]]:
    """A printed table as one dict per row, keyed by the headings."""
    lines = text.splitlines()
    titles = re.split(r"\s{2,}", lines[0].strip())
    return [dict(zip(titles, re.split(r"\s{2,}", line.strip()), strict=True)) for line in lines[1:]]


def flat(text: str) -> str:
    """Output with the error box's borders and line breaks folded into single spaces."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


@pytest.fixture
def fleet(server: LiveServer, db_url: str) -> Iterator[str]:
    """Five nodes: gpu-ok healthy (rack r02), gpu-warm degraded (Xid 94 an hour ago, 70 °C),
    gpu-bad unhealthy (Xid 79 now, 60 °C), gpu-old stale (last batch an hour ago), gpu-never
    (a token, no batch); alert rule ``hot`` (> 58 °C) firing on gpu-warm and gpu-bad and
    ``scorching`` (> 65 °C for 1h, critical) pending on gpu-warm. Yields the server URL."""
    now = datetime.now(UTC)
    ok = batch("gpu-ok", labels={"cluster": "test", "rack": "r02"})
    assert post_batch(server.url, create_token(db_url, "gpu-ok"), ok).status_code == 200
    warm = xid_batch("gpu-warm", now, temp_c=70, xid=94)
    warm["events"][0]["occurred_at"] = iso(now - timedelta(hours=1))
    assert post_batch(server.url, create_token(db_url, "gpu-warm"), warm).status_code == 200
    bad = xid_batch("gpu-bad", now)
    assert post_batch(server.url, create_token(db_url, "gpu-bad"), bad).status_code == 200
    hour_ago = now - timedelta(hours=1)
    old = batch("gpu-old", start=hour_ago - timedelta(seconds=15))
    store_payload(db_url, old, received_at=hour_ago)
    create_token(db_url, "gpu-never")
    add_rules(
        db_url,
        {"name": "hot", "condition": HOT},
        {
            "name": "scorching",
            "severity": "critical",
            "for": "1h",
            "condition": {**HOT, "threshold": 65},
        },
    )
    evaluate_at(db_url, now)
    yield server.url
    wipe_alerts(db_url)


def api(url: str, path: str, **params: Any) -> Any:
    response = httpx.get(f"{url}/api/v1{path}", params=params, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def test_nodes_table_shows_health_gpus_last_seen_and_lifecycle(fleet: str) -> None:
    quarantine = httpx.post(
        f"{fleet}/api/v1/nodes/gpu-bad/lifecycle",
        json={"to_state": "quarantined", "reason": "Xid 79", "actor": "alice"},
        timeout=30,
    )
    assert quarantine.status_code == 200, quarantine.text

    result = run(fleet, "nodes")

    assert result.exit_code == 0, result.output
    table = {r["HOSTNAME"]: r for r in rows(result.stdout)}
    assert list(table) == ["gpu-bad", "gpu-never", "gpu-ok", "gpu-old", "gpu-warm"]
    assert {h: r["HEALTH"] for h, r in table.items()} == {
        "gpu-bad": "unhealthy",
        "gpu-never": "unknown",
        "gpu-ok": "healthy",
        "gpu-old": "unknown",
        "gpu-warm": "degraded",
    }
    assert table["gpu-bad"]["LIFECYCLE"] == "quarantined"
    assert table["gpu-ok"]["LIFECYCLE"] == "in_service"
    assert (table["gpu-ok"]["GPUS"], table["gpu-never"]["GPUS"]) == ("2", "0")
    assert table["gpu-never"]["LAST SEEN"] == "never"
    assert table["gpu-old"]["LAST SEEN"] == "1h ago"
    assert table["gpu-bad"]["REASONS"].startswith("Xid 79 (GPU has fallen off the bus)")
    assert table["gpu-ok"]["REASONS"] == "-"
    assert "\x1b[" not in result.stdout  # no colour when not a terminal


def test_nodes_json_is_the_api_node_with_its_health_and_lifecycle(fleet: str) -> None:
    result = run(fleet, "nodes", "--json")

    assert result.exit_code == 0, result.output
    printed = {n["hostname"]: n for n in json.loads(result.stdout)}
    for node in api(fleet, "/nodes"):
        assert {k: printed[node["hostname"]][k] for k in node} == node
    health = {n["hostname"]: n for n in api(fleet, "/health")["nodes"]}
    bad = printed["gpu-bad"]
    assert bad["health"]["state"] == "unhealthy"
    assert bad["health"]["reasons"] == health["gpu-bad"]["reasons"]
    assert bad["lifecycle"] == {
        "state": "in_service",
        "since": None,
        "reason": None,
        "cause": None,
        "cause_ref": None,
    }


def test_nodes_filter_by_health_state_and_label(fleet: str) -> None:
    unknown = run(fleet, "nodes", "--state", "unknown", "--json")
    both = run(fleet, "nodes", "--state", "unhealthy", "--state", "degraded")
    r02 = run(fleet, "nodes", "--label", "rack=r02")
    none = run(fleet, "nodes", "--label", "rack=r99")

    assert [n["hostname"] for n in json.loads(unknown.stdout)] == ["gpu-never", "gpu-old"]
    assert [r["HOSTNAME"] for r in rows(both.stdout)] == ["gpu-bad", "gpu-warm"]
    assert [r["HOSTNAME"] for r in rows(r02.stdout)] == ["gpu-ok"]
    assert none.exit_code == 0 and none.stdout == "no node matches\n"


def test_alerts_table_json_and_filters(fleet: str) -> None:
    table = run(fleet, "alerts")
    as_json = run(fleet, "alerts", "--json")
    pending = run(fleet, "alerts", "--state", "pending")
    critical = run(fleet, "alerts", "--severity", "critical", "--json")

    assert table.exit_code == 0, table.output
    listed = sorted((r["RULE"], r["ENTITY"], r["STATE"], r["SEVERITY"]) for r in rows(table.stdout))
    assert listed == [
        ("hot", "gpu-bad GPU 0", "firing", "warning"),
        ("hot", "gpu-warm GPU 0", "firing", "warning"),
        ("scorching", "gpu-warm GPU 0", "pending", "critical"),
    ]
    assert json.loads(as_json.stdout) == api(fleet, "/alerts")
    assert [(r["RULE"], r["ENTITY"]) for r in rows(pending.stdout)] == [
        ("scorching", "gpu-warm GPU 0")
    ]
    assert [a["rule"] for a in json.loads(critical.stdout)] == ["scorching"]


def test_incidents_table_json_and_filters(fleet: str) -> None:
    table = run(fleet, "incidents")
    as_json = run(fleet, "incidents", "--json")
    open_only = run(fleet, "incidents", "--open")
    of_node = run(fleet, "incidents", "--node", "gpu-warm", "--json")
    none = run(fleet, "incidents", "--node", "gpu-ok")

    assert table.exit_code == 0, table.output
    shown = {r["NODE"]: r for r in rows(table.stdout)}
    assert (shown["gpu-bad"]["STATUS"], shown["gpu-bad"]["XIDS"]) == ("open", "79")
    assert (shown["gpu-warm"]["STATUS"], shown["gpu-warm"]["XIDS"]) == ("closed", "94")
    assert json.loads(as_json.stdout) == api(fleet, "/incidents")
    assert [r["NODE"] for r in rows(open_only.stdout)] == ["gpu-bad"]
    assert [i["xids"] for i in json.loads(of_node.stdout)] == [[94]]
    assert none.stdout == "no incident\n"


def test_silence_create_list_expire_round_trip(fleet: str) -> None:
    created = run(
        fleet,
        "silence",
        "--match",
        "alertname=hot",
        "--match",
        "hostname=~gpu-(bad|warm)",
        "--for",
        "2h",
        "--by",
        "alice",
        "--comment",
        "reboot in progress",
        "--json",
    )
    assert created.exit_code == 0, created.output
    silence = json.loads(created.stdout)
    assert silence["matchers"] == [
        {"name": "alertname", "op": "=", "value": "hot"},
        {"name": "hostname", "op": "=~", "value": "gpu-(bad|warm)"},
    ]
    assert (silence["created_by"], silence["comment"]) == ("alice", "reboot in progress")
    lasts = datetime.fromisoformat(silence["ends_at"]) - datetime.fromisoformat(
        silence["starts_at"]
    )
    assert timedelta(hours=1, minutes=59) < lasts <= timedelta(hours=2)
    silenced = {a["rule"]: a["silenced"] for a in api(fleet, "/alerts", state="firing")}
    assert silenced == {"hot": True}

    listed = run(fleet, "silence", "list")
    (row,) = rows(listed.stdout)
    assert (row["ID"], row["MATCHERS"], row["BY"]) == (
        str(silence["id"]),
        "alertname=hot hostname=~gpu-(bad|warm)",
        "alice",
    )
    assert row["ENDS"] in ("in 1h 59m", "in 2h")
    assert json.loads(run(fleet, "silence", "list", "--json").stdout) == api(fleet, "/silences")

    expired = run(fleet, "silence", "expire", str(silence["id"]))
    assert expired.exit_code == 0 and expired.stdout.startswith(f"silence {silence['id']} expired")
    assert run(fleet, "silence", "list").stdout == "no silence in force or to come\n"
    assert [
        s["id"] for s in json.loads(run(fleet, "silence", "list", "--all", "--json").stdout)
    ] == [silence["id"]]
    again = run(fleet, "silence", "expire", "424242")
    assert again.exit_code == 1
    assert again.stderr == "fleetwatch: no silence with id 424242\n"


@pytest.mark.parametrize(
    ("args", "option", "message"),
    [
        (["--match", "hostname"], "--match", "expected LABEL=VALUE"),
        (["--match", "host name=x"], "--match", "expected LABEL=VALUE"),
        (["--match", "hostname=~("], "--match", "'hostname=~('"),
        (["--match", "a=b", "--for", "soon"], "--for", "not a duration: 'soon'"),
        (["--match", "a=b", "--for", "0s"], "--for", "a silence lasts longer than '0s'"),
        (["--match", "a=b", "--for", "400d"], "--for", "at most 365d"),
        (["--match", "a=b"], "--for", "how long"),
        (["--match", "a=b", "--for", "1h"], "--comment", "say why"),
        (["--for", "1h", "--comment", "x"], "--match", "give at least one"),
    ],
)
def test_a_bad_silence_is_refused_naming_the_option(
    fleet: str, args: list[str], option: str, message: str
) -> None:
    comment = [] if "--comment" in args or option == "--comment" else ["--comment", "x"]
    result = run(fleet, "silence", *args, *comment)

    assert result.exit_code == 2, result.output
    assert f"'{option}'" in flat(result.stderr) and message in flat(result.stderr)
    assert api(fleet, "/silences") == []


def test_ack_an_alert_then_it_shows_acked(fleet: str) -> None:
    (alert,) = api(fleet, "/alerts", rule="scorching")

    done = run(fleet, "ack", str(alert["id"]), "--by", "bob", "--note", "swapping fans")
    as_json = run(fleet, "ack", str(alert["id"]), "--by", "carol", "--json")
    unknown = run(fleet, "ack", "999999", "--by", "bob")

    assert done.exit_code == 0, done.output
    assert done.stdout == f"acknowledged alert {alert['id']} as bob: swapping fans\n"
    assert json.loads(as_json.stdout)["owner"] == "carol"
    shown = {r["RULE"]: r["MARKS"] for r in rows(run(fleet, "alerts", "--state", "pending").stdout)}
    assert shown == {"scorching": "acked"}
    assert unknown.exit_code == 1
    assert unknown.stderr.startswith("fleetwatch: ") and "999999" in unknown.stderr


@pytest.mark.parametrize(
    ("hostname", "code", "first_line"),
    [
        ("gpu-ok", 0, "gpu-ok: healthy"),
        ("gpu-warm", 1, "gpu-warm: degraded"),
        ("gpu-bad", 2, "gpu-bad: unhealthy"),
        ("gpu-old", 3, "gpu-old: unknown"),
        ("gpu-never", 3, "gpu-never: unknown"),
    ],
)
def test_health_exit_code_tells_the_state(
    fleet: str, hostname: str, code: int, first_line: str
) -> None:
    result = run(fleet, "health", "--node", hostname)

    assert result.exit_code == code, result.output
    assert result.stdout.splitlines()[0] == first_line


def test_health_prints_reasons_and_json(fleet: str) -> None:
    table = run(fleet, "health", "--node", "gpu-bad")
    as_json = run(fleet, "health", "--node", "gpu-bad", "--json")

    assert table.stdout.splitlines()[1].startswith("  [unhealthy] GPU 0: Xid 79 (GPU has fallen")
    assert table.stdout.splitlines()[2] == "      suggested: Drain the node and reboot it"
    assert as_json.exit_code == 2
    assert json.loads(as_json.stdout) == api(fleet, "/nodes/gpu-bad/health")


def test_health_without_node_asks_for_this_machine(fleet: str, db_url: str) -> None:
    create_token(db_url, socket.gethostname())

    result = run(fleet, "health")

    assert result.exit_code == 3, result.output
    assert result.stdout.splitlines()[0] == f"{socket.gethostname()}: unknown"


@pytest.mark.parametrize(("hostname", "state", "code"), [("gpu-ok", 0, 6), ("gpu-warm", 1, 6)])
def test_health_of_a_fit_node_out_of_service_exits_6(
    fleet: str, hostname: str, state: int, code: int
) -> None:
    before = run(fleet, "health", "--node", hostname)
    moved = httpx.post(
        f"{fleet}/api/v1/nodes/{hostname}/lifecycle",
        json={"to_state": "quarantined", "reason": "burn-in", "actor": "alice"},
        timeout=30,
    )
    assert moved.status_code == 200, moved.text

    after = run(fleet, "health", "--node", hostname)

    assert before.exit_code == state
    assert after.exit_code == code, after.output
    assert after.stdout.splitlines()[0].endswith("(out of service: quarantined)")


def test_health_of_an_unhealthy_node_out_of_service_stays_2(fleet: str) -> None:
    moved = httpx.post(
        f"{fleet}/api/v1/nodes/gpu-bad/lifecycle",
        json={"to_state": "quarantined", "reason": "Xid 79", "actor": "alice"},
        timeout=30,
    )
    assert moved.status_code == 200, moved.text

    result = run(fleet, "health", "--node", "gpu-bad")

    assert result.exit_code == 2
    assert result.stdout.splitlines()[0] == "gpu-bad: unhealthy"


def test_health_of_an_unknown_node_exits_4(fleet: str) -> None:
    result = run(fleet, "health", "--node", "nobody")

    assert result.exit_code == 4
    assert result.stdout == ""
    assert result.stderr == "fleetwatch: no node named 'nobody'\n"
