"""Incidents (app.incidents) through the real ingest API, on Postgres and SQLite: a node's fault
events within the quiet period are one incident holding its GPUs, Xids, state, job-fatal flag
and suggested repair; a quiet gap opens another; application Xids open none; a replayed batch
counts nothing twice; the API, the pages and the node page show them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from tests.app.helpers import post_batch
from tests.app.section_factories import topology
from tests.app.test_health_rules import xid_event
from tests.factories import batch, create_token, gpu, iso
from tests.live_server import LiveServer


def at(event: dict[str, Any], when: datetime) -> dict[str, Any]:
    """``event`` dated ``when``."""
    return {**event, "occurred_at": iso(when)}


def send(server: LiveServer, token: str, payload: dict[str, Any]) -> dict[str, Any]:
    response = post_batch(server.url, token, payload)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def incidents(server: LiveServer, **params: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{server.url}/api/v1/incidents", params=params, timeout=30)
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()
    return found


def test_a_lost_gpu_with_its_xids_is_one_incident(server: LiveServer, db_url: str) -> None:
    gpus = [gpu(0), gpu(1)]
    now = datetime.now(UTC)
    lost = {
        "occurred_at": iso(now - timedelta(seconds=29)),
        "kind": "gpu_fallen_off_bus",
        "gpu_uuid": gpus[1]["uuid"],
        "message": f"NVRM: GPU {gpus[1]['pci_bus_id']}: GPU has fallen off the bus.",
    }
    recovery = xid_event(154, gpus[1])
    recovery["message"] = "GPU recovery action changed from 0x0 (None) to 0x2 (OS Reboot)"
    events = [
        at(xid_event(79, gpus[1]), now - timedelta(seconds=30)),
        lost,
        at(recovery, now - timedelta(seconds=28)),
    ]
    token = create_token(db_url, "node-a")
    payload = batch(gpus=gpus, events=events)
    send(server, token, payload)
    again = send(server, token, payload)  # the agent re-sends: a replay, nothing twice
    assert again["replayed"] is True

    [found] = incidents(server)
    assert found["hostname"] == "node-a" and found["open"] is True
    assert (found["event_count"], found["gpu_indexes"], found["xids"]) == (3, [1], [79, 154])
    assert found["kinds"] == ["gpu_fallen_off_bus", "xid"]
    assert (found["state"], found["job_fatal"]) == ("unhealthy", True)
    assert found["action_code"] == "reboot_node"
    assert found["opened_at"].startswith(iso(now - timedelta(seconds=30))[:19])

    detail = httpx.get(f"{server.url}/api/v1/incidents/{found['id']}", timeout=30).json()
    assert [(e["kind"], e["xid"], e["gpu_index"]) for e in detail["events"]] == [
        ("xid", 79, 1),
        ("gpu_fallen_off_bus", None, 1),
        ("xid", 154, 1),
    ]
    assert detail["alerts"] == []  # no rule in this server


def test_an_incident_lists_the_topology_changes_of_its_span(
    server: LiveServer, db_url: str
) -> None:
    """Lost GPU + Xid 79 + topology change: the GPU leaves the topology, as one incident."""
    gpus = [gpu(0), gpu(1)]
    now = datetime.now(UTC)
    token = create_token(db_url, "node-a")
    before = batch(gpus=gpus, samples_per_gpu=1, start=now - timedelta(minutes=20))
    before["topology"] = topology(gpus, now - timedelta(minutes=20))
    send(server, token, before)
    lost = batch(gpus=gpus, events=[at(xid_event(79, gpus[1]), now - timedelta(seconds=30))])
    lost["topology"] = topology(gpus[:1], now - timedelta(seconds=25), partial=True)
    send(server, token, lost)

    [found] = incidents(server)
    detail = httpx.get(f"{server.url}/api/v1/incidents/{found['id']}", timeout=30).json()
    page = httpx.get(f"{server.url}/incidents/{found['id']}", timeout=30).text

    assert [(c["gpus"], c["links"], c["partial"]) for c in detail["topology_changes"]] == [
        (1, 1, True)
    ]
    assert "1 GPU, 1 link" in page and "partial: a GPU could not be read" in page


def test_a_quiet_gap_closes_an_incident_and_the_next_fault_opens_another(
    server: LiveServer, db_url: str
) -> None:
    gpus = [gpu(0)]
    now = datetime.now(UTC)
    token = create_token(db_url, "node-a")
    # A GSP-timeout storm an hour ago: lines 30-170 s apart are one burst.
    storm = [
        at(xid_event(119, gpus[0]), now - timedelta(hours=1, seconds=s))
        for s in (600, 570, 400, 300)
    ]
    send(server, token, batch(gpus=gpus, events=storm))
    # An application Xid alone opens nothing; the same inside an incident joins it.
    send(
        server,
        token,
        batch(gpus=gpus, events=[at(xid_event(13, gpus[0]), now - timedelta(minutes=20))]),
    )
    late = [
        at(xid_event(94, gpus[0]), now - timedelta(seconds=60)),
        at(xid_event(13, gpus[0]), now - timedelta(seconds=50)),
    ]
    send(server, token, batch(gpus=gpus, events=late))
    # A line of the old storm that arrives late (a spool replayed) joins the old incident.
    send(
        server,
        token,
        batch(
            gpus=gpus, events=[at(xid_event(119, gpus[0]), now - timedelta(hours=1, seconds=250))]
        ),
    )

    newest, oldest = incidents(server)
    assert (newest["xids"], newest["event_count"], newest["open"]) == ([13, 94], 2, True)
    assert (newest["state"], newest["job_fatal"], newest["action_code"]) == (
        "degraded",
        True,
        "restart_app",
    )
    assert (oldest["xids"], oldest["event_count"], oldest["open"]) == ([119], 5, False)
    assert oldest["action_code"] == "reset_gpu"
    assert [i["id"] for i in incidents(server, status="open")] == [newest["id"]]
    assert [i["id"] for i in incidents(server, status="closed")] == [oldest["id"]]
    assert incidents(server, node="node-b") == []


def test_incident_pages_and_the_node_page(server: LiveServer, db_url: str) -> None:
    gpus = [gpu(0), gpu(1)]
    hostile = xid_event(48, gpus[0])
    hostile["message"] = "NVRM: Xid (PCI:0000:01:00): 48, <script>alert(1)</script>"
    token = create_token(db_url, "node-a")
    send(server, token, batch(gpus=gpus, events=[hostile]))
    [found] = incidents(server)

    listing = httpx.get(f"{server.url}/incidents", timeout=30)
    assert listing.status_code == 200
    assert f'href="/incidents/{found["id"]}"' in listing.text and "node-a" in listing.text
    page = httpx.get(f"{server.url}/incidents/{found['id']}", timeout=30)
    assert page.status_code == 200
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text and "<script>alert" not in page.text
    assert "job-fatal" in page.text and "reset gpu" in page.text
    node = httpx.get(f"{server.url}/nodes/node-a", timeout=30)
    assert f'href="/incidents/{found["id"]}"' in node.text

    assert httpx.get(f"{server.url}/incidents/999999", timeout=30).status_code == 404
    missing = httpx.get(f"{server.url}/api/v1/incidents/999999", timeout=30)
    assert missing.status_code == 404 and "999999" in missing.json()["detail"]
    bad = httpx.get(f"{server.url}/api/v1/incidents", params={"status": "ajar"}, timeout=30)
    assert bad.status_code == 422 and "status" in bad.text


def test_repeat_offenders_count_incidents_not_lines(server: LiveServer, db_url: str) -> None:
    """GPU 0's Xid 48 in two incidents within 24 h is a repeat offender, GPU 1's storm of 20
    identical lines (one incident) is not; node-a with three incidents within 7 days is one,
    on the incidents page and the overview."""
    gpus = [gpu(0), gpu(1)]
    now = datetime.now(UTC)
    token = create_token(db_url, "node-a")
    events = [at(xid_event(48, gpus[0]), now - timedelta(hours=h)) for h in (5, 1)]
    events += [at(xid_event(95, gpus[1]), now - timedelta(hours=3, seconds=s)) for s in range(20)]
    send(server, token, batch(gpus=gpus, events=events))
    assert len(incidents(server)) == 3

    page = httpx.get(f"{server.url}/incidents", timeout=30).text
    section = page[page.index("Repeat offenders") : page.index('<form class="filters"')]
    assert 'href="/nodes/node-a/gpus/0">node-a GPU 0</a>' in section
    assert "node-a GPU 1" not in section
    assert 'href="/incidents?node=node-a">node-a</a>' in section
    overview = httpx.get(f"{server.url}/", timeout=30).text
    assert 'href="/nodes/node-a/gpus/0">node-a GPU 0</a>' in overview


def test_a_storm_that_never_pauses_is_a_new_incident_each_hour_and_escalates(
    server: LiveServer, db_url: str
) -> None:
    """A GSP timeout (Xid 119) logged every 2 minutes for 2.5 hours never leaves the quiet
    period, but an incident spans at most FLEETWATCH_INCIDENT_MAX_S (1 h): three incidents,
    each at most an hour long; the GPU is a repeat offender and its action escalates from a
    GPU reset to hardware inspection (three bursts by the same limit)."""
    gpus = [gpu(0)]
    now = datetime.now(UTC)
    token = create_token(db_url, "node-a")
    storm = [at(xid_event(119, gpus[0]), now - timedelta(seconds=s)) for s in range(9000, 0, -120)]
    send(server, token, batch(gpus=gpus, events=storm))

    found = incidents(server)
    assert len(found) == 3
    assert sum(i["event_count"] for i in found) == len(storm)
    for incident in found:
        span = datetime.fromisoformat(incident["last_event_at"]) - datetime.fromisoformat(
            incident["opened_at"]
        )
        assert span <= timedelta(hours=1)
    assert [i["open"] for i in found] == [True, False, False]
    page = httpx.get(f"{server.url}/incidents", timeout=30).text
    section = page[page.index("Repeat offenders") : page.index('<form class="filters"')]
    assert 'href="/nodes/node-a/gpus/0">node-a GPU 0</a>' in section
    health = httpx.get(f"{server.url}/api/v1/nodes/node-a/health", timeout=30).json()
    action = health["gpus"][0]["reasons"][0]["action"]
    assert (action["code"], action["escalated_from"], action["occurrences"]) == (
        "inspect_hardware",
        "reset_gpu",
        3,
    )
