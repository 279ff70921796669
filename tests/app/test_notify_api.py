"""``/api/v1/channels`` and ``/api/v1/routes`` over a live server (both backends): URLs masked
in every answer, clear 4xx naming the field, the SSRF guard, the test message and the delivery
log; and the one-click acknowledgement page (GET changes nothing, POST acknowledges)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.config import Settings
from app.db import make_engine, make_session_factory, session_scope
from app.notify.jobs import NotifyJobs, signer_for
from tests.conftest import make_settings
from tests.live_server import LiveServer
from tests.notify_helpers import Alerts, receiver, wipe_notify

SECRET_PATH = "/services/T0SECRET/B0SECRET/api-SECRET-token"


@pytest.fixture
def live(db_url: str, tmp_path: Path) -> Iterator[tuple[LiveServer, Settings]]:
    settings = make_settings(db_url, tmp_path, notify_allow_hosts=["127.0.0.1"])
    server = LiveServer(settings)
    server.start()
    yield server, settings
    server.stop()
    wipe_notify(db_url)


def test_channels_show_a_masked_url_and_never_the_secret(
    live: tuple[LiveServer, Settings],
) -> None:
    server, _ = live
    api = f"{server.url}/api/v1"
    body = {
        "name": "ops-hook",
        "kind": "webhook",
        "url": f"http://127.0.0.1:9{SECRET_PATH}",
        "secret": "hmac-SECRET-key",
        "team": "vision",
        "options": {"max_alerts": "10"},
    }
    created = httpx.post(f"{api}/channels", json=body, timeout=30)
    assert created.status_code == 201, created.text
    out = created.json()
    assert out["url_masked"] == "http://127.0.0.1:9/…"
    assert (out["has_secret"], out["team"], out["broken"], out["last_error"]) == (
        True,
        "vision",
        False,
        None,
    )
    texts = [
        created.text,
        httpx.get(f"{api}/channels", timeout=30).text,
        httpx.get(f"{api}/channels/{out['id']}", timeout=30).text,
        httpx.patch(f"{api}/channels/{out['id']}", json={"enabled": False}, timeout=30).text,
        httpx.get(f"{server.url}/openapi.json", timeout=30).text,
    ]
    for text in texts:
        assert "SECRET" not in text
    assert httpx.get(f"{api}/channels", params={"team": "research"}, timeout=30).json() == []
    assert httpx.post(f"{api}/channels", json=body, timeout=30).status_code == 409


@pytest.mark.parametrize(
    ("change", "status", "detail"),
    [
        ({"kind": "carrier-pigeon"}, 400, "kind: unknown channel kind 'carrier-pigeon'"),
        ({"url": "http://169.254.169.254/latest"}, 400, "url: host 169.254.169.254 resolves"),
        ({"url": "ftp://example.com/x"}, 400, "url: only http and https"),
        ({"options": {"max_alerts": "many"}}, 400, "options.max_alerts: must be a whole"),
    ],
)
def test_bad_channels_get_a_4xx_naming_the_field(
    live: tuple[LiveServer, Settings], change: dict[str, object], status: int, detail: str
) -> None:
    server, _ = live
    body = {"name": "x", "kind": "webhook", "url": "http://127.0.0.1:9/hook", **change}
    answer = httpx.post(f"{server.url}/api/v1/channels", json=body)
    assert answer.status_code == status
    assert answer.json()["detail"].startswith(detail)


def test_routes_crud_and_validation(live: tuple[LiveServer, Settings]) -> None:
    server, _ = live
    api = f"{server.url}/api/v1"
    channel = httpx.post(
        f"{api}/channels",
        json={"name": "c", "kind": "webhook", "url": "http://127.0.0.1:9/hook"},
    ).json()
    route = httpx.post(f"{api}/routes", json={"channel_id": channel["id"], "team": "vision"})
    assert route.status_code == 201
    got = route.json()
    assert {k: got[k] for k in ("team", "severities", "group_by", "group_wait_s")} == {
        "team": "vision",
        "severities": [],
        "group_by": ["alertname", "cluster"],
        "group_wait_s": 5.0,
    }
    assert got["repeat_interval_s"] == 14400.0
    replaced = httpx.put(
        f"{api}/routes/{got['id']}",
        json={"channel_id": channel["id"], "severities": ["warning", "critical"]},
    ).json()
    assert (replaced["team"], replaced["severities"]) == (None, ["critical", "warning"])
    bad = httpx.post(f"{api}/routes", json={"channel_id": 999999})
    assert (bad.status_code, bad.json()["detail"]) == (400, "channel_id: no channel with id 999999")
    bad = httpx.post(f"{api}/routes", json={"channel_id": channel["id"], "severities": ["loud"]})
    assert bad.status_code == 422 and "unknown severities ['loud']" in bad.text
    assert httpx.delete(f"{api}/routes/{got['id']}").status_code == 204
    assert httpx.get(f"{api}/routes").json() == []
    assert httpx.get(f"{api}/routes/{got['id']}").status_code == 404


def test_the_test_message_arrives_and_shows_in_the_delivery_log(
    live: tuple[LiveServer, Settings], db_url: str
) -> None:
    server, settings = live
    api = f"{server.url}/api/v1"
    with receiver() as hook:
        channel = httpx.post(
            f"{api}/channels",
            json={"name": "t", "kind": "webhook", "url": hook.url + SECRET_PATH},
        ).json()
        queued = httpx.post(f"{api}/channels/{channel['id']}/test")
        assert queued.status_code == 202
        assert (queued.json()["status"], queued.json()["kind"]) == ("queued", "test")
        engine = make_engine(db_url)
        jobs = NotifyJobs(settings, make_session_factory(engine))
        try:
            report = jobs.tick()
        finally:
            jobs.close()
            engine.dispose()
        assert report.delivered == 1
    [body] = hook.bodies()
    assert body["fleetwatch"]["is_test"] is True
    assert body["alerts"][0]["labels"]["alertname"] == "fleetwatch-test"
    [entry] = httpx.get(f"{api}/channels/{channel['id']}/deliveries").json()
    assert {k: entry[k] for k in ("kind", "status", "attempts", "last_status_code")} == {
        "kind": "test",
        "status": "delivered",
        "attempts": 1,
        "last_status_code": 200,
    }
    assert entry["latency_ms"] is not None
    assert httpx.get(f"{api}/channels/{channel['id']}/deliveries?status=failed").json() == []
    assert httpx.get(f"{api}/channels/{channel['id']}/deliveries?status=odd").status_code == 422


def test_the_ack_link_asks_first_and_acknowledges_on_post(
    live: tuple[LiveServer, Settings], db_url: str
) -> None:
    server, settings = live
    engine = make_engine(db_url)
    try:
        alert_id = Alerts(make_session_factory(engine)).transition("gpu-lost", "n1", "firing")
    finally:
        engine.dispose()
    signer = signer_for(settings)
    link = signer.url(server.url, alert_id=alert_id, fingerprint="n1")
    page = httpx.get(link)
    assert page.status_code == 200
    assert "Acknowledge this alert" in page.text and "gpu-lost on n1" in page.text
    detail = httpx.get(f"{server.url}/api/v1/alerts/{alert_id}").json()
    assert detail["acked"] is False  # GET (a chat unfurler) changed nothing
    done = httpx.post(link)
    assert done.status_code == 200 and "Acknowledged" in done.text
    detail = httpx.get(f"{server.url}/api/v1/alerts/{alert_id}").json()
    assert detail["acked"] is True
    assert [a["owner"] for a in detail["acks"]] == ["ack link"]
    assert httpx.post(link).status_code == 200  # a second click does not ack twice
    assert len(httpx.get(f"{server.url}/api/v1/alerts/{alert_id}").json()["acks"]) == 1
    wrong = signer.url(server.url, alert_id=alert_id, fingerprint="other")
    assert httpx.post(wrong).status_code == 400
    tampered = httpx.get(link[:-3] + "xyz")
    assert tampered.status_code == 400 and "not valid" in tampered.text


def test_an_unreadable_url_shows_as_unreadable(
    live: tuple[LiveServer, Settings], db_url: str
) -> None:
    from app.notify.models import NotifyChannel

    server, _ = live
    api = f"{server.url}/api/v1"
    channel = httpx.post(
        f"{api}/channels", json={"name": "k", "kind": "webhook", "url": "http://127.0.0.1:9/h"}
    ).json()
    engine = make_engine(db_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            row = session.get(NotifyChannel, channel["id"])
            assert row is not None
            row.url_encrypted = "gAAAAA-not-a-token"
    finally:
        engine.dispose()
    got = httpx.get(f"{api}/channels/{channel['id']}").json()
    assert got["url_masked"] == "(unreadable: enter the URL again)"
