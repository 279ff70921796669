"""Each default health rule, through the real ingest API and the health API, on Postgres and
SQLite: the right state, the right reason code and the GPU it names."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.app.helpers import post_batch
from tests.app.section_factories import disk, nfs_mount, nic_port, nvlinks
from tests.factories import batch, create_token, gpu, iso, sample
from tests.live_server import LiveServer


def node_health(server: LiveServer, hostname: str = "node-a") -> dict[str, Any]:
    """``GET /api/v1/nodes/{hostname}/health`` (must answer 200), checked against the same node
    in the fleet-wide ``GET /api/v1/health``, which skips checks by fleet-wide suspects."""
    response = httpx.get(f"{server.url}/api/v1/nodes/{hostname}/health", timeout=30)
    assert response.status_code == 200, response.text
    single = response.json()
    fleet = httpx.get(f"{server.url}/api/v1/health", timeout=30).json()
    listed = next(n for n in fleet["nodes"] if n["hostname"] == hostname)
    assert (listed["state"], codes(listed)) == (single["state"], codes(single))
    return single


def ingest(server: LiveServer, db_url: str, payload: dict[str, Any]) -> None:
    """Post ``payload`` for its node (creating the token) and require a 200."""
    token = create_token(db_url, payload["node"]["hostname"])
    response = post_batch(server.url, token, payload)
    assert response.status_code == 200, response.text


def codes(health: dict[str, Any]) -> list[str]:
    """The reason codes of a node or GPU."""
    return [r["code"] for r in health["reasons"]]


def xid_event(xid: int, gpu_entry: dict[str, Any]) -> dict[str, Any]:
    """An Xid event naming ``gpu_entry``."""
    return {
        "occurred_at": iso(datetime.now(UTC) - timedelta(seconds=30)),
        "kind": "xid",
        "xid": xid,
        "gpu_uuid": gpu_entry["uuid"],
        "message": f"NVRM: Xid (PCI:{gpu_entry['pci_bus_id']}): {xid}, pid=1234",
    }


def test_a_node_with_clean_telemetry_is_healthy_with_no_reasons(
    server: LiveServer, db_url: str
) -> None:
    ingest(server, db_url, batch(gpus=2))

    health = node_health(server)

    assert health["state"] == "healthy"
    assert health["reasons"] == []
    assert [g["state"] for g in health["gpus"]] == ["healthy", "healthy"]


def test_a_lost_gpu_makes_the_gpu_and_node_unhealthy(server: LiveServer, db_url: str) -> None:
    gpus = [gpu(0), gpu(1, state="lost", state_reason="GPU_IS_LOST")]
    ingest(server, db_url, batch(gpus=gpus, samples_per_gpu=1))

    health = node_health(server)

    assert health["state"] == "unhealthy"
    assert health["gpus"][1]["state"] == "unhealthy"
    assert codes(health["gpus"][1]) == ["gpu_lost"]
    assert health["reasons"][0]["gpu_index"] == 1
    assert health["reasons"][0]["evidence"] == "/nodes/node-a#gpus-heading"


def test_an_xid_79_event_makes_its_gpu_unhealthy(server: LiveServer, db_url: str) -> None:
    gpus = [gpu(0), gpu(1)]
    ingest(server, db_url, batch(gpus=gpus, events=[xid_event(79, gpus[1])]))

    health = node_health(server)

    assert health["state"] == "unhealthy"
    assert codes(health["gpus"][1]) == ["xid_79"]
    assert health["gpus"][0]["state"] == "healthy"
    reason = health["reasons"][0]
    assert "fallen off the bus" in reason["text"]
    assert reason["since"] is not None
    assert reason["evidence"].endswith("#events-heading")


def test_an_application_xid_13_is_an_event_but_does_not_change_health(
    server: LiveServer, db_url: str
) -> None:
    gpus = [gpu(0)]
    ingest(server, db_url, batch(gpus=gpus, events=[xid_event(13, gpus[0])]))

    assert node_health(server)["state"] == "healthy"


def test_a_gsp_xid_119_makes_the_gpu_degraded(server: LiveServer, db_url: str) -> None:
    gpus = [gpu(0)]
    ingest(server, db_url, batch(gpus=gpus, events=[xid_event(119, gpus[0])]))

    health = node_health(server)

    assert health["state"] == "degraded"
    assert codes(health) == ["xid_119"]


def test_xid_45_preemptive_cleanup_is_an_event_never_a_finding(
    server: LiveServer, db_url: str
) -> None:
    """NVIDIA's catalog: Xid 45 is the cleanup after an earlier error or a killed application
    (WORKFLOW_XID_45: follow the Xid it came with), so alone it leaves the GPU Healthy."""
    gpus = [gpu(0)]
    ingest(server, db_url, batch(gpus=gpus, events=[xid_event(45, gpus[0])] * 3))

    assert node_health(server)["state"] == "healthy"


def test_xid_92_once_is_watched_and_in_two_bursts_degrades_with_an_escalation(
    server: LiveServer, db_url: str
) -> None:
    """Xid 92 (high single-bit ECC rate; catalog: IGNORE, investigate CONTACT_SUPPORT): one
    burst leaves GPU 0 Healthy; two bursts an hour apart on GPU 1 make it Degraded, its
    action escalated from watch to hardware inspection naming the GPU."""
    gpus = [gpu(0), gpu(1)]
    now = datetime.now(UTC)
    once = [xid_event(92, gpus[0]), xid_event(92, gpus[0])]
    twice = []
    for seconds in (3700, 30):
        event = xid_event(92, gpus[1])
        event["occurred_at"] = iso(now - timedelta(seconds=seconds))
        twice.append(event)
    ingest(server, db_url, batch(gpus=gpus, events=[*once, *twice]))

    health = node_health(server)

    assert health["gpus"][0]["state"] == "healthy"
    assert health["gpus"][1]["state"] == "degraded"
    reason = health["gpus"][1]["reasons"][0]
    assert reason["code"] == "xid_92"
    assert "in 2 separate bursts" in reason["text"]
    action = reason["action"]
    assert (action["code"], action["escalated_from"], action["occurrences"]) == (
        "inspect_hardware",
        "watch",
        2,
    )
    assert f"on GPU 1 ({gpus[1]['uuid']}, PCI {gpus[1]['pci_bus_id']})" in action["text"]
    # The node's own list (what a node-scoped alert's {suggested_action} reads) names it too.
    [listed] = [r for r in health["reasons"] if r["code"] == "xid_92"]
    assert listed["action"]["text"] == action["text"]


def test_a_gpu_missing_from_the_inventory_makes_the_node_unhealthy(
    server: LiveServer, db_url: str
) -> None:
    ingest(server, db_url, batch(gpus=2, samples_per_gpu=1))
    ingest(server, db_url, batch(gpus=[gpu(0)], samples_per_gpu=1))

    health = node_health(server)

    assert health["state"] == "unhealthy"
    assert codes(health) == ["gpu_missing"]
    assert health["reasons"][0]["gpu_index"] == 1


def test_an_nvlink_down_makes_its_gpu_unhealthy(server: LiveServer, db_url: str) -> None:
    at = datetime.now(UTC) - timedelta(seconds=5)
    payload = batch(gpus=2, samples_per_gpu=1)
    g0, g1 = payload["gpus"]
    payload["nvlinks"] = nvlinks(g0, at, links=4) + nvlinks(g1, at, links=4)
    payload["nvlinks"][5]["state"] = "down"
    ingest(server, db_url, payload)

    health = node_health(server)

    assert health["state"] == "unhealthy"
    assert codes(health["gpus"][1]) == ["nvlink_down"]
    assert "link 1" in health["gpus"][1]["reasons"][0]["text"]


def test_an_ib_port_that_went_from_active_to_down_is_unhealthy(
    server: LiveServer, db_url: str
) -> None:
    before = datetime.now(UTC) - timedelta(seconds=60)
    first = batch(gpus=1, samples_per_gpu=1, start=before)
    first["nic_ports"] = [nic_port(before, "mlx5_0"), nic_port(before, "mlx5_1", state="DOWN")]
    ingest(server, db_url, first)
    assert node_health(server)["state"] == "healthy"  # never up: not a port that went down

    now = datetime.now(UTC) - timedelta(seconds=1)
    second = batch(gpus=1, samples_per_gpu=1, start=now)
    second["nic_ports"] = [
        nic_port(now, "mlx5_0", state="DOWN", phys_state="Disabled"),
        nic_port(now, "mlx5_1", state="DOWN"),
    ]
    ingest(server, db_url, second)

    health = node_health(server)
    assert health["state"] == "unhealthy"
    assert codes(health) == ["ib_port_down"]
    assert "mlx5_0" in health["reasons"][0]["text"]


def ports_reading(at: datetime, **counts: int) -> dict[str, Any]:
    """A one-sample batch at ``at`` whose ACTIVE ports have these ``link_downed_count``s."""
    payload = batch(gpus=1, samples_per_gpu=1, start=at)
    payload["nic_ports"] = [nic_port(at, dev, link_downed_count=n) for dev, n in counts.items()]
    return payload


def test_a_port_whose_link_went_down_twice_within_an_hour_is_flapping(
    server: LiveServer, db_url: str
) -> None:
    now = datetime.now(UTC) - timedelta(seconds=1)
    old = now - timedelta(minutes=90)  # before the flap window
    middle = now - timedelta(minutes=50)
    ports = ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4")
    for at, counts in (
        (old, (0, 0, 5, 40, None)),
        (middle, (7, 0, 5, 40, 1)),
        (now, (7, 2, 6, 1, 9)),
    ):
        ingest(server, db_url, ports_reading(at, **dict(zip(ports, counts, strict=True))))
    # mlx5_0 went down 7 times before the hour; mlx5_1 twice within it; mlx5_2 once; mlx5_3's
    # counter went back (driver reloaded) and counts 1 since; mlx5_4 8 times from its first
    # reading with a count.

    health = node_health(server)

    assert health["state"] == "degraded"
    assert [r["text"] for r in health["reasons"]] == [
        "mlx5_1 port 1 is flapping: its link went down 2 times within 1 h (link_downed_count)",
        "mlx5_4 port 1 is flapping: its link went down 8 times within 1 h (link_downed_count)",
    ]
    assert {r["code"] for r in health["reasons"]} == {"ib_port_flapping"}
    assert health["reasons"][0]["evidence"] == "/nodes/node-a#nics-heading"
    assert health["reasons"][0]["action"]["code"] == "check_fabric"


def test_a_flapping_port_down_now_is_down_and_still_flapping(
    server: LiveServer, db_url: str
) -> None:
    now = datetime.now(UTC) - timedelta(seconds=1)
    ingest(server, db_url, ports_reading(now - timedelta(minutes=30), mlx5_0=0, mlx5_1=0))
    down = batch(gpus=1, samples_per_gpu=1, start=now)
    down["nic_ports"] = [
        nic_port(now, "mlx5_0", state="DOWN", phys_state="Polling", link_downed_count=3),
        nic_port(now, "mlx5_1"),
    ]
    ingest(server, db_url, down)

    health = node_health(server)

    assert health["state"] == "unhealthy"
    assert [r["code"] for r in health["reasons"]] == ["ib_port_down", "ib_port_flapping"]


def test_gpus_the_agent_counts_but_the_driver_never_listed_are_missing(
    server: LiveServer, db_url: str
) -> None:
    payload = batch(gpus=2, samples_per_gpu=1)
    payload["node"]["expected_gpu_count"] = 3  # on PCI, but never enumerated: lost at start

    ingest(server, db_url, payload)
    health = node_health(server)

    assert health["state"] == "unhealthy"
    assert codes(health) == ["gpu_missing"]
    [reason] = health["reasons"]
    assert reason["gpu_index"] is None
    assert reason["text"] == (
        "1 of the node's 3 GPUs never entered its inventory: the driver does not enumerate it "
        "(lost before the agent started, or in an unknown error state)"
    )
    assert [g["state"] for g in health["gpus"]] == ["healthy", "healthy"]
    payload = batch(gpus=2, samples_per_gpu=1)
    payload["node"]["expected_gpu_count"] = 2
    ingest(server, db_url, payload)
    assert node_health(server)["state"] == "healthy"


def test_a_port_or_nvlink_that_stops_reporting_while_the_others_go_on_is_down(
    server: LiveServer, db_url: str
) -> None:
    now = datetime.now(UTC) - timedelta(seconds=1)
    g = gpu(0)
    early = now - timedelta(minutes=15)
    first = batch(gpus=[g], samples_per_gpu=1, start=early)
    first["nic_ports"] = [nic_port(early, dev) for dev in ("mlx5_0", "mlx5_1", "mlx5_2")]
    first["nvlinks"] = nvlinks(g, early, links=4)
    ingest(server, db_url, first)
    # 15 minutes on, mlx5_1 and NVLink 3 are no longer read (no "down" reading: they vanished)
    # and mlx5_2 changed state alone 5 minutes ago (the agent sends a change at once).
    changed = now - timedelta(minutes=5)
    middle = batch(gpus=[g], samples_per_gpu=1, start=changed)
    middle["nic_ports"] = [nic_port(changed, "mlx5_2", phys_state="LinkUp", rate_gbps=200.0)]
    ingest(server, db_url, middle)
    last = batch(gpus=[g], samples_per_gpu=1, start=now)
    last["nic_ports"] = [nic_port(now, "mlx5_0"), nic_port(now, "mlx5_2")]
    last["nvlinks"] = nvlinks(g, now, links=3)
    ingest(server, db_url, last)

    health = node_health(server)

    assert health["state"] == "unhealthy"
    node_reasons = [r for r in health["reasons"] if r["gpu_index"] is None]
    assert [(r["code"], r["text"]) for r in node_reasons] == [
        (
            "ib_port_down",
            "mlx5_1 port 1 stopped reporting (last read ACTIVE): the adapter or its driver is gone",
        )
    ]
    assert [(r["code"], r["text"]) for r in health["gpus"][0]["reasons"]] == [
        ("nvlink_down", "NVLink 3 stopped reporting (the GPU's others report)")
    ]


def test_a_port_unchanged_since_a_long_send_interval_is_not_taken_for_gone(
    server: LiveServer, db_url: str
) -> None:
    # --host-interval 3600: both ports read 20 minutes ago; mlx5_0 went down now and was sent
    # alone at once. mlx5_1 is unchanged, not gone.
    now = datetime.now(UTC) - timedelta(seconds=1)
    round_at = now - timedelta(minutes=20)
    first = batch(gpus=1, samples_per_gpu=1, start=round_at)
    first["nic_ports"] = [nic_port(round_at, "mlx5_0"), nic_port(round_at, "mlx5_1")]
    ingest(server, db_url, first)
    alone = batch(gpus=1, samples_per_gpu=1, start=now)
    alone["nic_ports"] = [nic_port(now, "mlx5_0", state="DOWN", phys_state="Polling")]
    ingest(server, db_url, alone)

    health = node_health(server)

    assert [r["text"] for r in health["reasons"]] == ["mlx5_0 port 1 is DOWN (was ACTIVE)"]


@pytest.mark.parametrize(
    ("sent", "stored"),
    [(4.0, 4), (0, 0), ("8", None), (-1, None), (1e9, None), (True, None), (2.5, None)],
)
def test_an_odd_expected_gpu_count_is_nulled_and_named_never_the_batch(
    server: LiveServer, db_url: str, sent: Any, stored: int | None
) -> None:
    payload = batch(gpus=2, samples_per_gpu=1)
    payload["node"]["expected_gpu_count"] = sent

    token = create_token(db_url, payload["node"]["hostname"])
    answer = post_batch(server.url, token, payload).json()  # samples stored
    node = httpx.get(f"{server.url}/api/v1/nodes/node-a", timeout=30).json()

    assert node["expected_gpu_count"] == stored
    # A value not taken is named in the answer, as every value the server nulls.
    nulled = [] if stored is not None else [["node", "expected_gpu_count"]]
    assert [item["loc"] for item in answer["left_out"]] == nulled
    assert answer["samples_stored"] == 2
    assert len(node["gpus"]) == 2 and node["gpus"][0]["latest"]["temp_c"] is not None


def test_a_gpu_without_samples_while_the_others_report_is_unresponsive(
    server: LiveServer, db_url: str
) -> None:
    now = datetime.now(UTC) - timedelta(seconds=1)
    gpus = [gpu(0), gpu(1)]
    ingest(server, db_url, batch(gpus=gpus, samples_per_gpu=1, start=now - timedelta(seconds=300)))
    late = batch(gpus=gpus, samples_per_gpu=0)
    late["samples"] = [sample(gpus[1], now - timedelta(seconds=s)) for s in (200, 100, 0)]
    ingest(server, db_url, late)

    health = node_health(server)

    assert health["state"] == "unhealthy"
    assert codes(health["gpus"][0]) == ["gpu_unresponsive"]
    assert codes(health["gpus"][1]) == []
    [reason] = health["reasons"]
    assert reason["gpu_index"] == 0
    assert reason["text"].startswith("GPU 0 has sent no sample for 5 min while the node reports")
    assert reason["action"]["code"] == "reset_gpu"


def test_a_listed_gpu_that_never_sent_a_sample_is_unresponsive(
    server: LiveServer, db_url: str
) -> None:
    gpus = [gpu(0), gpu(1)]
    payload = batch(gpus=gpus, samples_per_gpu=0)
    payload["samples"] = [sample(gpus[0], datetime.now(UTC) - timedelta(seconds=1))]
    ingest(server, db_url, payload)

    health = node_health(server)

    assert codes(health["gpus"][1]) == ["gpu_unresponsive"]
    assert health["reasons"][0]["text"].startswith(
        "GPU 1 is listed but has sent no sample while the node reports"
    )


def test_batches_without_samples_and_with_collection_errors_make_every_gpu_unresponsive(
    server: LiveServer, db_url: str
) -> None:
    """Every GPU's NVML call hung (or a one-GPU node's): the batches keep coming, with the
    agent's errors and no samples."""
    now = datetime.now(UTC) - timedelta(seconds=1)
    gpus = [gpu(0), gpu(1)]
    ingest(server, db_url, batch(gpus=gpus, samples_per_gpu=1, start=now - timedelta(minutes=5)))
    hung = batch(gpus=gpus, samples_per_gpu=0)
    hung["collection"] = {
        "collector": "nvml",
        "errors": [{"source": "nvml", "message": "nvmlDeviceGetUtilizationRates timed out"}],
    }
    ingest(server, db_url, hung)

    health = node_health(server)

    assert [codes(g) for g in health["gpus"]] == [["gpu_unresponsive"], ["gpu_unresponsive"]]


