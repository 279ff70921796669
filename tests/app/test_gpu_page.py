"""The GPU page and its JSON over HTTP, on both backends, with data put in through the real
ingest API (tests/factories.py values: util 50 %, 40 GiB used, 350.5 W of 700 W, 55 °C …)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import update

from app.db import make_engine, make_session_factory, session_scope
from app.fleet.models import Node
from tests.app.section_factories import gpu_extras, nvlinks
from tests.factories import batch, create_token, gpu, iso, sample
from tests.live_server import LiveServer


def ingest(server: LiveServer, payload: dict[str, Any]) -> dict[str, Any]:
    """Create the node's token and POST ``payload`` to the ingest API; returns the answer."""
    token = create_token(server.settings.effective_database_url, payload["node"]["hostname"])
    response = httpx.post(
        f"{server.url}/api/v1/ingest", json=payload, headers={"Authorization": f"Bearer {token}"}
    )
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def get(server: LiveServer, path: str, **kwargs: Any) -> httpx.Response:
    return httpx.get(f"{server.url}{path}", timeout=30, **kwargs)


def value_cell(html: str, metric: str) -> str:
    """The inner HTML of the live-values cell of ``metric``."""
    found = re.search(rf'<td class="num[^"]*" data-metric="{metric}">(.*?)</td>', html, re.S)
    assert found is not None, metric
    return found.group(1)


def identity(html: str) -> str:
    found = re.search(r'<dl class="facts" id="gpu-identity">(.*?)</dl>', html, re.S)
    assert found is not None
    return re.sub(r">\d+ (s|min) ago<", ">AGE<", found.group(1))  # seconds pass between pages


def test_index_and_uuid_routes_show_the_same_gpu_with_its_exact_values(
    server: LiveServer,
) -> None:
    gpus = [gpu(i, hostname="gpu-a-017") for i in range(2)]
    ingest(server, batch("gpu-a-017", gpus=gpus))
    uuid = gpus[1]["uuid"]

    by_index = get(server, "/nodes/gpu-a-017/gpus/1")
    by_uuid = get(server, f"/nodes/gpu-a-017/gpus/{uuid.upper()}")

    assert by_index.status_code == 200 and by_uuid.status_code == 200
    page = by_index.text
    assert identity(page) == identity(by_uuid.text)
    assert f"<code>{uuid}</code>" in identity(page)
    assert "<code>00000000:28:00.0</code>" in identity(page)
    assert "NVIDIA H100 80GB HBM3" in identity(page)
    assert "570.133.20" in identity(page) and "disabled" in identity(page)
    assert value_cell(page, "util_gpu_pct") == "50 %"
    assert value_cell(page, "mem_used_bytes") == "40.0 GiB / 79.6 GiB"
    assert value_cell(page, "power_w") == "350.5 W / 700 W"
    assert value_cell(page, "temp_c") == "55 °C"
    assert value_cell(page, "sm_clock_mhz") == "1,755 MHz"
    assert value_cell(page, "pstate") == "P0"
    assert "clocks not held back" in value_cell(page, "clocks_event_reasons")
    assert "<title>GPU 1 · gpu-a-017 · Fleetwatch</title>" in page

    api_index = get(server, "/api/v1/nodes/gpu-a-017/gpus/1").json()
    api_uuid = get(server, f"/api/v1/nodes/gpu-a-017/gpus/{uuid.lower()}").json()
    for answer in (api_index, api_uuid):
        assert answer["hostname"] == "gpu-a-017"
        assert answer["gpu"]["uuid"] == uuid and answer["gpu"]["index"] == 1
        assert answer["gpu"]["latest"]["power_w"] == 350.5
        assert answer["gpu"]["latest"]["util_gpu_pct"] == 50
        assert answer["gpu"]["latest"]["fan_pct"] is None
        assert answer["health"]["state"] == "healthy" and answer["health"]["reasons"] == []
        assert answer["node_freshness"] == "fresh"
        assert answer["driver_version"] == "570.133.20"
        assert answer["nvlinks"] == [] and answer["events"] == []


def test_the_node_page_links_each_gpu_to_its_page(server: LiveServer) -> None:
    gpus = [gpu(i, hostname="gpu-a-017") for i in range(2)]
    ingest(server, batch("gpu-a-017", gpus=gpus))

    node_page = get(server, "/nodes/gpu-a-017").text

    for g in gpus:
        assert f'<a href="/nodes/gpu-a-017/gpus/{g["uuid"]}"' in node_page


