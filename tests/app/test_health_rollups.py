"""Health beyond one rule: stale and never-seen nodes are Unknown, settings override the
mapping, groups and clusters roll up, and the fleet and node pages show it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import SettingsError, load_settings
from tests.app.helpers import post_batch
from tests.app.section_factories import disk
from tests.app.test_health_rules import codes, ingest, node_health, xid_event
from tests.conftest import make_settings
from tests.factories import batch, create_token, gpu
from tests.live_server import LiveServer


@contextmanager
def live(db_url: str, tmp_path: Path, **overrides: object) -> Iterator[LiveServer]:
    """A live server with settings ``overrides``."""
    server = LiveServer(make_settings(db_url, tmp_path, **overrides))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def fleet_health(server: LiveServer, **params: Any) -> dict[str, Any]:
    """``GET /api/v1/health`` (must answer 200)."""
    response = httpx.get(f"{server.url}/api/v1/health", params=params, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


STALE_WINDOW_S = 2.0


def fresh_health(server: LiveServer, token: str) -> dict[str, Any]:
    """Post a batch for ``node-a`` and read its health, retrying until the post and the read
    both fit inside ``STALE_WINDOW_S`` (so the node was fresh for certain when it was read).

    Returns the health read; the monotonic time the post was acknowledged is under ``"_acked"``.
    """
    for _ in range(5):
        sent = time.monotonic()
        response = post_batch(server.url, token, batch(gpus=1))
        assert response.status_code == 200, response.text
        acked = time.monotonic()
        health = node_health(server)
        if time.monotonic() - sent < STALE_WINDOW_S:
            return {**health, "_acked": acked}
    pytest.fail(f"post and read never fitted in {STALE_WINDOW_S} s")


def test_a_stale_node_is_unknown_never_healthy(db_url: str, tmp_path: Path) -> None:
    with live(db_url, tmp_path, stale_after_s=STALE_WINDOW_S) as server:
        token = create_token(db_url, "node-a")
        fresh = fresh_health(server, token)
        assert fresh["state"] == "healthy"
        # last_seen_at is at most the acknowledgement time: past it by more than the window,
        # the node is stale whatever the load.
        time.sleep(max(0.0, fresh["_acked"] + STALE_WINDOW_S + 0.2 - time.monotonic()))

        health = node_health(server)

    assert health["state"] == "unknown"
    assert codes(health) == ["stale"]
    assert health["gpus"][0]["state"] == "unknown"


def test_a_node_never_heard_from_is_unknown(server: LiveServer, db_url: str) -> None:
    create_token(db_url, "node-new")

    health = node_health(server, "node-new")

    assert health["state"] == "unknown"
    assert health["reasons"][0]["text"] == "no telemetry ever received"


def test_settings_override_the_xid_mapping(db_url: str, tmp_path: Path) -> None:
    gpus = [gpu(0)]
    with live(db_url, tmp_path, health_xid_unhealthy=[13], health_xid_degraded=[79]) as server:
        ingest(server, db_url, batch(gpus=gpus, events=[xid_event(13, gpus[0])]))
        health = node_health(server)

    assert health["state"] == "unhealthy"
    assert codes(health) == ["xid_13"]


def test_settings_override_the_storage_threshold(db_url: str, tmp_path: Path) -> None:
    payload = batch(gpus=1, samples_per_gpu=1)
    payload["disks"] = [disk(datetime.now(UTC))]
    with live(db_url, tmp_path, health_disk_wait_s=0.0001) as server:
        ingest(server, db_url, payload)
        assert codes(node_health(server)) == ["storage_latency_high"]


def test_an_xid_in_two_lists_is_refused_at_start_up(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="health_xid_unhealthy"):
        load_settings(data_dir=tmp_path, health_xid_unhealthy=[79], health_xid_degraded=[79])


def test_groups_and_clusters_count_nodes_per_state(server: LiveServer, db_url: str) -> None:
    pod = {"cluster": "c1", "ib_pod": "pod1", "rack": "r1"}
    ingest(server, db_url, batch("a1", gpus=1, labels=pod))
    lost = [gpu(0, hostname="a2", state="lost")]
    ingest(server, db_url, batch("a2", gpus=lost, samples_per_gpu=1, labels=pod))
    ingest(server, db_url, batch("b1", gpus=1, labels={"cluster": "c1", "rack": "r9"}))
    ingest(server, db_url, batch("c1", gpus=1, labels={}))
    create_token(db_url, "d1")

    body = fleet_health(server)

    assert body["counts"] == {
        "healthy": 3,
        "degraded": 0,
        "unhealthy": 1,
        "unknown": 1,
        "worst": "unhealthy",
    }
    groups = {(g["cluster"], g["kind"], g["name"]): g["counts"] for g in body["groups"]}
    assert groups[("c1", "ib_pod", "pod1")]["unhealthy"] == 1
    assert groups[("c1", "ib_pod", "pod1")]["healthy"] == 1
    assert groups[("c1", "ib_pod", "pod1")]["worst"] == "unhealthy"
    assert groups[("c1", "rack", "r9")]["worst"] == "healthy"
    assert groups[("unlabelled", "none", "ungrouped")]["unknown"] == 1
    clusters = {c["name"]: c["counts"] for c in body["clusters"]}
    assert clusters["c1"]["healthy"] == 2 and clusters["c1"]["unhealthy"] == 1
    assert clusters["unlabelled"]["healthy"] == 1 and clusters["unlabelled"]["unknown"] == 1
    nodes = {n["hostname"]: n for n in body["nodes"]}
    assert codes(nodes["a2"]) == ["gpu_lost"]
    assert nodes["a2"]["group"] == "pod1"

    only_pod = fleet_health(server, label="ib_pod=pod1")
    assert sorted(n["hostname"] for n in only_pod["nodes"]) == ["a1", "a2"]


def test_health_of_an_unknown_node_is_404(server: LiveServer) -> None:
    response = httpx.get(f"{server.url}/api/v1/nodes/nope/health", timeout=30)
    assert response.status_code == 404


def test_pages_show_health_and_sort_unhealthy_first(server: LiveServer, db_url: str) -> None:
    ingest(server, db_url, batch("a-ok", gpus=1))
    bad = [gpu(0, hostname="z-bad")]
    ingest(server, db_url, batch("z-bad", gpus=bad, events=[xid_event(79, bad[0])]))

    tiles = httpx.get(f"{server.url}/", timeout=30).text
    table = httpx.get(f"{server.url}/?view=table&sort=health", timeout=30).text
    node = httpx.get(f"{server.url}/nodes/z-bad", timeout=30).text

    bad_tile = '<a class="ov-node n-unhealthy" href="/nodes/z-bad" title="z-bad · Unhealthy'
    ok_tile = '<a class="ov-node n-healthy" href="/nodes/a-ok" title="a-ok · Healthy"'
    assert bad_tile in tiles and ok_tile in tiles
    assert tiles.index(bad_tile) < tiles.index(ok_tile)
    assert '<th scope="col">Health</th>' in table
    assert table.index("/nodes/z-bad") < table.index("/nodes/a-ok")
    assert "health-unhealthy" in table and "health-healthy" in table
    assert "xid_79" in node and "fallen off the bus" in node
    assert node.count("health-unhealthy") >= 2  # the node header and its GPU's cell
