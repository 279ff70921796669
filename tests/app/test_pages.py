"""The HTML pages over HTTP, on both backends, with data put in through the real ingest API."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import update

from app.db import make_engine, make_session_factory, session_scope
from app.fleet.models import Node
from tests.app.helpers import post_batch
from tests.factories import batch, create_token, gpu, iso, sample
from tests.live_server import LiveServer


def ingest(server: LiveServer, payload: dict[str, Any]) -> None:
    """Create the node's token and POST ``payload`` to the ingest API."""
    url = server.settings.effective_database_url
    token = create_token(url, payload["node"]["hostname"])
    response = httpx.post(
        f"{server.url}/api/v1/ingest",
        json=payload,
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status_code == 200, response.text


def get(server: LiveServer, path: str, **kwargs: Any) -> httpx.Response:
    return httpx.get(f"{server.url}{path}", **kwargs)


def rows(html: str) -> dict[str, str]:
    """Each node row of the fleet table by hostname."""
    found = re.findall(r'<tr class="row-[^"]*">(.*?)</tr>', html, flags=re.S)
    return {re.search(r'href="/nodes/([^"]+)"', row).group(1): row for row in found}  # type: ignore[union-attr]


def test_fleet_page_lists_nodes_with_labels_freshness_and_latest_values(
    server: LiveServer,
) -> None:
    labels = {"cluster": "a", "ib_pod": "pod-2", "rack": "r07", "team": "llm"}
    ingest(server, batch("gpu-a-017", gpus=4, labels=labels))

    response = get(server, "/", params={"view": "table"})

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    row = rows(response.text)["gpu-a-017"]
    for value in labels.values():
        assert f">{value}</a>" in row
    assert "fresh" in row
    assert '<td class="num">4</td>' in row
    assert "50 %" in row  # mean utilization of the factory samples
    assert "55 °C" in row and "GPU 0" in row  # hottest GPU
    assert "/static/vendor/htmx-2.0.4.min.js" in response.text
    assert 'hx-trigger="every 5s"' in response.text
    assert "//cdn" not in response.text and "https://" not in response.text


def test_a_node_whose_gpus_report_no_utilization_shows_na_not_zero(server: LiveServer) -> None:
    start = datetime.now(UTC) - timedelta(seconds=20)
    gpus = [gpu(i, hostname="mig-node") for i in range(2)]
    ingest(
        server,
        batch(
            "mig-node",
            gpus=gpus,
            samples=[sample(g, start, util_gpu_pct=None, temp_c=None) for g in gpus],
        ),
    )

    fleet_row = rows(get(server, "/?view=table").text)["mig-node"]
    partial_row = rows(get(server, "/fleet/_nodes?view=table").text)["mig-node"]
    node_page = get(server, "/nodes/mig-node").text

    for row in (fleet_row, partial_row):
        assert row.count(">N/A<") == 2  # mean util and hottest GPU
        assert "0 %" not in row
    gpu_row = re.search(r'<th scope="row" class="num">0</th>(.*?)</tr>', node_page, re.S)
    assert gpu_row is not None
    assert 'title="not reported by the agent">N/A<' in gpu_row.group(1)
    assert "0 %" not in gpu_row.group(1)


def test_label_filters_and_search_narrow_the_list_and_partial(server: LiveServer) -> None:
    ingest(server, batch("gpu-a-001", gpus=1, labels={"cluster": "a", "rack": "r01"}))
    ingest(server, batch("gpu-a-002", gpus=1, labels={"cluster": "a", "rack": "r02"}))
    ingest(server, batch("gpu-b-001", gpus=1, labels={"cluster": "b", "rack": "r01"}))

    table = ("view", "table")
    cluster_a = get(server, "/", params=[("label", "cluster=a"), table]).text
    a_and_r01 = get(
        server, "/fleet/_nodes", params=[("label", "cluster=a"), ("label", "rack=r01"), table]
    )
    searched = get(server, "/", params=[("q", "b-0"), table]).text

    assert set(rows(cluster_a)) == {"gpu-a-001", "gpu-a-002"}
    assert set(rows(a_and_r01.text)) == {"gpu-a-001"}
    assert set(rows(searched)) == {"gpu-b-001"}
    assert 'value="cluster=a"' in cluster_a  # the filter is kept in the form for the refresh
    oops = httpx.get(f"{server.url}/", params={"label": "oops"}, timeout=30)
    assert oops.status_code == 400 and "label: expected key=value" in oops.text


def test_the_partial_comes_alone_and_a_filter_change_sets_the_page_url(
    server: LiveServer,
) -> None:
    ingest(server, batch("gpu-a-001", gpus=1))

    polled = get(server, "/fleet/_nodes?view=table", headers={"HX-Request": "true"})
    changed = get(
        server,
        "/fleet/_nodes",
        params=[
            ("q", "gpu"),
            ("label", "cluster=test"),
            ("label", ""),
            ("view", "table"),
            ("push", "1"),
        ],
        headers={"HX-Request": "true"},
    )

    assert polled.status_code == 200
    assert "<html" not in polled.text and "<tbody>" in polled.text
    assert "gpu-a-001" in polled.text
    assert "hx-push-url" not in polled.headers
    assert changed.headers["hx-push-url"] == "/?q=gpu&label=cluster%3Dtest&view=table"


def test_unhealthy_first_sorts_lost_gpus_then_stale_nodes_to_the_top(server: LiveServer) -> None:
    ingest(server, batch("node-a", gpus=1))
    ingest(server, batch("node-b", gpus=1))
    lost = [gpu(0, hostname="node-c", state="lost", state_reason="NVML_ERROR_GPU_IS_LOST")]
    ingest(server, batch("node-c", gpus=lost))
    engine = make_engine(server.settings.effective_database_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            session.execute(
                update(Node)
                .where(Node.hostname == "node-b")
                .values(last_seen_at=datetime.now(UTC) - timedelta(hours=1))
            )
    finally:
        engine.dispose()

    by_name = get(server, "/", params={"view": "table"}).text
    by_health = get(server, "/", params={"sort": "health", "view": "table"}).text

    assert list(rows(by_name)) == ["node-a", "node-b", "node-c"]
    assert list(rows(by_health)) == ["node-c", "node-b", "node-a"]
    assert "stale" in rows(by_health)["node-b"]
    assert "1 not ok" in rows(by_health)["node-c"]


def test_fleet_alias_redirects_to_the_root_with_its_filters(server: LiveServer) -> None:
    response = get(server, "/fleet?label=cluster%3Da")

    assert response.status_code == 308
    assert response.headers["location"] == "/?label=cluster%3Da"


def test_node_page_shows_versions_gpus_events_and_the_first_chart_paint(
    server: LiveServer,
) -> None:
    gpus = [gpu(i, hostname="gpu-a-017") for i in range(2)]
    now = datetime.now(UTC)
    payload = batch(
        "gpu-a-017",
        gpus=gpus,
        samples=[sample(g, now - timedelta(seconds=10), clocks_event_reasons=0x44) for g in gpus],
        events=[
            {
                "occurred_at": iso(now - timedelta(seconds=5)),
                "kind": "xid",
                "gpu_uuid": gpus[1]["uuid"],
                "xid": 79,
                "message": "GPU has fallen off the bus.",
            }
        ],
        sent_at=iso(now + timedelta(seconds=60)),
    )
    ingest(server, payload)

    response = get(server, "/nodes/gpu-a-017", params={"range": "6h"})

    assert response.status_code == 200
    html = response.text
    assert "570.133.20" in html and "12.8" in html and "0.1.0" in html
    assert re.search(r"⚠</span> \+[56]\d\.\d s", html)  # clock skew over 2 s, flagged
    assert "SwPowerCap" in html and "HwThermalSlowdown" in html
    assert "GPU has fallen off the bus." in html and ">79<" in html
    assert "/static/vendor/plotly-2.35.2.min.js" in html
    assert 'hx-get="/nodes/gpu-a-017/_live"' in html
    assert "resolution 60 s averages" in html
    boot = json.loads(re.search(r'id="chart-boot">(.*?)</script>', html, re.S).group(1))  # type: ignore[union-attr]
    assert boot["samples_url"] == "/api/v1/nodes/gpu-a-017/samples"
    assert boot["live"] is True and boot["span_s"] == 6 * 3600
    assert [f["metric"] for f in boot["figures"]] == [
        "util_gpu_pct",
        "mem_used_bytes",
        "power_w",
        "temp_c",
    ]
    util = boot["figures"][0]["figure"]["data"]
    assert [t["name"] for t in util] == ["GPU 0", "GPU 1"]
    assert util[0]["y"] == [50.0]


def test_node_live_partial_comes_alone(server: LiveServer) -> None:
    ingest(server, batch("gpu-a-017", gpus=2))

    response = get(server, "/nodes/gpu-a-017/_live", headers={"HX-Request": "true"})

    assert response.status_code == 200
    assert "<html" not in response.text
    assert "NVIDIA H100 80GB HBM3" in response.text
    assert "No events recorded" in response.text


def test_unknown_node_gets_a_404_page_or_fragment(server: LiveServer) -> None:
    page = get(server, "/nodes/no-such-node")
    fragment = get(server, "/nodes/no-such-node/_live", headers={"HX-Request": "true"})

    assert page.status_code == 404
    assert "<html" in page.text and "Not found" in page.text and "no-such-node" in page.text
    assert fragment.status_code == 404
    assert "<html" not in fragment.text and 'role="alert"' in fragment.text


def test_a_bad_chart_range_is_a_400_page(server: LiveServer) -> None:
    ingest(server, batch("gpu-a-017", gpus=1))

    response = get(server, "/nodes/gpu-a-017", params={"start": "2026-11-29T12:00", "end": "x"})

    assert response.status_code == 400
    assert "not a time" in response.text


def test_api_docs_load_their_assets_locally_not_from_a_cdn(server: LiveServer) -> None:
    page = httpx.get(f"{server.url}/docs")
    assert page.status_code == 200
    assert "cdn." not in page.text and "https://" not in page.text
    for asset in ("swagger-ui-bundle-5.17.14.js", "swagger-ui-5.17.14.css"):
        assert f"/static/vendor/{asset}" in page.text
        assert httpx.get(f"{server.url}/static/vendor/{asset}").status_code == 200


def test_an_unknown_page_gets_the_html_error_page_and_an_unknown_api_path_json(
    server: LiveServer,
) -> None:
    page = httpx.get(f"{server.url}/no/such/page")
    assert page.status_code == 404
    assert page.headers["content-type"].startswith("text/html")
    assert "Fleetwatch" in page.text
    api = httpx.get(f"{server.url}/api/v1/no-such-thing")
    assert api.status_code == 404
    assert api.json() == {"detail": "Not Found"}


def test_hostname_search_ignores_case_on_every_backend(server: LiveServer, db_url: str) -> None:
    post_batch(server.url, create_token(db_url, "GPU-Node-7"), batch("GPU-Node-7"))
    nodes = httpx.get(f"{server.url}/api/v1/nodes", params={"q": "gpu-node"}).json()
    assert [n["hostname"] for n in nodes] == ["GPU-Node-7"]


def test_large_responses_are_gzip_compressed(server: LiveServer) -> None:
    response = httpx.get(f"{server.url}/openapi.json", headers={"Accept-Encoding": "gzip"})
    assert response.headers.get("content-encoding") == "gzip"


def test_node_page_times_out_of_range_get_a_400_page_not_a_500(
    server: LiveServer, db_url: str
) -> None:
    create_token(db_url, "node-a")
    for query in (
        "start=0001-01-01T00:00:00%2B01:00",
        "start=9999-12-31T23:00:00-01:00&end=9999-12-31T23:59:59-01:00",
    ):
        response = httpx.get(f"{server.url}/nodes/node-a?{query}")
        assert response.status_code == 400, query
        assert "time" in response.text