def test_an_unknown_gpu_or_node_is_a_404_naming_it(server: LiveServer) -> None:
    ingest(server, batch("gpu-a-017", gpus=2))

    on_node = " (index or UUID) on node &#39;gpu-a-017&#39;"
    for path, named in (
        ("/nodes/gpu-a-017/gpus/7", "no GPU &#39;7&#39;" + on_node),
        ("/nodes/gpu-a-017/gpus/GPU-nope", "no GPU &#39;GPU-nope&#39;" + on_node),
        ("/nodes/nowhere/gpus/0", "no node named &#39;nowhere&#39;"),
    ):
        page = get(server, path)
        api = get(server, "/api/v1" + path)
        samples = get(server, "/api/v1" + path + "/samples")
        assert page.status_code == 404 and "text/html" in page.headers["content-type"]
        assert named in page.text
        assert api.status_code == 404 and samples.status_code == 404
        assert api.json()["detail"] == named.replace("&#39;", "'")


def test_a_bad_range_is_a_4xx_naming_the_parameter(server: LiveServer) -> None:
    ingest(server, batch("gpu-a-017", gpus=1))
    base = "/nodes/gpu-a-017/gpus/0"

    unknown = get(server, base, params={"range": "2y"})
    backwards = get(server, base, params={"start": "2026-11-29T10:00", "end": "2026-11-29T09:00"})
    garbage = get(server, "/api/v1" + base, params={"start": "yesterday"})
    metric = get(server, "/api/v1" + base + "/samples", params={"metrics": "temp_c,bogus"})
    step = get(server, "/api/v1" + base + "/samples", params={"step_s": "-1"})
    zone = get(server, "/api/v1" + base + "/samples", params={"tz": "Mars/Olympus"})
    page_zone = get(server, base, params={"tz": "Mars/Olympus"})

    assert unknown.status_code == 400 and "unknown range &#39;2y&#39;" in unknown.text
    assert backwards.status_code == 400 and "start must be before end" in backwards.text
    assert garbage.status_code == 400 and garbage.json()["detail"].startswith("start: not a time")
    assert metric.status_code == 422 and metric.json()["detail"][0]["loc"] == ["query", "metrics"]
    assert step.status_code == 422 and step.json()["detail"][0]["loc"] == ["query", "step_s"]
    assert zone.status_code == 422 and zone.json()["detail"][0]["loc"] == ["query", "tz"]
    assert page_zone.status_code == 400 and "unknown time zone" in page_zone.text


def test_values_not_reported_are_na_with_the_reason_never_zero(server: LiveServer) -> None:
    start = datetime.now(UTC) - timedelta(seconds=20)
    unavailable = {"util_gpu_pct": "NOT_SUPPORTED", "util_mem_pct": "TIMEOUT"}
    g = gpu(0, hostname="na-node", unavailable=unavailable)
    s = sample(g, start, util_gpu_pct=None, util_mem_pct=None, temp_c=None, power_limit_w=None)
    s["sm_clock_mhz"] = 10**9  # implausible: the server drops it
    ingest(server, batch("na-node", gpus=[g], samples=[s]))

    page = get(server, "/nodes/na-node/gpus/0").text

    # Not supported by the card, not readable this time, dropped as implausible, not sent.
    assert value_cell(page, "util_gpu_pct") == (
        '<span class="na na-unsupported" title="not supported by this GPU: NOT_SUPPORTED">'
        "n/s</span>"
    )
    assert value_cell(page, "util_mem_pct") == (
        '<span class="na" title="not available: TIMEOUT">N/A</span>'
    )
    assert value_cell(page, "sm_clock_mhz") == (
        '<span class="na na-implausible" title="implausible value dropped by the server '
        "(outside the metric's plausible range)\">dropped</span>"
    )
    assert value_cell(page, "temp_c") == (
        '<span class="na" title="not reported by the agent">N/A</span>'
    )
    assert value_cell(page, "power_w").endswith(
        '/ <span class="na" title="not reported by the agent">N/A</span>'
    )
    assert ">N/A<" in value_cell(page, "ecc_corrected_volatile_count")
    assert value_cell(page, "pcie_link_gen") == (
        '<span class="na" title="not reported by the agent">N/A</span>'
    )
    assert ">0 %<" not in page and ">0 °C<" not in page