def test_a_gpu_a_sample_behind_the_others_is_not_unresponsive(
    server: LiveServer, db_url: str
) -> None:
    now = datetime.now(UTC) - timedelta(seconds=1)
    gpus = [gpu(0), gpu(1)]
    payload = batch(gpus=gpus, samples_per_gpu=0)
    payload["samples"] = [
        sample(gpus[0], now - timedelta(seconds=110)),  # within stale_after_s (120 s)
        sample(gpus[1], now),
    ]
    ingest(server, db_url, payload)

    assert node_health(server)["state"] == "healthy"


def test_a_pcie_link_below_its_maximum_makes_the_gpu_degraded(
    server: LiveServer, db_url: str
) -> None:
    at = datetime.now(UTC) - timedelta(seconds=5)
    payload = batch(gpus=1, samples_per_gpu=0)
    link = {"pcie_link_gen_max": 5, "pcie_link_width_max": 16}
    payload["samples"] = [
        sample(payload["gpus"][0], at, pcie_link_gen=5, pcie_link_width=8, **link)
    ]
    ingest(server, db_url, payload)

    health = node_health(server)

    assert health["state"] == "degraded"
    assert codes(health) == ["pcie_downtrained"]
    assert health["gpus"][0]["reasons"][0]["text"] == "PCIe link width x8 of x16 (gen 5 of 5)"


