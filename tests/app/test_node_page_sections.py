"""The node page shows the node sections as plain tables: NVLinks, NICs, storage, the topology
matrix, MIG instances and processes under their GPU, N/A reasons and collection errors."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import httpx

from tests.app.helpers import post_batch
from tests.app.section_factories import topology, with_sections
from tests.factories import batch, create_token, gpu, sample
from tests.live_server import LiveServer


def section(html: str, heading_id: str) -> str:
    """The ``<section>`` whose heading has ``id=heading_id``."""
    found = re.search(rf'<section aria-labelledby="{heading_id}">(.*?)</section>', html, re.S)
    assert found is not None, f"no section {heading_id}"
    return found.group(1)


def seeded_page(server: LiveServer, db_url: str, path: str = "/nodes/node-a") -> str:
    token = create_token(db_url, "node-a")
    at = datetime.now(UTC) - timedelta(seconds=5)
    gpus = [gpu(i) for i in range(4)]
    payload = with_sections(batch(gpus=gpus, samples_per_gpu=0), at)
    health = {
        "pcie_link_gen": 4,
        "pcie_link_gen_max": 5,
        "pcie_link_width": 16,
        "pcie_link_width_max": 16,
        "remapped_rows_correctable_count": 2,
        "remapped_rows_uncorrectable_count": 0,
        "remapped_rows_pending": 1,
    }
    payload["samples"] = [sample(g, at, fan_pct=None, **health) for g in gpus]
    payload["samples"][0]["temp_c"] = None
    payload["gpus"][0]["unavailable"]["temp_c"] = "TIMEOUT"
    payload["nvlinks"][3].update(state="down", speed_gbps=None, crc_errors=1234)
    payload["nic_ports"][1].update(state="DOWN", phys_state="Polling")
    payload["mounts"][0].update(used_bytes=95, total_bytes=100)
    payload["nfs_mounts"][0].update(avg_rtt_s=0.25)
    timeout = "nvml: GPU3: nvmlDeviceGetNumaNodeId TIMEOUT"
    payload["topology"] = topology(gpus, at, partial=True, errors=[timeout])
    for link in payload["topology"]["links"]:
        if "GPU0" in (link["a"], link["b"]) and link["type"] == "NV18":
            link["type"] = "NV17"
    assert post_batch(server.url, token, payload).status_code == 200
    response = httpx.get(f"{server.url}{path}")
    assert response.status_code == 200
    return response.text


def test_the_node_page_shows_every_node_section(server: LiveServer, db_url: str) -> None:
    html = seeded_page(server, db_url)

    nvlinks = section(html, "nvlinks-heading")
    assert "17 / 18" in nvlinks and "link 3 down" in nvlinks
    assert "26.562 GB/s" in nvlinks and "1,234" in nvlinks
    assert nvlinks.count("18 / 18") == 3

    nics = section(html, "nics-heading")
    assert "<code>mlx5_1</code>" in nics
    assert "✕</span> DOWN" in nics and "✕</span> Polling" in nics
    assert "400 Gb/s" in nics and "2.9 GiB/s" in nics

    storage = section(html, "storage-heading")
    assert "<caption>Disks</caption>" in storage and "<code>nvme1n1</code>" in storage
    assert "143.1 MiB/s" in storage and "0.40 ms" in storage
    assert "<code>/data</code>" in storage and "1.1 TiB / 6.9 TiB" in storage
    assert "▲</span> 95 %" in storage  # the nearly full root filesystem
    assert "nfs-server-a:/export/home" in storage and "250 ms" in storage
    assert "cumulative 18,446,744,073,709,551,000 B" in storage

    topo = section(html, "topology-heading")
    assert "Partial topology" in topo and "nvmlDeviceGetNumaNodeId TIMEOUT" in topo
    header = re.search(r"<thead>(.*?)</thead>", topo, re.S)
    assert header is not None
    assert re.findall(r'<th scope="col">([^<]+)</th>', header.group(1)) == [
        "GPU0", "GPU1", "GPU2", "GPU3", "NIC0", "CPU Affinity", "NUMA Affinity",
    ]  # fmt: skip
    gpu1 = re.search(r'<th scope="row"[^>]*>GPU1</th>(.*?)</tr>', topo, re.S)
    assert gpu1 is not None
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", gpu1.group(1))
    assert cells == ["NV17", "X", "NV18", "NV18", "NODE", "0-51", "0"]
    assert "topo-weak" in gpu1.group(1)  # GPU1↔GPU0 has fewer links than the other pairs
    assert "NIC0" in topo and "mlx5_0" in topo and "PCIe Host Bridge" in topo


def test_mig_instances_processes_and_na_reasons_show_under_their_gpu(
    server: LiveServer, db_url: str
) -> None:
    html = seeded_page(server, db_url)
    gpus = section(html, "gpus-heading")

    assert "MIG instances of GPU 0" in gpus and "1g.10gb" in gpus
    assert "Processes on GPU 0" in gpus and "<code>python3</code>" in gpus and "alice" in gpus
    assert "Processes on GPU 1" not in gpus
    # The details row spans the whole table, as the "no GPUs" row does.
    head = re.search(r"<thead>(.*?)</thead>", gpus, re.S)
    details = re.search(r'<tr class="gpu-details">\s*<td></td>\s*<td colspan="(\d+)">', gpus)
    assert head is not None and details is not None
    assert 1 + int(details.group(1)) == head.group(1).count('<th scope="col"') == 14
    gpu0 = re.search(r'<th scope="row" class="num">0</th>(.*?)</tr>', gpus, re.S)
    assert gpu0 is not None
    assert 'title="not available: TIMEOUT">N/A<' in gpu0.group(1)  # temp_c
    assert "Gen4 x16" in gpu0.group(1) and 'title="max Gen5 x16"' in gpu0.group(1)
    assert "pending" in gpu0.group(1)


def test_collection_errors_show_as_a_warning_with_the_collector(
    server: LiveServer, db_url: str
) -> None:
    html = seeded_page(server, db_url)

    assert "1 collection error</strong>" in html
    assert "nvmlDeviceGetPowerUsage timed out after 5 s" in html
    assert "<dt>Collector</dt><dd>nvml</dd>" in html


def test_the_live_partial_refreshes_the_sections_too(server: LiveServer, db_url: str) -> None:
    html = seeded_page(server, db_url, "/nodes/node-a/_live")

    assert "<html" not in html
    for heading in ("nvlinks-heading", "nics-heading", "storage-heading", "topology-heading"):
        assert f'id="{heading}"' in html


def test_a_node_without_sections_shows_none_of_their_tables(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    post_batch(server.url, token, batch(gpus=1))

    html = httpx.get(f"{server.url}/nodes/node-a").text

    for heading in ("nvlinks-heading", "nics-heading", "storage-heading", "topology-heading"):
        assert f'id="{heading}"' not in html
    assert "collection error" not in html
    assert 'title="not reported by the agent">N/A<' in html  # no reason given: the old text