def test_the_api_names_the_metrics_dropped_from_the_newest_sample_only(
    server: LiveServer,
) -> None:
    start = datetime.now(UTC) - timedelta(seconds=30)
    g = gpu(0, hostname="bad-sensor")
    first = sample(g, start, temp_c=65535.0)  # a sensor reading the driver's sentinel
    answer = ingest(server, batch("bad-sensor", gpus=[g], samples=[first]))
    dropped = get(server, "/api/v1/nodes/bad-sensor").json()["gpus"][0]["implausible"]
    ingest(
        server, batch("bad-sensor", gpus=[g], samples=[sample(g, start + timedelta(seconds=10))])
    )
    later = get(server, "/api/v1/nodes/bad-sensor").json()["gpus"][0]

    assert answer["nulled_values"] == {"temp_c": 1}
    assert dropped == {"temp_c": start.isoformat()}
    assert later["implausible"] is None and later["latest"]["temp_c"] is not None


def test_hostile_strings_are_escaped(server: LiveServer) -> None:
    now = datetime.now(UTC)
    evil = "<script>alert(1)</script>"
    g = dict(gpu(0, hostname="evil-node", name=evil), **gpu_extras())
    g["processes"] = [{"pid": 1, "used_memory_bytes": 1, "name": evil, "user": "<b>x</b>"}]
    event = {
        "occurred_at": iso(now - timedelta(seconds=30)),
        "kind": "xid",
        "gpu_uuid": g["uuid"],
        "xid": 79,
        "message": '<img src=x onerror="alert(2)">',
    }
    ingest(server, batch("evil-node", gpus=[g], events=[event]))

    for path in ("/nodes/evil-node/gpus/0", "/nodes/evil-node/gpus/0/_live"):
        html = get(server, path).text
        assert "<script>alert" not in html and "<img src=x" not in html and "<b>x</b>" not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
        assert "&lt;img src=x onerror=&#34;alert(2)&#34;&gt;" in html
    not_found = get(server, "/nodes/evil-node/gpus/<img src=x onerror=alert(3)>")
    assert not_found.status_code == 404
    assert "<img" not in not_found.text
    assert "no GPU &#39;&lt;img src=x onerror=alert(3)&gt;&#39;" in not_found.text


def test_events_of_this_gpu_in_the_range_with_the_xid_meaning(server: LiveServer) -> None:
    now = datetime.now(UTC)
    gpus = [gpu(i, hostname="xid-node") for i in range(2)]

    def xid(index: int, code: int, age: timedelta) -> dict[str, Any]:
        return {
            "occurred_at": iso(now - age),
            "kind": "xid",
            "gpu_uuid": gpus[index]["uuid"],
            "xid": code,
            "message": f"NVRM: Xid {code} on GPU {index}",
        }

    events = [
        xid(1, 79, timedelta(minutes=5)),
        xid(1, 31, timedelta(hours=3)),
        xid(0, 48, timedelta(minutes=1)),
        {
            "occurred_at": iso(now - timedelta(minutes=2)),
            "kind": "xid",
            "pci_bus_id": gpus[1]["pci_bus_id"].lower(),
            "xid": 999,
            "message": "by PCI address only",
        },
    ]
    ingest(server, batch("xid-node", gpus=gpus, events=events))

    hour = get(server, "/api/v1/nodes/xid-node/gpus/1").json()
    six = get(server, "/api/v1/nodes/xid-node/gpus/1", params={"range": "6h"}).json()
    page = get(server, "/nodes/xid-node/gpus/1", params={"range": "6h"}).text

    assert [(e["xid"], e["xid_meaning"]) for e in hour["events"]] == [
        (999, None),
        (79, "GPU has fallen off the bus"),
    ]
    assert [e["xid"] for e in six["events"]] == [999, 79, 31]
    assert six["events"][2]["xid_meaning"] == "GPU memory page fault (application)"
    assert "GPU has fallen off the bus" in page and "not in the catalog" in page
    assert "NVRM: Xid 48" not in page  # GPU 0's
    assert hour["health"]["state"] == "unhealthy"
    assert [r["code"] for r in hour["health"]["reasons"]] == ["xid_79", "xid_999"]