def test_a_pcie_generation_below_its_maximum_alone_is_healthy(
    server: LiveServer, db_url: str
) -> None:
    """An idle GPU lowers its PCIe generation to save power (gen 1 of 5 at full width): no
    fault, as the default rule gpu-pcie-link-downtrained judges it (width only)."""
    at = datetime.now(UTC) - timedelta(seconds=5)
    payload = batch(gpus=1, samples_per_gpu=0)
    link = {"pcie_link_gen_max": 5, "pcie_link_width_max": 16}
    payload["samples"] = [
        sample(payload["gpus"][0], at, pcie_link_gen=1, pcie_link_width=16, **link)
    ]
    ingest(server, db_url, payload)

    assert node_health(server)["state"] == "healthy"


def test_remapped_rows_pending_make_the_gpu_degraded(server: LiveServer, db_url: str) -> None:
    at = datetime.now(UTC) - timedelta(seconds=5)
    payload = batch(gpus=1, samples_per_gpu=0)
    payload["samples"] = [sample(payload["gpus"][0], at, remapped_rows_pending=1)]
    ingest(server, db_url, payload)

    assert codes(node_health(server)) == ["remapped_rows_pending"]


def throttled_batch(flags: list[int]) -> dict[str, Any]:
    """One GPU with one sample per entry of ``flags`` (clock event reasons), 10 s apart."""
    start = datetime.now(UTC) - timedelta(seconds=10 * len(flags))
    payload = batch(gpus=1, samples_per_gpu=0)
    g = payload["gpus"][0]
    payload["samples"] = [
        sample(g, start + timedelta(seconds=10 * i), clocks_event_reasons=bits)
        for i, bits in enumerate(flags)
    ]
    return payload


