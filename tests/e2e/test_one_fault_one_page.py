"""One fault, one page: every fault kind the simulator injects, each on its own node of a
simulated fleet pushing over real HTTP to a server whose own jobs evaluate the default rule
pack (with its default inhibition rules) every second and send the outbox to a local webhook
receiver. Each node's fault must reach the receiver as exactly one firing notice, of the alert
an on-call engineer should act on; the alerts it also raised stay visible, inhibited, and do not
page when the fault clears (a lost GPU back after a reset). Prints
the table of the closing note (fault, alerts firing, inhibited, pages).

The pack's two `for: 1m` rules (gpu-unresponsive, node-gpu-count-below-inventory) hold 30 s
here, so the run waits half a minute less for their pages: still longer than the other faults
keep a GPU lost or off the bus (15 s) or a node silent (20 s), so those must still not page
through these two rules."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agents.fleetspec import FleetNode
from agents.simfleet import SimFleet
from app.config import Settings
from app.demo import add_webhook
from tests.e2e.test_notify_demo import demo_settings, serve
from tests.factories import create_token
from tests.notify_helpers import receiver
from tests.rule_packs import apply_edited_default_rules

#: node → (fault kind, GPU or port index, duration s, Xid, the one alert that pages).
FAULTS: dict[str, tuple[str, int | None, float, int | None, str]] = {
    "lost-001": ("gpu_lost", 2, 15.0, None, "gpu-lost"),
    "xid79-001": ("xid", 1, 15.0, 79, "gpu-lost"),
    "xid48-001": ("xid", 3, 60.0, 48, "gpu-critical-xid"),
    "xid94-001": ("xid", 0, 60.0, 94, "gpu-xid-degraded"),
    "nvlink-001": ("nvlink_down", 5, 60.0, None, "gpu-critical-xid"),
    "ib-001": ("ib_port_down", 0, 60.0, None, "node-ib-port-down"),
    "stop-001": ("agent_stop", None, 20.0, None, "node-agent-stale"),
    "offbus-001": ("off_bus", 4, 15.0, None, "gpu-lost"),
    "hang-001": ("nvml_hang", 6, 120.0, None, "gpu-unresponsive"),  # pages after `for: 30s`
    "flap-001": ("ib_flap", 1, 40.0, None, "node-ib-port-down"),
    "xid48x3-001": ("xid_repeat", 2, 0.0, 48, "gpu-critical-xid"),
    # Injected before the agent's first round: its first report lacks the GPU (pages after
    # the rule's `for`, 30 s here).
    "absent-001": ("lost_at_start", 3, 0.0, None, "node-gpu-count-below-inventory"),
}
#: The pack's files holding one `for: 1m` rule each (gpu-unresponsive,
#: node-gpu-count-below-inventory).
PACK_FILES = ("gpu.yaml", "node.yaml")
#: Faults in force before the fleet starts.
AT_START = frozenset({"lost_at_start"})


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Iterator[Settings]:
    """The notification demo's settings (evaluation every second, stale after 5 s, webhooks
    to loopback), on both backends."""
    yield from demo_settings(db_url, tmp_path)


def pages(bodies: list[dict[str, object]]) -> Counter[tuple[str, str]]:
    """(hostname, alertname) → firing notices received."""
    out: Counter[tuple[str, str]] = Counter()
    for body in bodies:
        alerts = body["alerts"]
        assert isinstance(alerts, list)
        for a in alerts:
            if a["status"] == "firing":
                out[(a["labels"]["hostname"], a["labels"]["alertname"])] += 1
    return out


def resolved(bodies: list[dict[str, object]]) -> set[tuple[str, str]]:
    """(hostname, "resolved") of every resolved notice of ``gpu-lost`` received."""
    out = set()
    for body in bodies:
        alerts = body["alerts"]
        assert isinstance(alerts, list)
        for a in alerts:
            if a["status"] == "resolved" and a["labels"]["alertname"] == "gpu-lost":
                out.add((a["labels"]["hostname"], "resolved"))
    return out


#: node → words of the suggested repair its page must carry (app.health.actions).
ACTIONS: dict[str, str] = {
    "lost-001": "drain the node and power-cycle it",
    "xid79-001": "drain the node and power-cycle it",
    "xid48-001": "double-bit ECC: drain the GPU and reset it",
    "xid94-001": "contained ECC error: restart the job",
    "nvlink-001": "reset the GPU",
    "ib-001": "reseat or replace the cable or transceiver",
    "stop-001": "its fleetwatch-agent runs",
    "offbus-001": "drain the node and power-cycle it",
    "hang-001": "an NVML call on the GPU hangs: drain it and reset it",
    "flap-001": "reseat or replace the cable or transceiver",
    "xid48x3-001": "double-bit ECC: drain the GPU and reset it",
    "absent-001": "reboot the node",
}


def actions_paged(bodies: list[dict[str, object]]) -> dict[str, str]:
    """hostname → the description of its firing notice."""
    out = {}
    for body in bodies:
        alerts = body["alerts"]
        assert isinstance(alerts, list)
        for a in alerts:
            if a["status"] == "firing":
                out[a["labels"]["hostname"]] = a["annotations"].get("description", "")
    return out


def test_every_injected_fault_pages_exactly_once(
    settings: Settings, db_url: str, tmp_path: Path
) -> None:
    apply_edited_default_rules(
        settings, tmp_path, [(name, "    for: 1m\n", "    for: 30s\n") for name in PACK_FILES]
    )
    with receiver() as hook:
        add_webhook(settings, url=hook.url + "/hook", secret=None)
        server, thread, url = serve(settings)
        nodes = [FleetNode(h, create_token(db_url, h), 8, {"cluster": "e2e"}) for h in FAULTS]
        fleet = SimFleet(
            nodes,
            server_url=url,
            spool_root=tmp_path / "spool",
            interval_s=0.5,
            batch_interval_s=1.0,
            agent_options={"backoff_base_s": 0.2, "backoff_cap_s": 1.0},
        )
        wanted = {(host, fault[4]) for host, fault in FAULTS.items()}
        early = {h: f for h, f in FAULTS.items() if f[0] in AT_START}
        for host, (kind, index, duration_s, xid, _) in early.items():
            fleet.inject(host, kind, index, duration_s, xid)
        fleet.start()
        try:
            time.sleep(4.0)  # every node reports, alerts settle
            alerts_now = httpx.get(f"{url}/api/v1/alerts", timeout=10).json()
            quiet = [a for a in alerts_now if a["labels"]["hostname"] not in early]
            injected = time.monotonic()
            for host, (kind, index, duration_s, xid, _) in FAULTS.items():
                if host not in early:
                    fleet.inject(host, kind, index, duration_s, xid)
            first_page: dict[str, float] = {}  # host → seconds from injection to its page
            # The lost GPUs come back: gpu-lost resolves, the Xid 79 alert (health's 24-h
            # window) keeps firing; that must not page a second time.
            back = {("lost-001", "resolved"), ("xid79-001", "resolved"), ("offbus-001", "resolved")}
            back_at: float | None = None  # when every resolved notice of `back` was in
            while time.monotonic() < injected + 120 and not wanted <= set(pages(hook.bodies())):
                for host, _ in pages(hook.bodies()):
                    first_page.setdefault(host, time.monotonic() - injected)
                if back_at is None and back <= resolved(hook.bodies()):
                    back_at = time.monotonic()
                time.sleep(0.5)
            for host, _ in pages(hook.bodies()):
                first_page.setdefault(host, time.monotonic() - injected)
            paged_at = time.monotonic() - injected
            alerts = httpx.get(f"{url}/api/v1/alerts", timeout=10).json()
            time.sleep(12.0)  # a second page of any fault (the next timer ticks) arrives by now
            while time.monotonic() < injected + 120 and not back <= resolved(hook.bodies()):
                time.sleep(0.5)
            if back_at is None:
                back_at = time.monotonic()
            # A second page after the GPUs came back arrives within 8 s of their resolved
            # notices (which usually came long before the last page).
            time.sleep(max(0.0, back_at + 8.0 - time.monotonic()))
            after = httpx.get(f"{url}/api/v1/alerts", timeout=10).json()
            grouped = {
                host: [
                    httpx.get(f"{url}/api/v1/incidents/{i['id']}", timeout=10).json()
                    for i in httpx.get(
                        f"{url}/api/v1/incidents", params={"node": host}, timeout=10
                    ).json()
                ]
                for host in ("xid79-001", "xid48-001", "xid94-001", "xid48x3-001")
            }
        finally:
            fleet.stop(timeout_s=20)
            server.should_exit = True
            thread.join(timeout=15)
        got = pages(hook.bodies())
        described = actions_paged(hook.bodies())

    print(f"\nevery fault paged within {paged_at:.1f} s of injection ({db_url.split(':')[0]})")
    print("| fault | alerts firing when the last page came | inhibited | pages | s to page |")
    for host, (kind, _, _, xid, _) in FAULTS.items():
        mine = [a for a in alerts if a["labels"]["hostname"] == host and a["state"] == "firing"]
        firing = sorted(a["rule"] for a in mine)
        muted = sorted(a["rule"] for a in mine if a["inhibited_by"])
        sent = sorted(name for (h, name), n in got.items() if h == host for _ in range(n))
        label = f"{kind} {xid}" if xid else kind
        took = f"{first_page[host]:.0f}" if host in first_page else "-"
        print(
            f"| {label} | {', '.join(firing)} | {', '.join(muted) or '-'} | {', '.join(sent)} "
            f"| {took} |"
        )
    assert quiet == []
    assert back <= resolved(hook.bodies())
    still = {(a["labels"]["hostname"], a["rule"]) for a in after if a["state"] == "firing"}
    assert {("lost-001", "gpu-critical-xid"), ("xid79-001", "gpu-critical-xid")} <= still
    # The flapping port is Degraded for flapping too, muted while its port-down alert fires.
    [flapping] = [a for a in after if a["rule"] == "node-ib-port-flapping"]
    assert (flapping["labels"]["hostname"], flapping["state"]) == ("flap-001", "firing")
    assert flapping["inhibited_by"], flapping
    for host, fault in FAULTS.items():
        assert [(name, n) for (h, name), n in got.items() if h == host] == [(fault[4], 1)], host
    # Each Xid fault is one incident holding its Xid and the alert that paged for it.
    for host, found in grouped.items():
        assert len(found) == 1, (host, found)
        assert FAULTS[host][3] in found[0]["xids"], (host, found[0])
        assert FAULTS[host][4] in {a["rule"] for a in found[0]["alerts"]}, (host, found[0])
    # Every page carries the finding's suggested repair.
    for host, words in ACTIONS.items():
        assert "Suggested action: " in described[host], (host, described[host])
        assert words in described[host], (host, described[host])