def test_nvlinks_processes_and_mig_instances_of_the_gpu(server: LiveServer) -> None:
    at = datetime.now(UTC) - timedelta(seconds=10)
    gpus = [gpu(i, hostname="hgx-node") for i in range(2)]
    gpus[0] = dict(gpus[0], **gpu_extras())
    to_gpu1 = dict(
        nvlinks(gpus[0], at, links=1)[0],
        link=2,
        state="down",
        remote_pci_bus_id=gpus[1]["pci_bus_id"],
        remote_device_type="gpu",
        crc_errors=7,
    )
    links = [*nvlinks(gpus[0], at, links=2), to_gpu1]
    ingest(server, batch("hgx-node", gpus=gpus, nvlinks=links + nvlinks(gpus[1], at, links=1)))

    page = get(server, "/nodes/hgx-node/gpus/0").text
    answer = get(server, "/api/v1/nodes/hgx-node/gpus/0").json()

    table = re.search(r'<table class="data nvlinks gpu-nvlinks">(.*?)</table>', page, re.S)
    assert table is not None
    link_rows = re.findall(r"<tr class=\"[^\"]*\">(.*?)</tr>", table.group(1), re.S)
    assert len(link_rows) == 3
    assert "nvswitch <code>00000000:C7:00.0</code>" in link_rows[0]
    assert "1.2 GiB/s" in link_rows[0] and "1.4 GiB/s" in link_rows[0]
    assert f'<a href="/nodes/hgx-node/gpus/{gpus[1]["uuid"]}">GPU 1</a>' in link_rows[2]
    assert "✕</span> down" in link_rows[2] and ">7</span>" in link_rows[2]
    assert [(n["link"], n["state"], n["crc_errors"]) for n in answer["nvlinks"]] == [
        (0, "up", 0),
        (1, "up", 0),
        (2, "down", 7),
    ]
    assert "<code>python3</code>" in page and "alice" in page and "57.0 GiB" in page
    assert "1g.10gb" in page and "MIG-5b1f5f1c-0000-4000-8000-000000000001" in page
    assert answer["gpu"]["processes"][1] == {
        "pid": 777,
        "used_memory_bytes": 1048576,
        "name": None,
        "user": None,
    }
    assert answer["health"]["state"] == "unhealthy"
    assert [r["code"] for r in answer["health"]["reasons"]] == ["nvlink_down"]


def test_the_samples_api_and_ecc_history_of_one_gpu(server: LiveServer) -> None:
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=3)
    gpus = [gpu(i, hostname="ecc-node") for i in range(2)]
    counts = [0, 0, 3, 3, 5]
    samples = [
        sample(
            gpus[1],
            start + timedelta(seconds=10 * i),
            temp_c=60 + i,
            ecc_corrected_volatile_count=c,
        )
        for i, c in enumerate(counts)
    ] + [sample(gpus[0], start, temp_c=40)]
    ingest(server, batch("ecc-node", gpus=gpus, samples=samples))

    raw = get(
        server,
        f"/api/v1/nodes/ecc-node/gpus/{gpus[1]['uuid']}/samples",
        params={"metrics": "temp_c,ecc_corrected_volatile_count", "step_s": "0"},
    ).json()
    default = get(server, "/api/v1/nodes/ecc-node/gpus/1/samples").json()
    page = get(server, "/nodes/ecc-node/gpus/1", params={"range": "15m"}).text

    assert [s["gpu_index"] for s in raw["series"]] == [1]
    assert raw["series"][0]["values"] == {
        "temp_c": [60, 61, 62, 63, 64],
        "ecc_corrected_volatile_count": counts,
    }
    assert raw["step_s"] == 0 and len(raw["series"][0]["t"]) == 5
    assert "nvlink_rx_bytes_per_s" in default["metrics"]
    assert "ecc_uncorrected_aggregate_count" in default["metrics"]
    history = re.search(r'<table class="data ecc-history">(.*?)</table>', page, re.S)
    assert history is not None
    added = re.findall(r"\+(\d+)</span>", history.group(1))
    assert added == ["2", "3"]
    assert "ECC corrected (volatile)" in history.group(1)
    boot = re.search(r'<script type="application/json" id="chart-boot">(.*?)</script>', page, re.S)
    assert boot is not None
    figures = json.loads(boot.group(1))["figures"]
    temps = next(f for f in figures if f["metric"] == "temp_c")["figure"]["data"][0]["y"]
    assert temps == [60.0, 61.0, 62.0, 63.0, 64.0]
    samples_url = f"/api/v1/nodes/ecc-node/gpus/{gpus[1]['uuid']}/samples"
    assert json.loads(boot.group(1))["samples_url"] == samples_url