def test_sustained_thermal_throttling_makes_the_gpu_degraded(
    server: LiveServer, db_url: str
) -> None:
    ingest(server, db_url, throttled_batch([0x40, 0x20, 0x40, 0x8, 0x40, 0x1]))

    health = node_health(server)

    assert health["state"] == "degraded"
    assert codes(health) == ["thermal_throttle"]


def test_a_single_throttled_sample_is_not_sustained(server: LiveServer, db_url: str) -> None:
    ingest(server, db_url, throttled_batch([0, 0, 0x40, 0, 0, 0]))

    assert node_health(server)["state"] == "healthy"


def test_the_hw_power_brake_degrades_a_gpu(server: LiveServer, db_url: str) -> None:
    ingest(server, db_url, throttled_batch([0x80, 0x84, 0x80, 0x80, 0x80, 0x4]))

    health = node_health(server)

    assert health["state"] == "degraded"
    assert codes(health) == ["power_throttle"]


def test_the_sw_power_cap_of_a_busy_gpu_is_healthy(server: LiveServer, db_url: str) -> None:
    """0x4 SW power cap is a busy GPU at its power limit, normal under full load."""
    ingest(server, db_url, throttled_batch([0x4, 0x4, 0x4, 0x4, 0x4, 0x4]))

    assert node_health(server)["state"] == "healthy"


