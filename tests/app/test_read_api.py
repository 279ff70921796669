"""GET /api/v1/nodes, /nodes/{hostname} and /nodes/{hostname}/samples."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from tests.app.helpers import post_batch
from tests.conftest import make_settings
from tests.factories import batch, create_token, gpu, sample
from tests.live_server import LiveServer


def test_nodes_are_listed_with_freshness_gpu_count_and_latest_values(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    create_token(db_url, "node-never")
    g0, g1 = gpu(0), gpu(1)
    now = datetime.now(UTC)
    payload = batch(gpus=[g0, g1], samples_per_gpu=0, labels={"cluster": "c1", "team": "llm"})
    payload["samples"] = [
        sample(g0, now - timedelta(seconds=10), util_gpu_pct=10, temp_c=40),
        sample(g0, now - timedelta(seconds=5), util_gpu_pct=90, temp_c=71),
        sample(g1, now - timedelta(seconds=5), util_gpu_pct=None, temp_c=65),
    ]
    assert post_batch(server.url, token, payload).status_code == 200

    nodes = {n["hostname"]: n for n in httpx.get(f"{server.url}/api/v1/nodes").json()}
    assert nodes["node-never"]["freshness"] == "never_seen"
    assert nodes["node-never"]["gpu_count"] == 0
    a = nodes["node-a"]
    assert a["freshness"] == "fresh"
    assert a["gpu_count"] == 2
    assert a["labels"] == {"cluster": "c1", "team": "llm"}
    assert a["mean_util_gpu_pct"] == 90  # the GPU without utilization is left out, not a 0
    assert a["max_temp_c"] == 71
    assert a["last_sample_at"].startswith(payload["samples"][1]["sampled_at"][:19])


def test_a_node_turns_stale_after_the_window(db_url: str, tmp_path: Path) -> None:
    live = LiveServer(make_settings(db_url, tmp_path, stale_after_s=0.5))
    live.start()
    try:
        token = create_token(db_url, "node-a")
        post_batch(live.url, token, batch(samples_per_gpu=1))
        import time

        time.sleep(0.8)
        nodes = httpx.get(f"{live.url}/api/v1/nodes").json()
        assert nodes[0]["freshness"] == "stale"
    finally:
        live.stop()


def test_nodes_can_be_filtered_by_label_and_hostname(server: LiveServer, db_url: str) -> None:
    for host, team in (("a-1", "llm"), ("a-2", "vision"), ("b-1", "llm")):
        post_batch(server.url, create_token(db_url, host), batch(host, labels={"team": team}))
    by_label = httpx.get(f"{server.url}/api/v1/nodes", params={"label": "team=llm"}).json()
    assert [n["hostname"] for n in by_label] == ["a-1", "b-1"]
    both = httpx.get(f"{server.url}/api/v1/nodes", params={"label": "team=llm", "q": "a-"}).json()
    assert [n["hostname"] for n in both] == ["a-1"]
    bad = httpx.get(f"{server.url}/api/v1/nodes", params={"label": "team"})
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"] == ["query", "label"]


def test_node_detail_has_gpus_with_latest_values_and_nulls(server: LiveServer, db_url: str) -> None:
    token = create_token(db_url, "node-a")
    g0 = gpu(0)
    lost = gpu(1, state="lost", state_reason="GPU_IS_LOST")
    payload = batch(gpus=[g0, lost], samples_per_gpu=0)
    payload["samples"] = [sample(g0, datetime.now(UTC), power_w=512.5, fan_pct=None)]
    post_batch(server.url, token, payload)
    node = httpx.get(f"{server.url}/api/v1/nodes/node-a").json()
    assert node["driver_version"] == "570.133.20"
    assert node["gpus_not_ok"] == 1
    first, second = node["gpus"]
    assert first["latest"]["power_w"] == 512.5
    assert first["latest"]["fan_pct"] is None
    assert second["state"] == "lost"
    assert second["latest"] == {}
    missing = httpx.get(f"{server.url}/api/v1/nodes/nope")
    assert missing.status_code == 404
    assert "nope" in missing.json()["detail"]


def stamp(at: datetime) -> str:
    """``at`` as the read API writes times (UTC, whole seconds, ``Z``)."""
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_samples_come_raw_for_short_ranges_and_bucketed_for_long_ones(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    g0 = gpu(0)
    # Within the raw retention (7 days) of whenever the test runs: a fixed date stopped being
    # stored a week after it was written. On the hour, so that 30-s buckets start at base.
    base = (datetime.now(UTC) - timedelta(hours=2)).replace(minute=0, second=0, microsecond=0)
    payload = batch(gpus=[g0], samples_per_gpu=0)
    payload["samples"] = [
        sample(
            g0,
            base + timedelta(seconds=10 * i),
            util_gpu_pct=i * 10,
            ecc_corrected_volatile_count=i,
        )
        for i in range(6)
    ]
    payload["samples"][2]["util_gpu_pct"] = None
    assert post_batch(server.url, token, payload).json()["samples_stored"] == 6

    raw = httpx.get(
        f"{server.url}/api/v1/nodes/node-a/samples",
        params={
            "start": stamp(base),
            "end": stamp(base + timedelta(minutes=10)),
            "metrics": "util_gpu_pct,ecc_corrected_volatile_count",
        },
    ).json()
    assert raw["step_s"] == 0
    series = raw["series"][0]
    assert series["values"]["util_gpu_pct"] == [0, 10, None, 30, 40, 50]
    assert len(series["t"]) == 6

    bucketed = httpx.get(
        f"{server.url}/api/v1/nodes/node-a/samples",
        params={
            "start": stamp(base - timedelta(hours=1)),
            "end": stamp(base + timedelta(hours=1)),
            "metrics": "util_gpu_pct,ecc_corrected_volatile_count",
            "step_s": 30,
        },
    ).json()
    series = bucketed["series"][0]
    assert bucketed["step_s"] == 30
    assert series["t"] == [stamp(base), stamp(base + timedelta(seconds=30))]
    assert series["values"]["util_gpu_pct"] == [5.0, 40.0]  # avg ignores the null
    assert series["values"]["ecc_corrected_volatile_count"] == [2, 5]  # counters take the max


@pytest.mark.parametrize(
    ("params", "loc"),
    [
        ({"metrics": "util_gpu_pct,bogus"}, ["query", "metrics"]),
        ({"start": "2026-11-29T12:00:00"}, ["query", "start"]),
        ({"start": "2026-11-29T12:00:00Z", "end": "2026-11-29T11:00:00Z"}, ["query", "start"]),
        ({"start": "2026-01-01T00:00:00Z", "end": "2026-11-29T11:00:00Z"}, ["query", "start"]),
        ({"step_s": -5}, ["query", "step_s"]),
        ({"end": "not a time"}, ["query", "end"]),
        ({"end": "0001-01-01T00:30:00Z"}, ["query", "end"]),
        (
            {"start": "0001-01-01T00:00:00+01:00", "end": "0001-01-01T02:00:00+01:00"},
            ["query", "start"],
        ),
        (
            {"start": "9999-12-31T23:00:00-01:00", "end": "9999-12-31T23:59:59-01:00"},
            ["query", "start"],
        ),
    ],
)
def test_bad_sample_queries_get_422_naming_the_parameter(
    server: LiveServer, db_url: str, params: dict[str, str], loc: list[str]
) -> None:
    create_token(db_url, "node-a")
    response = httpx.get(f"{server.url}/api/v1/nodes/node-a/samples", params=params)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == loc
