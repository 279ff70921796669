"""Every rule kind on data stored in Postgres and SQLite (through the ingest service), evaluated
with a controllable clock: which entities fire, with which value, and which must not."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.app.section_factories import disk, nic_port, topology
from tests.factories import (
    add_rules,
    alert_states,
    batch,
    evaluate_at,
    gpu,
    iso,
    sample,
    store_payload,
    wipe_alerts,
)

NOW = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)


@pytest.fixture
def url(db_url: str) -> Iterator[str]:
    """``db_url`` with the alert tables wiped after the test."""
    yield db_url
    wipe_alerts(db_url)


def node_batch(
    hostname: str,
    gpus: list[dict[str, Any]],
    *,
    at: datetime = NOW,
    seconds: tuple[int, ...] = (0, 10, 20, 30),
    per_gpu: dict[int, dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A batch of ``gpus`` sampled ``seconds`` before ``at``, metrics overridden per GPU
    index by ``per_gpu``."""
    payload = batch(hostname, gpus=gpus, samples_per_gpu=0, **extra)
    payload["samples"] = [
        sample(g, at - timedelta(seconds=s), **(per_gpu or {}).get(g["index"], {}))
        for g in gpus
        for s in seconds
    ]
    return payload


def rule(name: str, condition: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A rule document."""
    return {"name": name, "condition": condition, **fields}


def test_threshold_avg_over_a_window_fires_only_on_the_gpu_above_it(url: str) -> None:
    gpus = [gpu(0), gpu(1)]
    store_payload(url, node_batch("node-a", gpus, per_gpu={1: {"temp_c": 90}}), received_at=NOW)
    cond = {
        "kind": "threshold",
        "target": "gpu",
        "metric": "temp_c",
        "aggregation": "avg",
        "window": "1m",
        "op": ">",
        "threshold": 85,
    }
    add_rules(url, rule("hot", cond))

    evaluate_at(url, NOW)

    assert alert_states(url) == {("hot", "node-a/1"): ("firing", 90.0)}


def test_threshold_window_ends_at_the_nodes_newest_sample_and_max_sees_a_spike(
    url: str,
) -> None:
    gpus = [gpu(0)]
    payload = node_batch("node-a", gpus)
    # A 95 °C spike 25 s before the newest sample; the newest itself is 55 °C.
    payload["samples"][2]["temp_c"] = 95
    store_payload(url, payload, received_at=NOW)
    base = {"kind": "threshold", "target": "gpu", "metric": "temp_c", "op": ">", "threshold": 80}
    add_rules(
        url,
        rule("max-30s", {**base, "aggregation": "max", "window": "30s"}),
        rule("max-15s", {**base, "aggregation": "max", "window": "15s"}),
        rule("last", {**base, "aggregation": "last"}),
    )

    evaluate_at(url, NOW + timedelta(seconds=5))

    assert alert_states(url) == {("max-30s", "node-a/0"): ("firing", 95.0)}


def test_a_metric_not_supported_never_fires_a_below_threshold_rule(url: str) -> None:
    gpus = [gpu(0, mig_mode="enabled"), gpu(1)]
    store_payload(
        url,
        node_batch("node-a", gpus, per_gpu={0: {"util_gpu_pct": None}, 1: {"util_gpu_pct": 2}}),
        received_at=NOW,
    )
    cond = {
        "kind": "threshold",
        "target": "gpu",
        "metric": "util_gpu_pct",
        "aggregation": "avg",
        "window": "1m",
        "op": "<",
        "threshold": 5,
    }
    add_rules(url, rule("idle", cond), rule("idle-nodata-firing", cond, no_data="firing"))

    evaluate_at(url, NOW)

    assert alert_states(url) == {
        ("idle", "node-a/1"): ("firing", 2.0),
        ("idle-nodata-firing", "node-a/0"): ("firing", None),
        ("idle-nodata-firing", "node-a/1"): ("firing", 2.0),
    }


def test_a_metric_the_gpu_does_not_support_is_never_no_data_nor_absent(url: str) -> None:
    """Issue 13 item 8: ``no_data: firing`` fired on a GPU whose power reading is not supported
    (a property of the card). A value the agent did not send, or sent implausible, still is
    no data."""
    gpus = [gpu(0, unavailable={"power_w": "NOT_SUPPORTED"}), gpu(1), gpu(2)]
    per_gpu = {0: {"power_w": None}, 1: {"power_w": None}, 2: {"power_w": 10**9}}
    store_payload(url, node_batch("node-a", gpus, per_gpu=per_gpu), received_at=NOW)
    cond = {
        "kind": "threshold",
        "target": "gpu",
        "metric": "power_w",
        "aggregation": "avg",
        "window": "1m",
        "op": ">",
        "threshold": 600,
    }
    absent = {"kind": "absence", "target": "metric", "metric": "power_w", "after": "1m"}
    add_rules(url, rule("hot-nodata", cond, no_data="firing"), rule("no-power", absent))

    evaluate_at(url, NOW + timedelta(seconds=30))

    assert alert_states(url) == {
        ("hot-nodata", "node-a/1"): ("firing", None),  # not sent
        ("hot-nodata", "node-a/2"): ("firing", None),  # dropped as implausible
        ("no-power", "node-a/1"): ("firing", None),
        ("no-power", "node-a/2"): ("firing", None),
    }


def test_scope_by_labels_hostname_pattern_and_gpu_model(url: str) -> None:
    hot = {0: {"temp_c": 90}}
    store_payload(
        url,
        node_batch(
            "gpu-a-1",
            [gpu(0, hostname="gpu-a-1")],
            per_gpu=hot,
            labels={"cluster": "a", "team": "ml"},
        ),
        received_at=NOW,
    )
    store_payload(
        url,
        node_batch(
            "gpu-b-1",
            [gpu(0, hostname="gpu-b-1", name="NVIDIA L40S")],
            per_gpu=hot,
            labels={"cluster": "b", "team": "ml"},
        ),
        received_at=NOW,
    )
    cond = {"kind": "threshold", "target": "gpu", "metric": "temp_c", "op": ">", "threshold": 80}
    add_rules(
        url,
        rule("cluster-a", cond, scope={"labels": {"cluster": "a"}}),
        rule("pattern-b", cond, scope={"nodes": ["gpu-b-*"]}),
        rule("h100", cond, scope={"gpu_models": ["*H100*"], "labels": {"team": "ml"}}),
    )

    evaluate_at(url, NOW)

    assert set(alert_states(url)) == {
        ("cluster-a", "gpu-a-1/0"),
        ("pattern-b", "gpu-b-1/0"),
        ("h100", "gpu-a-1/0"),
    }


def test_gpu_lost_and_missing_count_come_from_the_inventory_state(url: str) -> None:
    store_payload(url, node_batch("node-a", [gpu(0), gpu(1)]), received_at=NOW)
    later = NOW + timedelta(seconds=30)
    lost = [gpu(0, state="lost", state_reason="GPU_IS_LOST")]
    store_payload(url, node_batch("node-a", lost, at=later, seconds=(0,)), received_at=later)
    add_rules(
        url,
        rule(
            "lost",
            {
                "kind": "threshold",
                "target": "gpu",
                "metric": "gpu_lost",
                "op": "==",
                "threshold": 1,
            },
        ),
        rule(
            "missing",
            {
                "kind": "threshold",
                "target": "node",
                "metric": "gpu_missing_count",
                "op": ">",
                "threshold": 0,
            },
        ),
    )

    evaluate_at(url, later)

    assert alert_states(url) == {
        ("lost", "node-a/0"): ("firing", 1.0),
        ("missing", "node-a"): ("firing", 1.0),
    }


def test_storage_and_nic_thresholds_make_one_instance_per_device_and_port(url: str) -> None:
    payload = node_batch("node-a", [gpu(0)])
    payload["disks"] = [disk(NOW, "nvme0n1", avg_wait_s=0.2), disk(NOW, "nvme1n1")]
    payload["nic_ports"] = [nic_port(NOW, "mlx5_0", state="DOWN"), nic_port(NOW, "mlx5_1")]
    store_payload(url, payload, received_at=NOW)
    add_rules(
        url,
        rule(
            "slow-disk",
            {
                "kind": "threshold",
                "target": "disk",
                "metric": "avg_wait_s",
                "aggregation": "avg",
                "window": "5m",
                "op": ">",
                "threshold": 0.05,
            },
        ),
        rule(
            "port-down",
            {
                "kind": "threshold",
                "target": "nic",
                "metric": "port_active",
                "op": "==",
                "threshold": 0,
            },
        ),
    )

    evaluate_at(url, NOW)

    assert alert_states(url) == {
        ("slow-disk", "node-a/nvme0n1"): ("firing", 0.2),
        ("port-down", "node-a/mlx5_0/1"): ("firing", 0.0),
    }


def test_absence_is_judged_by_server_receive_time_not_agent_clock(url: str) -> None:
    # node-a's agent clock is 1 h behind: its samples look old, but it reports every 10 s.
    skewed = NOW - timedelta(hours=1)
    store_payload(
        url,
        node_batch("node-a", [gpu(0)], at=skewed, sent_at=iso(skewed)),
        received_at=NOW,
        keep_sent_at=True,
    )
    store_payload(url, node_batch("node-b", [gpu(0, hostname="node-b")]), received_at=NOW)
    add_rules(url, rule("stale", {"kind": "absence", "target": "node", "after": "2m"}))

    evaluate_at(url, NOW + timedelta(seconds=60))
    assert alert_states(url) == {}

    store_payload(
        url,
        node_batch("node-a", [gpu(0)], at=skewed + timedelta(seconds=110), sent_at=iso(skewed)),
        received_at=NOW + timedelta(seconds=110),
        keep_sent_at=True,
    )
    evaluate_at(url, NOW + timedelta(seconds=150))

    assert alert_states(url) == {("stale", "node-b"): ("firing", 150.0)}


def test_a_node_that_never_reported_is_not_absent(url: str) -> None:
    """Issue 13: creating a node's token (the node exists, has never sent a batch) pages
    nobody; once it has reported and then stops, it does."""
    from tests.factories import create_token

    create_token(url, "node-new")
    store_payload(url, node_batch("node-a", [gpu(0)]), received_at=NOW)
    add_rules(url, rule("stale", {"kind": "absence", "target": "node", "after": "2m"}))

    evaluate_at(url, NOW + timedelta(hours=1))

    assert alert_states(url) == {("stale", "node-a"): ("firing", 3600.0)}


def test_absence_of_a_metric_counts_only_non_null_values_received(url: str) -> None:
    store_payload(
        url, node_batch("node-a", [gpu(0), gpu(1)], per_gpu={1: {"fan_pct": 40}}), received_at=NOW
    )
    add_rules(
        url,
        rule("no-fan", {"kind": "absence", "target": "metric", "metric": "fan_pct", "after": "1m"}),
    )

    evaluate_at(url, NOW + timedelta(seconds=30))

    assert alert_states(url) == {("no-fan", "node-a/0"): ("firing", None)}


def xid(gpu_entry: dict[str, Any], code: int, at: datetime) -> dict[str, Any]:
    """An Xid event of ``gpu_entry`` at ``at``."""
    return {
        "occurred_at": iso(at),
        "kind": "xid",
        "xid": code,
        "gpu_uuid": gpu_entry["uuid"],
        "message": f"NVRM: Xid (PCI:{gpu_entry['pci_bus_id']}): {code}",
    }


def test_two_identical_xids_a_minute_apart_count_twice(url: str) -> None:
    g = gpu(0)
    events = [
        xid(g, 79, NOW - timedelta(seconds=90)),
        xid(g, 79, NOW - timedelta(seconds=30)),
        xid(g, 13, NOW - timedelta(seconds=20)),
    ]
    store_payload(url, node_batch("node-a", [g], events=events), received_at=NOW)
    add_rules(
        url,
        rule("xid79-twice", {"kind": "event", "xids": [79], "min_count": 2, "window": "5m"}),
        rule("xid79-thrice", {"kind": "event", "xids": [79], "min_count": 3, "window": "5m"}),
        rule("any-3", {"kind": "event", "event_kinds": ["*"], "min_count": 3, "window": "5m"}),
    )

    evaluate_at(url, NOW)
    assert alert_states(url) == {
        ("xid79-twice", "node-a/0"): ("firing", 2.0),
        ("any-3", "node-a/0"): ("firing", 3.0),
    }

    # 5 min later the first Xid 79 has left the window: resolved.
    evaluate_at(url, NOW + timedelta(seconds=215))
    assert alert_states(url)[("xid79-twice", "node-a/0")] == ("resolved", 2.0)


def test_rate_of_corrected_ecc_per_hour(url: str) -> None:
    gpus = [gpu(0), gpu(1)]
    payload = node_batch("node-a", gpus, seconds=(0, 600, 1200, 1800))
    for s in payload["samples"]:
        age_s = (NOW - datetime.fromisoformat(s["sampled_at"])).total_seconds()
        fast = s["gpu_uuid"] == gpus[0]["uuid"]
        # GPU 0: +50 per 10 min (300/h); GPU 1: +5 per 10 min (30/h).
        s["ecc_corrected_volatile_count"] = int((1800 - age_s) / 600 * (50 if fast else 5))
    store_payload(url, payload, received_at=NOW)
    add_rules(
        url,
        rule(
            "ecc",
            {
                "kind": "rate",
                "metric": "ecc_corrected_volatile_count",
                "window": "1h",
                "per": "h",
                "op": ">",
                "threshold": 100,
            },
        ),
    )

    evaluate_at(url, NOW)

    assert alert_states(url) == {("ecc", "node-a/0"): ("firing", 300.0)}


def test_a_counter_reset_is_no_data_not_a_negative_rate(url: str) -> None:
    payload = node_batch("node-a", [gpu(0)], seconds=(0, 600))
    payload["samples"][0]["ecc_corrected_volatile_count"] = 2  # newest, after a reset
    payload["samples"][1]["ecc_corrected_volatile_count"] = 900
    store_payload(url, payload, received_at=NOW)
    cond = {
        "kind": "rate",
        "metric": "ecc_corrected_volatile_count",
        "window": "1h",
        "op": "<",
        "threshold": 1,
    }
    add_rules(url, rule("falling", cond), rule("falling-keep", cond, no_data="firing"))

    evaluate_at(url, NOW)

    assert alert_states(url) == {("falling-keep", "node-a/0"): ("firing", None)}


def test_health_kind_fires_on_a_state_and_optionally_a_reason_code(url: str) -> None:
    g = [gpu(0), gpu(1)]
    store_payload(
        url,
        node_batch("node-a", g, events=[xid(g[1], 79, NOW - timedelta(seconds=5))]),
        received_at=NOW,
    )
    add_rules(
        url,
        rule("unhealthy-gpu", {"kind": "health", "target": "gpu", "states": ["unhealthy"]}),
        rule(
            "xid48",
            {"kind": "health", "target": "gpu", "states": ["unhealthy"], "codes": ["xid_48"]},
        ),
        rule("unhealthy-node", {"kind": "health", "target": "node", "states": ["unhealthy"]}),
    )

    evaluate_at(url, NOW)

    assert alert_states(url) == {
        ("unhealthy-gpu", "node-a/1"): ("firing", 3.0),
        ("unhealthy-node", "node-a"): ("firing", 3.0),
    }


def test_drift_kind_fires_on_the_node_that_differs_from_its_group(url: str) -> None:
    for host in ("hgx-1", "hgx-2", "hgx-3"):
        gpus = [gpu(i, hostname=host) for i in range(2)]
        payload = node_batch(host, gpus, labels={"cluster": "a", "ib_pod": "p1"})
        payload["topology"] = topology(gpus, NOW, nvlinks_per_pair=6 if host == "hgx-2" else 18)
        store_payload(url, payload, received_at=NOW)
    add_rules(
        url,
        rule("drift", {"kind": "drift"}),
        rule("drift-numa", {"kind": "drift", "drift_kinds": ["numa"]}),
    )

    evaluate_at(url, NOW)

    assert list(alert_states(url)) == [("drift", "hgx-2")]


def test_a_host_last_value_is_the_entitys_current_reading_within_ten_minutes(url: str) -> None:
    payload = node_batch("node-a", [gpu(0)])
    payload["nic_ports"] = [
        nic_port(NOW - timedelta(seconds=30), "mlx5_0", state="DOWN"),
        nic_port(NOW - timedelta(seconds=700), "mlx5_1", state="DOWN"),  # gone quiet: not seen
    ]
    store_payload(url, payload, received_at=NOW)
    # A late batch with an older reading of mlx5_0: its current reading stays the newer one.
    late = node_batch("node-a", [gpu(0)], at=NOW - timedelta(seconds=60))
    late["nic_ports"] = [nic_port(NOW - timedelta(seconds=90), "mlx5_0", state="ACTIVE")]
    store_payload(url, late, received_at=NOW)
    add_rules(
        url,
        rule(
            "port-down",
            {
                "kind": "threshold",
                "target": "nic",
                "metric": "port_active",
                "op": "==",
                "threshold": 0,
            },
        ),
    )
    evaluate_at(url, NOW)
    assert alert_states(url) == {("port-down", "node-a/mlx5_0/1"): ("firing", 0.0)}


def test_the_default_pack_pages_for_health_findings_that_had_no_rule(url: str) -> None:
    """Issue 13's misses, on the default pack: an InfiniBand port that left ACTIVE pages
    node-ib-port-down; an Xid 94 (Degraded) pages gpu-xid-degraded; an application Xid 13
    and a PCIe generation lowered at idle page nothing; remapped rows pending page."""
    import yaml

    from app.alerts.rulefiles import DEFAULT_RULES_DIR

    g = [gpu(i) for i in range(4)]
    before = node_batch("node-a", g, at=NOW - timedelta(seconds=60))
    before["nic_ports"] = [nic_port(NOW - timedelta(seconds=60), "mlx5_0")]
    store_payload(url, before, received_at=NOW - timedelta(seconds=60))
    now = node_batch(
        "node-a",
        g,
        events=[xid(g[1], 94, NOW - timedelta(seconds=5)), xid(g[2], 13, NOW)],
        per_gpu={
            0: {"pcie_link_gen": 1, "pcie_link_gen_max": 5},
            3: {"remapped_rows_pending": 1},
        },
    )
    now["nic_ports"] = [nic_port(NOW, "mlx5_0", state="DOWN", phys_state="Polling")]
    store_payload(url, now, received_at=NOW)
    docs = [
        doc
        for path in sorted(DEFAULT_RULES_DIR.glob("*.yaml"))
        for doc in yaml.safe_load(path.read_text()).get("rules", [])
    ]
    add_rules(url, *docs)

    evaluate_at(url, NOW)

    assert {key: state for key, (state, _) in alert_states(url).items()} == {
        ("node-ib-port-down", "node-a"): "firing",
        ("gpu-xid-degraded", "node-a/1"): "firing",
        ("gpu-row-remap-pending", "node-a/3"): "firing",
    }


def test_counting_incidents_finds_repeat_offenders_that_counting_lines_confuses(url: str) -> None:
    """GPU 0: a storm of 30 Xid 119 lines (one incident). GPU 1: Xid 48 twice, three hours
    apart (two incidents). Counting lines fires on the storm; counting incidents fires on GPU
    1 only, and per node on the node (three incidents)."""
    g0, g1 = gpu(0), gpu(1)
    storm = [xid(g0, 119, NOW - timedelta(hours=5, seconds=s)) for s in range(30)]
    twice = [xid(g1, 48, NOW - timedelta(hours=h)) for h in (4, 1)]
    store_payload(url, node_batch("node-a", [g0, g1], events=storm + twice), received_at=NOW)
    add_rules(
        url,
        rule("lines", {"kind": "event", "event_kinds": ["*"], "min_count": 2, "window": "24h"}),
        rule(
            "gpu-repeats",
            {
                "kind": "event",
                "event_kinds": ["*"],
                "min_count": 2,
                "window": "24h",
                "count": "incidents",
            },
        ),
        rule(
            "node-repeats",
            {
                "kind": "event",
                "event_kinds": ["*"],
                "min_count": 3,
                "window": "7d",
                "count": "incidents",
                "per": "node",
            },
        ),
    )

    evaluate_at(url, NOW)

    assert alert_states(url) == {
        ("lines", "node-a/0"): ("firing", 30.0),
        ("lines", "node-a/1"): ("firing", 2.0),
        ("gpu-repeats", "node-a/1"): ("firing", 2.0),
        ("node-repeats", "node-a"): ("firing", 3.0),
    }


def test_the_default_repeat_offender_rules_fire_on_repeats_only(url: str) -> None:
    """The default pack's gpu-repeat-offender and node-repeat-offender: GPU 1's Xid 48 back in
    a second incident fires the first (GPU 0's storm of 30 Xid 79 lines does not), and the
    node's third incident the second; their texts carry the suggested repair."""
    import yaml

    from app.alerts.rulefiles import DEFAULT_RULES_DIR

    g0, g1 = gpu(0), gpu(1)
    storm = [xid(g0, 79, NOW - timedelta(hours=5, seconds=s)) for s in range(30)]
    twice = [xid(g1, 48, NOW - timedelta(hours=h)) for h in (4, 1)]
    store_payload(url, node_batch("node-a", [g0, g1], events=storm + twice), received_at=NOW)
    pack = {
        r["name"]: r
        for f in ("gpu.yaml", "node.yaml")
        for r in yaml.safe_load((DEFAULT_RULES_DIR / f).read_text())["rules"]
    }
    add_rules(url, pack["gpu-repeat-offender"], pack["node-repeat-offender"])

    evaluate_at(url, NOW)

    assert alert_states(url) == {
        ("gpu-repeat-offender", "node-a/1"): ("firing", 2.0),
        ("node-repeat-offender", "node-a"): ("firing", 3.0),
    }
