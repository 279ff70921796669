"""``/nodes/{hostname}/topology`` through a real server on both backends: the drawn graph, a
down NVLink, the "no topology reported" state, partial and damaged documents, hostile names."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import httpx

from app.db import make_engine, make_session_factory, session_scope
from app.fleet.models import Node
from app.topology.models import TopologyChange, TopologySnapshot
from tests.app.helpers import post_batch
from tests.app.section_factories import nvlinks, topology
from tests.factories import batch, create_token, gpu
from tests.live_server import LiveServer

HOSTILE = "<script>alert('x')</script>"


def store_document(url: str, hostname: str, document: Any, *, partial: bool = False) -> None:
    """Store ``document`` as the node's current topology as it is (no ingest validation), creating
    the node when absent: the page must draw what an older server or a bad row left."""
    engine = make_engine(url)
    now = datetime.now(UTC)
    try:
        with session_scope(make_session_factory(engine)) as session:
            node = session.query(Node).filter_by(hostname=hostname).one_or_none()
            if node is None:
                node = Node(hostname=hostname, labels={}, created_at=now)
                session.add(node)
                session.flush()
            snapshot = TopologySnapshot(
                node_id=node.id,
                collected_at=now,
                received_at=now,
                digest="0" * 64,
                partial=partial,
                source="test",
                document=document,
            )
            session.add(snapshot)
            session.flush()
            session.add(
                TopologyChange(
                    node_id=node.id, snapshot_id=snapshot.id, collected_at=now, received_at=now
                )
            )
    finally:
        engine.dispose()


def page(server: LiveServer, hostname: str) -> httpx.Response:
    return httpx.get(f"{server.url}/nodes/{quote(hostname, safe='')}/topology", timeout=30)


def test_an_hgx_node_is_drawn_with_an_nvswitch_fabric_and_its_down_link_named_down(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    gpus = [gpu(i) for i in range(8)]
    at = datetime.now(UTC) - timedelta(seconds=30)
    links = [link for g in gpus for link in nvlinks(g, at)]
    for link in links:
        if link["gpu_uuid"] == gpus[3]["uuid"] and link["link"] == 7:
            link.update(state="down", speed_gbps=None)
    payload = batch(gpus=gpus, samples_per_gpu=1, nvlinks=links, topology=topology(gpus, at))
    assert post_batch(server.url, token, payload).status_code == 200

    response = page(server, "node-a")
    assert response.status_code == 200
    html = response.text
    assert '<svg class="topo-graph"' in html
    assert '<title id="topo-graph-title">Topology of node-a</title>' in html
    hrefs = re.findall(r'<a class="node node-gpu[^"]*" href="([^"]+)"', html)
    assert hrefs == [f"/nodes/node-a/gpus/{i}" for i in range(8)]
    down = re.findall(r'data-a="(\w+)" data-b="(\w+)" data-state="down"', html)
    assert down == [("GPU3", "nvswitch")]
    assert ">NV18 · 1 down</text>" in html
    assert html.count(">NV18</text>") == 7
    assert "4 NVSwitches" in html  # remote ends 00000000:C7..CA:00.0 in the NVLink readings
    assert ">NVLink 7 down</text>" in html
    assert "NVLink down on GPU3–NVSwitch" in html
    assert (
        "<title>GPU3 – NVSwitch: NV18 · 1 down "
        "(Connection traversing a bonded set of 18 NVLinks)</title>"
    ) in html
    assert ">PIX</text>" in html  # NIC0 shares GPU0's PCIe switch
    assert "Partial topology" not in html
    assert '<th scope="col">CPU Affinity</th>' in html  # the matrix below

    node_page = httpx.get(f"{server.url}/nodes/node-a", timeout=30).text
    assert '<a class="btn" href="/nodes/node-a/topology">Topology graph</a>' in node_page


def test_a_node_without_topology_says_so(server: LiveServer, db_url: str) -> None:
    create_token(db_url, "node-b")
    response = page(server, "node-b")
    assert response.status_code == 200
    assert "No topology reported" in response.text
    assert "<svg" not in response.text
    node_page = httpx.get(f"{server.url}/nodes/node-b", timeout=30).text
    assert 'id="topology-heading"' not in node_page  # no panel until there is a topology


def test_an_unknown_node_is_a_404_page(server: LiveServer) -> None:
    response = page(server, "no-such-node")
    assert response.status_code == 404
    assert "no node named" in response.text


def test_a_partial_topology_shows_its_errors_and_draws_what_it_has(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-c")
    gpus = [gpu(i, hostname="node-c") for i in range(4)]
    at = datetime.now(UTC)
    topo = topology(gpus[:3], at, partial=True, errors=["GPU3: NVML_ERROR_GPU_IS_LOST"])
    payload = batch("node-c", gpus=gpus, samples_per_gpu=1, topology=topo)
    assert post_batch(server.url, token, payload).status_code == 200

    html = page(server, "node-c").text
    assert "Partial topology:" in html
    assert "<li>GPU3: NVML_ERROR_GPU_IS_LOST</li>" in html
    assert "<li>GPU3 is not in the topology: drawn apart, unconnected</li>" in html
    assert 'class="node node-gpu node-missing" href="/nodes/node-c/gpus/3"' in html
    assert len(re.findall(r'<a class="node node-gpu', html)) == 4


def test_a_damaged_document_is_drawn_as_far_as_it_goes(server: LiveServer, db_url: str) -> None:
    store_document(
        db_url,
        "node-d",
        {
            "devices": [
                {"id": "GPU0", "kind": "gpu", "numa_node": "zero"},
                "junk",
                {"kind": "gpu"},
                {"id": "GPU0", "kind": "gpu"},
                {"id": "FPGA0", "kind": "fpga"},
                {"id": "GPU1", "kind": "gpu"},
            ],
            "links": [
                {"a": "GPU0", "b": "GPU9", "type": "NV4"},
                5,
                {"a": "GPU0", "b": "GPU1", "type": "PHB"},
            ],
        },
    )
    response = page(server, "node-d")
    assert response.status_code == 200
    html = response.text
    assert "Incomplete topology:" in html
    for warning in (
        "devices[1] has no id: not drawn",
        "devices[2] has no id: not drawn",
        "GPU0 is listed twice: drawn once",
        "FPGA0 is of kind &#39;fpga&#39;: not drawn",
        "1 link(s) name a device that is not drawn",
        "1 link(s) carry no nvidia-smi link code",
    ):
        assert f"<li>{warning}</li>" in html
    assert re.findall(r'data-a="(\w+-?\d*)" data-b="(\w+)"', html) == [
        ("cpu-0", "GPU0"),
        ("cpu-0", "GPU1"),
    ]


def test_a_document_that_is_not_an_object_still_gives_a_page(
    server: LiveServer, db_url: str
) -> None:
    store_document(db_url, "node-e", ["not", "a", "topology"])
    response = page(server, "node-e")
    assert response.status_code == 200
    assert "<li>the stored topology is not a JSON object</li>" in response.text
    assert "Nothing can be drawn: the topology names no GPU or NIC." in response.text


def test_hostile_hostnames_device_names_and_errors_are_escaped(
    server: LiveServer, db_url: str
) -> None:
    hostname = "evil<img src=x onerror=alert(1)>\"'&"  # no "/": it could not be routed
    store_document(
        db_url,
        hostname,
        {
            "partial": True,
            "errors": [HOSTILE],
            "devices": [
                {"id": "GPU0", "kind": "gpu", "numa_node": 0},
                {"id": "NIC0", "kind": "nic", "name": HOSTILE},
            ],
            "links": [{"a": "GPU0", "b": "NIC0", "type": "PIX"}],
        },
        partial=True,
    )
    response = page(server, hostname)
    assert response.status_code == 200
    html = response.text
    assert "<script>alert" not in html
    assert "<img src=x" not in html
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in html
    assert "Topology of evil&lt;img src=x onerror=alert(1)&gt;&#34;&#39;&amp;</title>" in html
    assert f'href="/nodes/{quote(hostname, safe="/")}/gpus/0"'.replace("&", "&amp;") in html


def test_the_matrix_shows_a_gpu_numa_id_column_only_when_a_gpu_has_one(
    server: LiveServer, db_url: str
) -> None:
    store_document(
        db_url,
        "node-f",
        {
            "devices": [
                {
                    "id": "GPU0",
                    "kind": "gpu",
                    "numa_node": 0,
                    "cpu_affinity": "0-71",
                    "gpu_numa_id": 4,
                },
                {"id": "GPU1", "kind": "gpu", "numa_node": 1, "cpu_affinity": "72-143"},
            ],
            "links": [{"a": "GPU0", "b": "GPU1", "type": "NV18"}],
        },
    )
    html = page(server, "node-f").text
    assert '<th scope="col">GPU NUMA ID</th>' in html
    row = html[html.index('<th scope="row" title="">GPU0</th>') :]
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", row[: row.index("</tr>")])
    assert cells == ["X", "NV18", "0-71", "0", "4"]
    create_token(db_url, "node-g")
    store_document(db_url, "node-g", {"devices": [{"id": "GPU0", "kind": "gpu"}], "links": []})
    assert "GPU NUMA ID" not in page(server, "node-g").text
