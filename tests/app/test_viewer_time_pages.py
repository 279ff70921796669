"""The viewer's time zone over HTTP, on both backends: pages in the chosen zone, the cookie, bad
zones refused, and wall-clock day buckets across Berlin's fall-back day in SQL."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx
from sqlalchemy import insert, select

from app.db import make_engine, make_session_factory, session_scope
from app.fleet.models import Gpu, Node
from app.metrics import service as metrics_service
from app.series.tables import gpu_sample
from app.viewer_time import fmt_local
from tests.factories import batch, create_token, gpu, iso, sample
from tests.live_server import LiveServer

BERLIN = ZoneInfo("Europe/Berlin")
KOLKATA = ZoneInfo("Asia/Kolkata")
HOST = "gpu-tz-001"


def ingest(server: LiveServer, payload: dict[str, Any]) -> None:
    token = create_token(server.settings.effective_database_url, payload["node"]["hostname"])
    response = httpx.post(
        f"{server.url}/api/v1/ingest", json=payload, headers={"Authorization": f"Bearer {token}"}
    )
    assert response.status_code == 200, response.text


def node_with_xid(server: LiveServer) -> datetime:
    """A node with two GPUs, a sample a minute ago and an Xid 79 on GPU 1; returns its time."""
    gpus = [gpu(i, hostname=HOST) for i in range(2)]
    now = datetime.now(UTC).replace(microsecond=0)
    occurred = now - timedelta(seconds=30)
    ingest(
        server,
        batch(
            HOST,
            gpus=gpus,
            samples=[sample(g, now - timedelta(seconds=60), util_gpu_pct=50) for g in gpus],
            events=[
                {
                    "occurred_at": iso(occurred),
                    "kind": "xid",
                    "gpu_uuid": gpus[1]["uuid"],
                    "xid": 79,
                    "message": "GPU has fallen off the bus.",
                }
            ],
        ),
    )
    return occurred


def boot_of(html: str) -> dict[str, Any]:
    found = re.search(r'id="chart-boot">(.*?)</script>', html, re.S)
    assert found is not None
    return dict(json.loads(found.group(1)))


def test_the_node_page_in_berlin_shows_times_links_and_charts_in_that_zone(
    server: LiveServer,
) -> None:
    occurred = node_with_xid(server)

    response = httpx.get(f"{server.url}/nodes/{HOST}", params={"tz": "Europe/Berlin"})

    assert response.status_code == 200
    html = response.text
    abbr = occurred.astimezone(BERLIN).tzname()
    offset = "+01:00" if abbr == "CET" else "+02:00"
    assert f"All times Europe/Berlin ({abbr}, UTC{offset})" in html
    assert fmt_local(occurred, BERLIN) in html  # the event row
    assert fmt_local(occurred, BERLIN).endswith(f" {abbr}")
    assert f'hx-get="/nodes/{HOST}/_live?tz=Europe%2FBerlin"' in html
    assert 'href="?range=6h&amp;tz=Europe%2FBerlin"' in html
    assert "From (Europe/Berlin)" in html
    assert '<option value="Europe/Berlin" selected>' in html
    boot = boot_of(html)
    assert boot["tz"] == "Europe/Berlin"
    util = boot["figures"][0]
    assert util["figure"]["layout"]["xaxis"]["title"]["text"] == "Time (Europe/Berlin)"
    assert util["figure"]["data"][0]["x"][0].endswith(offset)
    [events] = util["overlay"]
    assert events["text"] == [
        f"{fmt_local(occurred, BERLIN)} · Xid 79 · GPU 1: GPU has fallen off the bus."
    ]
    assert len(util["figure"]["layout"]["shapes"]) == 1


def test_without_a_zone_the_page_stays_in_utc(server: LiveServer) -> None:
    occurred = node_with_xid(server)
    html = httpx.get(f"{server.url}/nodes/{HOST}").text
    assert "All times UTC" in html
    assert occurred.strftime("%Y-%m-%d %H:%M:%SZ") in html
    assert f'hx-get="/nodes/{HOST}/_live"' in html
    assert boot_of(html)["tz"] == "UTC"


def test_the_cookie_is_remembered_but_the_url_wins(server: LiveServer) -> None:
    occurred = node_with_xid(server)
    cookies = {"fw_tz": "Asia/Kolkata"}
    with httpx.Client(base_url=server.url, cookies=cookies) as client:
        remembered = client.get(f"/nodes/{HOST}").text
        linked = client.get(f"/nodes/{HOST}", params={"tz": "UTC"}).text
    assert fmt_local(occurred, KOLKATA) in remembered and " IST" in fmt_local(occurred, KOLKATA)
    assert "All times Asia/Kolkata (IST, UTC+05:30)" in remembered
    assert f'hx-get="/nodes/{HOST}/_live?tz=Asia%2FKolkata"' in remembered
    assert occurred.strftime("%Y-%m-%d %H:%M:%SZ") in linked and "All times UTC" in linked


def test_switching_zones_keeps_a_custom_range_on_the_same_instants(server: LiveServer) -> None:
    node_with_xid(server)
    params = {"start": "2026-11-29T10:00", "end": "2026-11-29T12:00", "tz": "Europe/Berlin"}
    html = httpx.get(f"{server.url}/nodes/{HOST}", params=params).text
    assert "2026-11-29 10:00:00 CET → 2026-11-29 12:00:00 CET" in html
    # Both pickers (charts and footer) send the range as UTC instants: a new zone keeps it.
    assert html.count('<input type="hidden" name="start" value="2026-11-29T09:00:00+00:00">') == 2
    assert html.count('<input type="hidden" name="end" value="2026-11-29T11:00:00+00:00">') == 2
    assert 'value="2026-11-29T10:00" required' in html


def test_the_live_partial_keeps_the_zone_of_its_url(server: LiveServer) -> None:
    occurred = node_with_xid(server)
    response = httpx.get(
        f"{server.url}/nodes/{HOST}/_live",
        params={"tz": "Asia/Kolkata"},
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 200
    assert fmt_local(occurred, KOLKATA) in response.text


def test_a_bad_zone_is_a_400_page_naming_the_parameter(server: LiveServer) -> None:
    node_with_xid(server)
    page = httpx.get(f"{server.url}/nodes/{HOST}", params={"tz": "Mars/Olympus"})
    fragment = httpx.get(
        f"{server.url}/nodes/{HOST}/_live",
        params={"tz": "Mars/Olympus"},
        headers={"HX-Request": "true"},
    )
    api = httpx.get(f"{server.url}/api/v1/nodes/{HOST}/samples", params={"tz": "Mars/Olympus"})

    assert page.status_code == 400
    assert "<html" in page.text and "tz: unknown time zone" in page.text
    assert "All times UTC" in page.text  # the error page itself falls back to UTC
    assert fragment.status_code == 400 and "tz: unknown time zone" in fragment.text
    assert api.status_code == 422
    assert api.json()["detail"][0]["loc"] == ["query", "tz"]


FALL_DAY_START = datetime(2026, 10, 23, 22, tzinfo=UTC)  # 24 October 00:00 CEST


def hourly_fall_back_samples(url: str) -> None:
    """73 hourly samples of GPU 0 from 24 October 00:00 CEST: ``power_w`` is the hour number
    (0…72) and ``util_gpu_pct`` the local day (1 on the 24th, 2 on the 25th, 3 on the 26th)."""
    engine = make_engine(url)
    with session_scope(make_session_factory(engine)) as session:
        node = session.scalars(select(Node).where(Node.hostname == HOST)).one()
        gpu0 = session.scalars(select(Gpu).where(Gpu.node_id == node.id, Gpu.index == 0)).one()
        rows = []
        for hour in range(73):
            at = FALL_DAY_START + timedelta(hours=hour)
            day = at.astimezone(BERLIN).day - 23
            rows.append(
                {
                    "gpu_id": gpu0.id,
                    "sampled_at": at,
                    "received_at": at,
                    "power_w": float(hour),
                    "util_gpu_pct": float(day),
                }
            )
        session.execute(insert(gpu_sample), rows)
    engine.dispose()


def test_day_buckets_follow_berlin_midnight_across_the_25_hour_day_on_both_backends(
    server: LiveServer, db_url: str
) -> None:
    ingest(server, batch(HOST, gpus=1, samples_per_gpu=0))
    hourly_fall_back_samples(db_url)
    end = FALL_DAY_START + timedelta(hours=73)

    engine = make_engine(db_url)
    with session_scope(make_session_factory(engine)) as session:
        node = session.scalars(select(Node).where(Node.hostname == HOST)).one()
        [series] = metrics_service.node_series(
            session,
            node=node,
            metrics=["power_w", "util_gpu_pct"],
            start=FALL_DAY_START,
            end=end,
            step_s=86400,
            zone=BERLIN,
        )
    engine.dispose()

    assert series.times == [
        datetime(2026, 10, 23, 22, tzinfo=UTC),  # 24 Oct 00:00 CEST, 24 h
        datetime(2026, 10, 24, 22, tzinfo=UTC),  # 25 Oct 00:00 CEST, 25 h
        datetime(2026, 10, 25, 23, tzinfo=UTC),  # 26 Oct 00:00 CET
    ]
    assert [float(v) for v in series.values["util_gpu_pct"]] == [1.0, 2.0, 3.0]
    assert [float(v) for v in series.values["power_w"]] == [11.5, 36.0, 60.5]

    params: dict[str, str | int] = {
        "start": iso(FALL_DAY_START),
        "end": iso(end),
        "metrics": "power_w",
        "step_s": 86400,
    }
    zoned = httpx.get(
        f"{server.url}/api/v1/nodes/{HOST}/samples", params={**params, "tz": "Europe/Berlin"}
    ).json()
    plain = httpx.get(f"{server.url}/api/v1/nodes/{HOST}/samples", params=params).json()
    assert [t[:19] for t in zoned["series"][0]["t"]] == [
        "2026-10-23T22:00:00",
        "2026-10-24T22:00:00",
        "2026-10-25T23:00:00",
    ]
    assert zoned["series"][0]["values"]["power_w"] == [11.5, 36.0, 60.5]
    assert [t[:10] for t in plain["series"][0]["t"]] == [
        "2026-10-23",
        "2026-10-24",
        "2026-10-25",
        "2026-10-26",
    ]