def test_high_disk_wait_or_nfs_rtt_makes_the_node_degraded(server: LiveServer, db_url: str) -> None:
    at = datetime.now(UTC) - timedelta(seconds=5)
    payload = batch(gpus=1, samples_per_gpu=1)
    payload["disks"] = [disk(at, "nvme0n1"), disk(at, "nvme1n1", avg_wait_s=0.2)]
    payload["nfs_mounts"] = [nfs_mount(at, avg_rtt_s=0.5)]
    ingest(server, db_url, payload)

    health = node_health(server)

    assert health["state"] == "degraded"
    assert codes(health) == ["storage_latency_high"]
    assert "nvme1n1" in health["reasons"][0]["text"]
    assert "/home" in health["reasons"][0]["text"]
    assert health["reasons"][0]["gpu_index"] is None


def test_each_reason_carries_its_suggested_repair_and_repeats_escalate(
    server: LiveServer, db_url: str
) -> None:
    """Xid 79 on GPU 1 in three bursts over three days (two reboots did not hold): hardware
    inspection; the same Xid once on GPU 0: reboot; Xid 154's own recovery action wins; the
    node page shows each with its source."""
    gpus = [gpu(0), gpu(1), gpu(2)]
    now = datetime.now(UTC)
    repeated = []
    for days_ago in (3, 2, 0):
        for seconds in (40, 30):  # two lines 10 s apart: one burst
            event = xid_event(79, gpus[1])
            event["occurred_at"] = iso(now - timedelta(days=days_ago, seconds=seconds))
            repeated.append(event)
    recovery = xid_event(154, gpus[2])
    recovery["message"] = (
        f"NVRM: Xid (PCI:{gpus[2]['pci_bus_id']}): 154, GPU recovery action changed from 0x0 "
        "(None) to 0x2 (Node Reboot Required)"
    )
    recovery["occurred_at"] = iso(now - timedelta(seconds=100))
    unreadable = xid_event(154, gpus[2])  # newer, but says nothing readable: the reboot stands
    unreadable["message"] = "NVRM: Xid 154 something else"
    events = [*repeated, xid_event(79, gpus[0]), recovery, unreadable]
    ingest(server, db_url, batch(gpus=gpus, events=events))

    health = node_health(server)

    once, thrice = health["gpus"][0]["reasons"][0], health["gpus"][1]["reasons"][0]
    assert (once["code"], thrice["code"]) == ("xid_79", "xid_79")
    assert "×2 in the last 24 h" in thrice["text"]  # the event window counts lines
    assert once["action"] == {
        "code": "reboot_node",
        "title": "Drain the node and reboot it",
        "text": "fallen off the bus: drain the node and power-cycle it (a GPU reset cannot "
        "reach it)",
        "source": "NVIDIA Xid catalog: RESTART_BM",
        "escalated_from": None,
        "occurrences": 1,
    }
    action = thrice["action"]
    assert (action["code"], action["escalated_from"], action["occurrences"]) == (
        "inspect_hardware",
        "reboot_node",
        3,
    )
    assert "in 3 separate bursts within 7 days" in action["text"]
    driver = health["gpus"][2]["reasons"][0]["action"]
    assert (driver["code"], driver["source"]) == ("reboot_node", "NVIDIA Xid catalog: XID_154_EVAL")
    assert "0x2 (Node Reboot Required)" in driver["text"]

    page = httpx.get(f"{server.url}/nodes/node-a", timeout=30)
    assert page.status_code == 200
    assert "escalated from reboot node" in page.text
    assert "→ inspect hardware" in page.text and "NVIDIA Xid catalog: RESTART_BM" in page.text
