"""Pull mode in a running server: the scheduled scrape stores a dcgm-exporter endpoint's node
beside pushed ones and ``GET /api/v1/dcgm/endpoints`` says how each scrape went; a Fleetwatch
server's own ``/metrics`` (dcgm-exporter's names and units) reads back to the values pushed."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from app.dcgm import fields
from app.dcgm.parse import parse
from app.dcgm.targets import Target
from app.dcgm.translate import translate
from tests.app.dcgm_exporter_stub import exporter
from tests.app.helpers import post_batch
from tests.app.metrics_helpers import scrape
from tests.app.test_metrics_dcgm import GPU0, HOST, REPORTED, fleet_batch
from tests.conftest import make_settings
from tests.factories import batch, create_token, wait_until
from tests.live_server import LiveServer
from tests.shared_fixtures import fixture_path


def endpoints(server: LiveServer) -> dict[str, Any]:
    response = httpx.get(f"{server.url}/api/v1/dcgm/endpoints", timeout=30)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_the_scheduled_scrape_shows_pulled_nodes_beside_pushed_ones(
    db_url: str, tmp_path: Path
) -> None:
    idle = fixture_path("dcgm-exporter/h100-8gpu-eks-idle-sampled.prom").read_text()
    mixed = fixture_path("dcgm-exporter/mixed-rtx2000ada-a30-mig-node-excerpt.prom").read_text()
    with exporter({"/metrics": idle, "/mixed": mixed, "/down": 503}) as stub:
        sd_file = tmp_path / "dcgm-targets.json"
        sd_file.write_text(
            json.dumps(
                [
                    {
                        "targets": [stub.url.removeprefix("http://")],
                        "labels": {
                            "__metrics_path__": "/mixed",
                            "hostname": "gpu-node-07",
                            "cluster": "k8s-a",
                        },
                    }
                ]
            )
        )
        settings = make_settings(
            db_url,
            tmp_path,
            dcgm_endpoints=f"{stub.url}/metrics,{stub.url}/down",
            dcgm_endpoints_file=str(sd_file),
            dcgm_scrape_interval_s=1,
        )
        server = LiveServer(settings, run_jobs=True)
        server.start()
        try:
            token = create_token(db_url, "pushed-01")
            assert post_batch(server.url, token, batch("pushed-01", gpus=2)).status_code == 200

            def all_tried() -> bool:
                return all(e["last_scrape_at"] for e in endpoints(server)["endpoints"])

            assert wait_until(all_tried, timeout_s=30)
            listed = {e["url"]: e for e in endpoints(server)["endpoints"]}
            nodes = httpx.get(f"{server.url}/api/v1/nodes", timeout=30).json()
            node_07 = httpx.get(f"{server.url}/api/v1/nodes/gpu-node-07", timeout=30).json()
        finally:
            server.stop()

    ok = listed[f"{stub.url}/metrics"]
    assert (ok["configured"], ok["hostname"], ok["gpu_count"], ok["last_error"]) == (
        True,
        "ip-10-0-0-1.ec2.internal",
        8,
        None,
    )
    assert [(w["gpu_index"], w["pod"]) for w in ok["workloads"]] == [
        (2, "vllm-agg-0-vllmdecodeworker-dkb9q")
    ]
    assert listed[f"{stub.url}/down"]["last_error"] == "HTTP 503 Service Unavailable"
    assert listed[f"{stub.url}/down"]["last_success_at"] is None
    mixed_row = listed[f"{stub.url}/mixed"]
    assert (mixed_row["hostname"], mixed_row["gpu_count"]) == ("gpu-node-07", 2)
    assert mixed_row["skipped"][0]["series"] == "DCGM_FI_DEV_FB_FREE"
    by_host = {n["hostname"]: n for n in nodes}
    assert set(by_host) == {"pushed-01", "ip-10-0-0-1.ec2.internal", "gpu-node-07"}
    assert by_host["ip-10-0-0-1.ec2.internal"]["freshness"] == "fresh"
    assert by_host["ip-10-0-0-1.ec2.internal"]["gpu_count"] == 8
    assert node_07["labels"] == {"cluster": "k8s-a"}


def test_an_unreadable_endpoints_file_is_reported_and_the_static_list_still_served(
    db_url: str, tmp_path: Path
) -> None:
    sd_file = tmp_path / "targets.yaml"
    sd_file.write_text("- targets: [gpu-node-01:9400]\n  labels: {Bad-Label: x}\n")
    settings = make_settings(
        db_url,
        tmp_path,
        dcgm_endpoints="http://127.0.0.1:9/metrics",
        dcgm_endpoints_file=str(sd_file),
    )
    server = LiveServer(settings)
    server.start()
    try:
        body = endpoints(server)
    finally:
        server.stop()
    assert body["targets_error"] == (
        f"{sd_file}: group 1: label 'Bad-Label' must be lower-case letters, digits and _ "
        "(at most 63) with a value of at most 256 characters"
    )
    assert [e["url"] for e in body["endpoints"]] == ["http://127.0.0.1:9/metrics"]


def test_fleetwatchs_own_metrics_read_back_to_the_values_pushed(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, HOST)
    assert post_batch(server.url, token, fleet_batch(datetime.now(UTC))).status_code == 200
    text = scrape(server.url)
    t = translate(
        parse(text), target=Target(url=f"{server.url}/metrics"), scraped_at=datetime.now(UTC)
    )
    assert t.hostname == HOST
    [read] = [s for s in t.samples if s["gpu_uuid"] == GPU0["uuid"]]
    read = {k: v for k, v in read.items() if k not in ("gpu_uuid", "sampled_at")}
    expected = dict(REPORTED)
    # /metrics serves DCGM's units: whole MiB and KB/s, as dcgm-exporter does.
    expected["mem_used_bytes"] = REPORTED["mem_used_bytes"] // 2**20 * 2**20
    expected["pcie_rx_bytes_per_s"] = REPORTED["pcie_rx_bytes_per_s"] // 1024 * 1024
    del expected["graphics_clock_mhz"]  # DCGM has no current graphics clock field
    assert read == expected
    [gpu0] = [g for g in t.gpus if g["uuid"] == GPU0["uuid"]]
    assert (gpu0["index"], gpu0["name"], gpu0["pci_bus_id"], gpu0["mem_total_bytes"]) == (
        0,
        GPU0["name"],
        GPU0["pci_bus_id"],
        81559 * 2**20,
    )
    # Fleetwatch's own series beside the DCGM ones are skipped by name, nothing else.
    assert {s["reason"] for s in t.skipped} == {fields.UNKNOWN}
    assert all(s["series"].startswith("fleetwatch_") for s in t.skipped)


def test_a_pulled_xid_79_makes_the_node_unhealthy_like_a_pushed_one(
    db_url: str, tmp_path: Path
) -> None:
    idle = fixture_path("dcgm-exporter/h100-8gpu-eks-idle-sampled.prom").read_text()
    host = "ip-10-0-0-1.ec2.internal"
    xid_line = (
        'DCGM_FI_DEV_XID_ERRORS{gpu="3",UUID="GPU-00000000-0000-0000-0000-000000000004",'
        f'pci_bus_id="00000000:86:00.0",Hostname="{host}"}} '
    )
    with exporter({"/metrics": idle + xid_line + "0\n"}) as stub:
        settings = make_settings(
            db_url, tmp_path, dcgm_endpoints=f"{stub.url}/metrics", dcgm_scrape_interval_s=1
        )
        server = LiveServer(settings, run_jobs=True)
        server.start()
        try:

            def health() -> dict[str, Any]:
                got = httpx.get(f"{server.url}/api/v1/nodes/{host}/health", timeout=30)
                body: dict[str, Any] = got.json() if got.status_code == 200 else {}
                return body

            assert wait_until(lambda: health().get("state") == "healthy", timeout_s=30)
            stub.pages["/metrics"] = idle + xid_line + "79\n"
            assert wait_until(lambda: health().get("state") == "unhealthy", timeout_s=30)
            reasons = [(r["code"], r["gpu_index"]) for r in health()["reasons"]]
            listed = endpoints(server)["endpoints"][0]
        finally:
            server.stop()
    assert ("xid_79", 3) in reasons, reasons
    assert listed["events_raised"] == 1


def test_a_password_in_an_endpoint_url_is_never_shown(db_url: str, tmp_path: Path) -> None:
    # dcgm-exporter behind basic auth (its --web-config-file): the URL carries the password,
    # which neither the API, the page, the Xid events (sent on to chat) nor the log may show.
    page = 'DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-x",Hostname="gpu-node-31"} 79\n'
    with exporter({"/metrics": page}) as stub:
        url = stub.url.replace("http://", "http://fw:s3cret@") + "/metrics"
        shown = stub.url.replace("http://", "http://fw:***@") + "/metrics"
        settings = make_settings(db_url, tmp_path, dcgm_endpoints=url, dcgm_scrape_interval_s=1)
        server = LiveServer(settings, run_jobs=True)
        server.start()
        try:
            assert wait_until(lambda: endpoints(server)["endpoints"][0]["hostname"], timeout_s=30)
            body = endpoints(server)
            html = httpx.get(f"{server.url}/dcgm", timeout=30).text
            events = httpx.get(f"{server.url}/api/v1/nodes/gpu-node-31/gpus/0", timeout=30)
        finally:
            server.stop()
    assert [e["url"] for e in body["endpoints"]] == [shown]
    assert "s3cret" not in json.dumps(body) and "s3cret" not in html and shown in html
    assert events.status_code == 200, events.text
    assert "s3cret" not in events.text and f"dcgm-exporter {shown}" in events.text
