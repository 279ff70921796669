"""``/storage`` through a real server on Postgres and SQLite, with data sent through the ingest
API: exact chart values (bucket means, counter increases with a reset and a 64-bit rollover as
gaps), the "now" tables, filters in the URL, escaping, bad parameters and the empty state."""

from __future__ import annotations

import html
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from tests.app.helpers import post_batch
from tests.app.section_factories import disk, mount, nfs_mount, nic_port
from tests.factories import batch, create_token
from tests.live_server import LiveServer

MIB = 2**20
U64_MAX = 2**64 - 1
HOSTILE = "/mnt/<script>alert(1)</script>&x"


def bucket_start(seconds_ago: int) -> datetime:
    """A time ``seconds_ago`` in the past, floored to the page's 15 s buckets."""
    t = datetime.now(UTC) - timedelta(seconds=seconds_ago)
    return datetime.fromtimestamp(int(t.timestamp()) // 15 * 15, UTC)


def send(live: LiveServer, hostname: str, labels: dict[str, str], sections: dict) -> None:
    """One batch of ``hostname`` with the node sections ``sections`` and no GPU samples."""
    token = create_token(live.settings.effective_database_url, hostname)
    payload = batch(hostname, gpus=1, samples_per_gpu=0, labels=labels, **sections)
    response = post_batch(live.url, token, payload)
    assert response.status_code == 200, response.text


def seed(live: LiveServer) -> datetime:
    """node-a (cluster a): a disk, two NFS mounts with counter trouble, IB ports; node-b
    (cluster b): a quiet disk and an NFS mount with a hostile name. Returns the first bucket."""
    t0 = bucket_start(300)
    ts = [t0 + timedelta(seconds=15 * i) for i in range(4)]
    retrans = [10, 15, 3, 7]  # an agent restart after 15
    scratch = [U64_MAX - 5, U64_MAX, 2, 2]  # a 64-bit rollover
    symbol = [0, 0, 2, 2]
    send(
        live,
        "node-a",
        {"cluster": "a", "rack": "r1"},
        {
            "disks": [
                disk(t, "nvme0n1", read_bytes_per_s=r * MIB, avg_wait_s=0.001)
                for t, r in zip(ts, [1, 3, 5, 7], strict=True)
            ],
            "mounts": [mount(ts[-1], "/data", device="/dev/nvme0n1p1", fstype="xfs")],
            "nfs_mounts": [
                nfs_mount(t, retransmits=r, avg_rtt_s=0.002)
                for t, r in zip(ts, retrans, strict=True)
            ]
            + [
                nfs_mount(t, mountpoint="/scratch", retransmits=r, avg_rtt_s=0.05)
                for t, r in zip(ts, scratch, strict=True)
            ],
            "nic_ports": [
                nic_port(t, "mlx5_0", symbol_error_count=s) for t, s in zip(ts, symbol, strict=True)
            ]
            + [nic_port(ts[-1], "mlx5_1", state="DOWN", phys_state="Polling")],
        },
    )
    send(
        live,
        "node-b",
        {"cluster": "b", "rack": "r2"},
        {
            "disks": [disk(t, "sda", read_bytes_per_s=0.5 * MIB, busy_pct=1.0) for t in ts],
            "nfs_mounts": [nfs_mount(ts[-1], mountpoint=HOSTILE, avg_rtt_s=0.5)],
        },
    )
    return t0


def get(url: str) -> httpx.Response:
    """GET following the page's redirect to its short URL."""
    return httpx.get(url, follow_redirects=True)


def figures(page: str) -> dict[str, Any]:
    found = re.search(r'<script type="application/json" id="chart-boot">(.*?)</script>', page, re.S)
    assert found is not None
    boot = json.loads(found.group(1))
    return {f["metric"]: f["figure"]["data"] for f in boot["figures"]}


def table(page: str, css_class: str) -> str:
    found = re.search(rf'<table class="data {css_class}">(.*?)</table>', page, re.S)
    assert found is not None, css_class
    return found.group(1)


def rows(page: str, css_class: str) -> list[list[str]]:
    """The body cells of a table as text (tags dropped, entities decoded)."""
    body = table(page, css_class).split("<tbody>")[1]
    out = []
    for tr in re.findall(r"<tr>(.*?)</tr>", body, re.S):
        cells = re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", tr, re.S)
        out.append([html.unescape(re.sub(r"<[^>]+>|[▲✕✓]", "", c)).strip() for c in cells])
    return out


def test_charts_and_tables_have_exact_values(server: LiveServer, db_url: str) -> None:
    seed(server)
    response = get(f"{server.url}/storage?range=1h&top=5")
    assert response.status_code == 200
    page = response.text
    assert '<a href="/storage" aria-current="page">Storage</a>' in page
    charts = figures(page)

    (nvme, sda) = charts["disk_read_bytes_per_s"]
    assert nvme["name"] == "node-a nvme0n1" and sda["name"] == "node-b sda"
    assert nvme["y"] == [1.0, 3.0, 5.0, 7.0]
    assert sda["y"] == [0.5, 0.5, 0.5, 0.5]

    # retransmits 10, 15, 3, 7: +5, reset (gap), +4 → per minute over 15 s intervals
    by_name = {t["name"]: t for t in charts["nfs_retransmits"]}
    assert by_name["node-a /home"]["y"] == [20.0, None, 16.0]
    # 2**64-6, 2**64-1, 2, 2: +5, rollover (gap), +0
    assert by_name["node-a /scratch"]["y"] == [20.0, None, 0.0]
    (port,) = charts["ib_errors"]
    assert port["name"] == "node-a mlx5_0/1" and port["y"] == [0.0, 8.0, 0.0]

    assert rows(page, "nfs-retransmits") == [
        ["node-a", "/home", "9", "1"],
        ["node-a", "/scratch", "5", "1"],
    ]
    assert rows(page, "ib-problems") == [
        ["node-a", "mlx5_1/1", "DOWN", "Polling", "0", "0"],
        ["node-a", "mlx5_0/1", "ACTIVE", "LinkUp", "2", "0"],
    ]
    slowest = rows(page, "slowest-mounts")
    assert slowest[0] == ["node-b", HOSTILE, "NFS", "nfs-server-a:/export/home", "500 ms", "12.5"]
    assert slowest[1][:5] == ["node-a", "/scratch", "NFS", "nfs-server-a:/export/home", "50 ms"]
    # the local /data on nvme0n1p1 takes the whole disk's wait (the agent drops partitions)
    assert ["node-a", "/data", "xfs", "/dev/nvme0n1p1", "1.00 ms", "1,280.5"] in slowest
    busiest = rows(page, "busiest-devices")
    assert busiest[0][:4] == ["node-a", "nvme0n1", "7.0 MiB/s", "19.1 MiB/s"]
    assert busiest[1][:2] == ["node-b", "sda"]
    assert '<a href="/nodes/node-a">node-a</a>' in page


def test_hostile_mount_paths_are_escaped(server: LiveServer, db_url: str) -> None:
    seed(server)
    page = get(f"{server.url}/storage?match=script").text
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&amp;x" in page
    (trace,) = figures(page)["nfs_avg_rtt_s"]
    assert trace["name"] == "node-b /mnt/&lt;script&gt;alert(1)&lt;/script&gt;&amp;x"


def test_filters_narrow_everything_and_stay_in_the_links(server: LiveServer, db_url: str) -> None:
    seed(server)
    page = get(f"{server.url}/storage?label=cluster=b&range=6h&match=sd").text
    charts = figures(page)
    assert [t["name"] for t in charts["disk_read_bytes_per_s"]] == ["node-b sda"]
    assert charts["nfs_retransmits"] == [] and charts["ib_errors"] == []
    assert "node-a" not in table(page, "busiest-devices")
    assert 'hx-get="/storage/_now?range=6h&amp;label=cluster%3Db&amp;match=sd"' in page
    assert 'href="/storage?range=24h&amp;label=cluster%3Db&amp;match=sd"' in page

    partial = get(f"{server.url}/storage/_now?q=NODE-A&match=nvme")
    assert partial.status_code == 200
    assert "<html" not in partial.text
    assert rows(partial.text, "busiest-devices")[0][:2] == ["node-a", "nvme0n1"]
    assert "node-b" not in partial.text


def test_top_n_draws_the_rest_as_one_summary_line(server: LiveServer, db_url: str) -> None:
    t0 = bucket_start(120)
    for i, rate in enumerate([8, 4, 2, 1]):
        send(
            server,
            f"node-{i}",
            {"cluster": "a"},
            {"disks": [disk(t0, "sda", read_bytes_per_s=rate * MIB)]},
        )
    for top, by in ((5, "mean"), (5, "max")):
        traces = figures(get(f"{server.url}/storage?top={top}&by={by}").text)
        assert [t["name"] for t in traces["disk_read_bytes_per_s"]] == [
            "node-0 sda",
            "node-1 sda",
            "node-2 sda",
            "node-3 sda",
        ]
    # 12 disks would be drawn as 10 lines + the mean of the other 2
    for i, low in enumerate([0.5, 0.25] * 4):
        send(server, f"more-{i}", {}, {"disks": [disk(t0, "sdb", read_bytes_per_s=low * MIB)]})
    traces = figures(get(f"{server.url}/storage").text)["disk_read_bytes_per_s"]
    assert len(traces) == 11
    assert traces[-1]["name"] == "mean of 2 others" and traces[-1]["y"] == [0.25]


def test_form_urls_redirect_to_their_short_form(server: LiveServer, db_url: str) -> None:
    url = f"{server.url}/storage?q=&label=&label=rack%3Dr1&match=+nvme+&top=10&by=mean&range=6h"
    response = httpx.get(url)
    assert response.status_code == 303
    assert response.headers["location"] == "/storage?range=6h&label=rack%3Dr1&match=nvme"
    assert httpx.get(f"{server.url}{response.headers['location']}").status_code == 200


def test_a_pasted_tz_link_keeps_its_zone_through_the_redirect(server: LiveServer) -> None:
    response = httpx.get(f"{server.url}/storage?tz=Asia/Kathmandu&range=7d&top=10")
    assert response.status_code == 303
    assert response.headers["location"] == "/storage?range=7d&tz=Asia%2FKathmandu"
    page = httpx.get(f"{server.url}{response.headers['location']}")
    assert page.status_code == 200 and "Asia/Kathmandu" in page.text
    # Already short: no redirect; an explicit UTC is kept too (it overrides a zone cookie).
    assert httpx.get(f"{server.url}/storage?range=7d&tz=Asia%2FKathmandu").status_code == 200
    utc = httpx.get(f"{server.url}/storage?tz=UTC&range=7d")
    assert utc.status_code == 303 and utc.headers["location"] == "/storage?range=7d&tz=UTC"
    assert httpx.get(f"{server.url}/storage?range=7d&tz=Mars%2FOlympus").status_code == 400


def test_bad_parameters_are_400_pages_naming_them(server: LiveServer, db_url: str) -> None:
    for query, word in (
        ("top=7", "top"),
        ("by=median", "by"),
        ("label=cluster", "label"),
        ("range=2y", "range"),
        ("start=soon", "start"),
    ):
        response = get(f"{server.url}/storage?{query}")
        assert response.status_code == 400, query
        assert word in response.text and "<html" in response.text


def test_no_storage_data_state(server: LiveServer, db_url: str) -> None:
    send(server, "gpu-only", {"cluster": "a"}, {})
    page = get(f"{server.url}/storage").text
    assert 'id="no-storage-data"' in page
    assert "No storage data: no node reported" in page
    assert all(traces == [] for traces in figures(page).values())
    assert "No block device reported in the last 10 minutes." in page
    assert "No NFS retransmits in the range." in page
