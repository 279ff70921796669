"""``/api/v1/topology/drift`` and the ``/topology`` page through a real server on both backends,
with nodes put in through the ingest API (real topo -m captures as the agent sends them)."""

from __future__ import annotations

from typing import Any

import httpx

from app.db import make_engine, make_session_factory, session_scope, utcnow
from app.topology.drift import find_drift
from tests.app.topology_drift_data import GCP_H100, H100, drop_nic, node_payload, set_link
from tests.factories import create_token
from tests.live_server import LiveServer

POD = {"ib_pod": "pod-01", "rack": "r01"}
A100_GROUP = "ib_pod=pod-01 · 8× NVIDIA A100-SXM4-80GB"
H100_GROUP = "ib_pod=pod-01 · 8× NVIDIA H100 80GB HBM3"


def ingest(server: LiveServer, payload: dict[str, Any]) -> None:
    url = server.settings.effective_database_url
    token = create_token(url, payload["node"]["hostname"])
    response = httpx.post(
        f"{server.url}/api/v1/ingest",
        json=payload,
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text


def seed(server: LiveServer) -> None:
    """Four conforming DGX A100s, one drifting in several ways, one with a partial topology,
    and two H100 nodes in the same pod (never compared with the A100s)."""
    for i in range(1, 5):
        ingest(server, node_payload(f"dgx-{i:02d}", labels=POD))

    def odd(topology: dict[str, Any]) -> None:
        set_link(topology, "GPU3", "GPU5", "NV6")
        drop_nic(topology, "NIC4")

    ingest(
        server,
        node_payload(
            "dgx-05", labels=POD, alter=odd, down_nics=("mlx5_7",), pcie_gen={2: 3}, nvlinks_up=12
        ),
    )

    def partial(topology: dict[str, Any]) -> None:
        topology.update(partial=True, errors=["nvml: GPU6: TIMEOUT"])
        set_link(topology, "GPU0", "GPU1", "NV2")

    ingest(server, node_payload("dgx-06", labels=POD, alter=partial))
    for i in (1, 2):
        ingest(server, node_payload(f"h100-{i}", labels=POD, capture=GCP_H100, model=H100))


EXPECTED = [
    {
        "hostname": "dgx-05",
        "group": A100_GROUP,
        "kind": "nic_missing",
        "detail": "mlx5_4 missing (present on 4 of 5 nodes)",
        "expected": "present",
        "actual": "missing",
    },
    {
        "hostname": "dgx-05",
        "group": A100_GROUP,
        "kind": "nvlink_fewer",
        "detail": "GPU3↔GPU5: NV12 expected (4 of 5 nodes), NV6 here",
        "expected": "NV12",
        "actual": "NV6",
    },
    {
        "hostname": "dgx-05",
        "group": A100_GROUP,
        "kind": "nic_down",
        "detail": "mlx5_7: port state ACTIVE expected (4 of 5 nodes), DOWN here",
        "expected": "ACTIVE",
        "actual": "DOWN",
    },
    {
        "hostname": "dgx-05",
        "group": A100_GROUP,
        "kind": "pcie_downtrained",
        "detail": "GPU2: PCIe link gen3 x16 here, gen4 x16 is its maximum",
        "expected": "gen4 x16",
        "actual": "gen3 x16",
    },
    {
        "hostname": "dgx-06",
        "group": A100_GROUP,
        "kind": "partial",
        "detail": "topology is partial, not compared: nvml: GPU6: TIMEOUT",
        "expected": None,
        "actual": "partial",
    },
]


def test_api_lists_each_groups_majority_and_the_drifting_nodes(
    server: LiveServer, db_url: str
) -> None:
    seed(server)

    found = httpx.get(f"{server.url}/api/v1/topology/drift").json()

    assert found["findings"] == EXPECTED
    groups = {g["group"]: g for g in found["groups"]}
    assert groups[A100_GROUP] == {
        "group": A100_GROUP,
        "fabric": "ib_pod=pod-01",
        "gpu_model": "NVIDIA A100-SXM4-80GB",
        "gpu_count_class": 8,
        "hostnames": ["dgx-01", "dgx-02", "dgx-03", "dgx-04", "dgx-05", "dgx-06"],
        "nvlink_type": "NV12",
        "nic_count": 10,
        "numa_nodes": 4,
        "conforming": 4,
        "drifting": 1,
        "partial": 1,
    }
    assert groups[H100_GROUP]["nvlink_type"] == "NV18"
    assert groups[H100_GROUP]["nic_count"] == 0
    assert groups[H100_GROUP]["numa_nodes"] == 2
    assert (groups[H100_GROUP]["conforming"], groups[H100_GROUP]["drifting"]) == (2, 0)

    engine = make_engine(db_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            direct = find_drift(session, now=utcnow())
    finally:
        engine.dispose()
    assert [vars(f) for f in direct] == EXPECTED


def test_api_filters_by_kind_and_group_and_refuses_an_unknown_kind(server: LiveServer) -> None:
    seed(server)
    url = f"{server.url}/api/v1/topology/drift"

    by_kind = httpx.get(url, params={"kind": "nic_down"}).json()["findings"]
    assert [f["detail"] for f in by_kind] == [EXPECTED[2]["detail"]]
    assert httpx.get(url, params={"group": H100_GROUP}).json()["findings"] == []

    bad = httpx.get(url, params={"kind": "nvlinks"})
    assert bad.status_code == 400
    assert bad.json()["detail"].startswith("kind: 'nvlinks' is not one of partial, gpu_missing")


def test_page_shows_groups_and_the_filtered_drift_list_with_links(server: LiveServer) -> None:
    seed(server)

    page = httpx.get(f"{server.url}/topology", params={"kind": "nvlink_fewer"})

    assert page.status_code == 200
    html = page.text
    assert 'aria-current="page">Topology</a>' in html
    assert "GPU3↔GPU5: NV12 expected (4 of 5 nodes), NV6 here" in html
    assert "mlx5_4 missing" not in html  # filtered out
    assert 'href="/nodes/dgx-05"' in html and 'href="/nodes/dgx-05/topology"' in html
    assert '<option value="nvlink_fewer" selected>Fewer NVLinks</option>' in html
    assert "8× NVIDIA H100 80GB HBM3" in html

    partial = httpx.get(
        f"{server.url}/topology/_drift",
        params={"group": A100_GROUP, "kind": "partial", "push": "1"},
    )
    assert partial.headers["HX-Push-Url"] == (
        "/topology?group=ib_pod%3Dpod-01+%C2%B7+8%C3%97+NVIDIA+A100-SXM4-80GB&kind=partial"
    )
    assert "topology is partial, not compared: nvml: GPU6: TIMEOUT" in partial.text
    assert "<html" not in partial.text

    bad = httpx.get(f"{server.url}/topology", params={"kind": "bogus"})
    assert bad.status_code == 400
    assert "kind: &#39;bogus&#39; is not one of" in bad.text


def test_page_with_no_topology_yet_says_so(server: LiveServer) -> None:
    page = httpx.get(f"{server.url}/topology")

    assert page.status_code == 200
    assert "No node has reported a topology yet." in page.text
    assert "Every node matches its group." in page.text


def test_label_values_are_escaped_on_the_page(server: LiveServer) -> None:
    ingest(server, node_payload("dgx-01", labels={"ib_pod": "<i>pod</i>"}))

    html = httpx.get(f"{server.url}/topology").text

    assert "<i>pod</i>" not in html
    assert "ib_pod=&lt;i&gt;pod&lt;/i&gt;" in html
    assert 'href="/topology?group=ib_pod%3D%3Ci%3Epod%3C%2Fi%3E+%C2%B7+8%C3%97+NVIDIA' in html