def test_the_live_partial_comes_alone_and_keeps_the_range(server: LiveServer) -> None:
    lost = [gpu(0, hostname="lost-node", state="lost", state_reason="NVML_ERROR_GPU_IS_LOST")]
    ingest(server, batch("lost-node", gpus=lost))

    page = get(server, "/nodes/lost-node/gpus/0", params={"range": "6h"}).text
    partial = get(
        server,
        "/nodes/lost-node/gpus/0/_live",
        params={"range": "6h"},
        headers={"HX-Request": "true"},
    )

    hx = f'hx-get="/nodes/lost-node/gpus/{lost[0]["uuid"]}/_live?range=6h"'
    assert hx in page and 'hx-trigger="every 5s"' in page
    assert 'aria-controls="gpu-live"' in page
    assert partial.status_code == 200 and "<html" not in partial.text
    assert 'id="gpu-identity"' in partial.text and "Events from" in partial.text
    assert "Unhealthy" in partial.text and "gpu_lost" in partial.text
    assert "NVML_ERROR_GPU_IS_LOST" in partial.text


def test_in_the_viewers_zone_the_range_inputs_and_refresh_keep_it(server: LiveServer) -> None:
    ingest(server, batch("tz-node", gpus=1))

    page = get(server, "/nodes/tz-node/gpus/0", params={"range": "6h", "tz": "Asia/Kolkata"}).text

    uuid = gpu(0, hostname="tz-node")["uuid"]
    assert f'hx-get="/nodes/tz-node/gpus/{uuid}/_live?range=6h&amp;tz=Asia%2FKolkata"' in page
    assert 'href="?range=24h&amp;tz=Asia%2FKolkata"' in page
    assert "From (Asia/Kolkata)" in page
    boot = re.search(r'<script type="application/json" id="chart-boot">(.*?)</script>', page, re.S)
    assert boot is not None and json.loads(boot.group(1))["tz"] == "Asia/Kolkata"


def test_pcie_link_throttle_reasons_ecc_and_remapped_rows_are_shown_by_name(
    server: LiveServer,
) -> None:
    at = datetime.now(UTC) - timedelta(seconds=5)
    g = gpu(0, hostname="sick-node")
    s = sample(
        g,
        at,
        pcie_link_gen=4,
        pcie_link_gen_max=5,
        pcie_link_width=16,
        pcie_link_width_max=16,
        clocks_event_reasons=0x44,
        ecc_corrected_volatile_count=12,
        ecc_uncorrected_aggregate_count=0,
        remapped_rows_correctable_count=2,
        remapped_rows_uncorrectable_count=1,
        remapped_rows_pending=1,
        retired_pages_pending=0,
        pcie_tx_bytes_per_s=3 * 2**30,
    )
    ingest(server, batch("sick-node", gpus=[g], samples=[s]))

    page = get(server, "/nodes/sick-node/gpus/0").text

    link = value_cell(page, "pcie_link_gen")
    assert "▼</span> Gen4 x16</span>" in link and "(max Gen5 x16)" in link
    reasons = value_cell(page, "clocks_event_reasons")
    assert 'title="bitmask 0x44"' in reasons
    assert re.findall(r'<span class="chip chip-warn">(\w+)</span>', reasons) == [
        "SwPowerCap",
        "HwThermalSlowdown",
    ]
    assert value_cell(page, "ecc_corrected_volatile_count") == "12"
    assert value_cell(page, "ecc_uncorrected_aggregate_count") == "0"
    assert value_cell(page, "retired_pages_pending") == "no"
    assert value_cell(page, "pcie_tx_bytes_per_s") == "3.0 GiB/s"
    rows = value_cell(page, "remapped_rows_correctable_count")
    assert rows.startswith('2 / <span class="status status-warn">1</span>')
    assert ">pending</span>" in rows


def test_a_stale_node_makes_its_gpu_unknown_with_the_nodes_reason(server: LiveServer) -> None:
    ingest(server, batch("quiet-node", gpus=1))
    engine = make_engine(server.settings.effective_database_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            session.execute(
                update(Node)
                .where(Node.hostname == "quiet-node")
                .values(last_seen_at=datetime.now(UTC) - timedelta(hours=1))
            )
    finally:
        engine.dispose()

    answer = get(server, "/api/v1/nodes/quiet-node/gpus/0").json()
    page = get(server, "/nodes/quiet-node/gpus/0").text

    assert answer["node_freshness"] == "stale"
    assert answer["health"]["state"] == "unknown" and answer["node_state"] == "unknown"
    assert [r["code"] for r in answer["node_reasons"]] == ["stale"]
    assert "Unknown" in page and "no telemetry received for more than 120 s" in page
    assert "Healthy" not in page
