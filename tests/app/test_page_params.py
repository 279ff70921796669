"""Page parameters answer a 400 naming them, like the JSON API does for the same input: ``range``
on the node page, ``label`` on the overview, ``group``/``kind`` on /topology and the drift API.
Real server, Postgres and SQLite."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx

from app.fleet.charts import PRESETS
from tests.factories import batch, store_payload
from tests.live_server import LiveServer


def test_a_bad_range_on_the_node_page_names_range(server: LiveServer, db_url: str) -> None:
    store_payload(db_url, batch("node-a", gpus=1, samples_per_gpu=1), received_at=datetime.now(UTC))
    bad = httpx.get(f"{server.url}/nodes/node-a", params={"range": "-1"}, timeout=30)
    good = httpx.get(f"{server.url}/nodes/node-a", params={"range": "6h"}, timeout=30)
    assert bad.status_code == 400
    assert f"range: unknown preset &#39;-1&#39;; one of {', '.join(PRESETS)}" in bad.text
    assert good.status_code == 200


def test_a_label_without_key_is_400_on_the_page_and_422_in_the_api(server: LiveServer) -> None:
    page = httpx.get(f"{server.url}/", params={"label": "<script>"}, timeout=30)
    partial = httpx.get(f"{server.url}/fleet/_nodes", params={"label": "=x"}, timeout=30)
    api = httpx.get(f"{server.url}/api/v1/nodes", params={"label": "<script>"}, timeout=30)
    assert page.status_code == 400
    assert "label: expected key=value, got &#39;&lt;script&gt;&#39;" in page.text
    assert "<script>" not in page.text.split("<main", 1)[-1]
    assert partial.status_code == 400
    assert api.status_code == 422
    assert api.json()["detail"][0]["loc"] == ["query", "label"]
    assert httpx.get(f"{server.url}/", params={"label": "cluster=a"}, timeout=30).status_code == 200


def test_topology_page_and_drift_api_agree_on_group_and_kind(server: LiveServer) -> None:
    cases = {
        (("group", "g" * 513),): 400,
        (("kind", "bogus"),): 400,
        (("group", "no-such-group"),): 200,
        (("group", "<script>"),): 200,
        (("group", "  "),): 200,
    }
    for params, expected in cases.items():
        page = httpx.get(f"{server.url}/topology", params=list(params), timeout=30)
        api = httpx.get(f"{server.url}/api/v1/topology/drift", params=list(params), timeout=30)
        assert (page.status_code, api.status_code) == (expected, expected), params
        if expected == 400:
            name = params[0][0]
            assert api.json()["detail"].startswith(f"{name}: ")
            assert f"{name}: " in page.text
