"""Notification pages over a live server (both backends): create a generic-webhook channel
through the form, send the test message to a local receiver and see it delivered in the log;
the webhook URL and secret never reach any page's HTML nor the server's logs; a broken channel
shows its last error; user text is escaped; bad input is answered next to the field."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import update

from app.config import Settings
from app.db import make_engine, make_session_factory, session_scope
from app.notify import service
from app.notify.jobs import NotifyJobs
from app.notify.models import NotifyChannel
from tests.conftest import make_settings
from tests.live_server import LiveServer
from tests.notify_helpers import Alerts, Answer, receiver, wipe_notify

SECRET_PATH = "/hooks/T0SECRET/B0SECRET/path-SECRET-token"
HMAC_KEY = "hmac-SECRET-signing-key"
Live = tuple[LiveServer, Settings]


@pytest.fixture
def live(db_url: str, tmp_path: Path) -> Iterator[Live]:
    settings = make_settings(db_url, tmp_path, notify_allow_hosts=["127.0.0.1"])
    server = LiveServer(settings)
    server.start()
    yield server, settings
    server.stop()
    wipe_notify(db_url)


def tick(settings: Settings, db_url: str) -> int:
    """One delivery worker pass (the test server runs no jobs); returns rows delivered."""
    engine = make_engine(db_url)
    jobs = NotifyJobs(settings, make_session_factory(engine))
    try:
        return jobs.tick().delivered
    finally:
        jobs.close()
        engine.dispose()


def create_webhook(server: LiveServer, url: str, **extra: str) -> int:
    form = {"kind": "webhook", "name": "ops hook", "team": "vision", "url": url}
    form.update(extra)
    made = httpx.post(f"{server.url}/notifications/channels", data=form)
    assert made.status_code == 303, made.text
    found = re.fullmatch(r"/notifications#channel-(\d+)", made.headers["location"])
    assert found is not None
    return int(found.group(1))


def cells_of(row: str) -> list[str]:
    """The text of a table row's cells, tags removed and spaces collapsed."""
    found = re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row, re.S)
    return [" ".join(re.sub(r"<[^>]+>", " ", c).split()) for c in found]


def field_errors(html: str) -> dict[str, str]:
    return dict(re.findall(r'<span class="field-error" id="([^"]+)-error">([^<]*)</span>', html))


def test_the_test_message_is_delivered_and_no_page_or_log_shows_the_secret(
    live: Live, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    server, settings = live
    caplog.set_level(logging.DEBUG)
    with receiver() as hook:
        cid = create_webhook(server, hook.url + SECRET_PATH, secret=HMAC_KEY, opt_max_alerts="7")
        queued = httpx.post(
            f"{server.url}/notifications/channels/{cid}/test", headers={"HX-Request": "true"}
        )
        assert queued.status_code == 200
        assert "test message queued" in queued.text
        poll = re.search(
            r'hx-get="(/notifications/channels/\d+/deliveries/\d+/_result)"', queued.text
        )
        assert poll is not None
        assert tick(settings, db_url) == 1
        [request] = hook.requests
    assert request.path == SECRET_PATH
    assert request.json()["fleetwatch"]["is_test"] is True
    assert request.headers["X-Fleetwatch-Signature"].startswith("sha256=")

    result = httpx.get(server.url + poll.group(1))
    assert "test message delivered (HTTP 200)" in result.text
    log_page = httpx.get(f"{server.url}/notifications/channels/{cid}")
    assert log_page.status_code == 200
    [row] = re.findall(
        r'<tr id="delivery-\d+" class="delivery-row">(.*?)</tr>', log_page.text, re.S
    )
    cells = cells_of(row)
    assert cells[2:6] == ["test", "✓ delivered", "1", "200"]
    assert cells[6].endswith("ms")
    assert "1 delivery" in log_page.text

    pages = [
        httpx.get(f"{server.url}/notifications").text,
        httpx.get(f"{server.url}/notifications/channels/{cid}/edit").text,
        log_page.text,
        httpx.get(f"{server.url}/notifications/channels/{cid}/_log").text,
        httpx.get(f"{server.url}/notifications/channels/{cid}/delete").text,
        result.text,
        queued.text,
    ]
    for html in pages:
        assert "SECRET" not in html
    masked = f"http://127.0.0.1:{hook.port}/…"
    assert [masked in html for html in pages] == [True, True, True, False, True, False, False]
    edit = pages[1]
    assert re.search(r'<input id="url" name="url" type="text" maxlength="2048" value=""', edit)
    assert 'placeholder="unchanged unless filled"' in edit
    assert 'id="opt_max_alerts" name="opt_max_alerts" type="text" maxlength="64" value="7"' in edit
    assert '<select id="opt_truncate" name="opt_truncate">' in edit
    assert '<option value="" selected>no: split into several bodies</option>' in edit
    assert "SECRET" not in caplog.text


def test_an_edit_with_empty_url_and_secret_keeps_them(live: Live, db_url: str) -> None:
    server, settings = live
    with receiver() as hook:
        cid = create_webhook(server, hook.url + SECRET_PATH, secret=HMAC_KEY)
        saved = httpx.post(
            f"{server.url}/notifications/channels/{cid}/edit",
            data={"name": "renamed", "team": "", "url": "", "secret": "", "opt_max_alerts": ""},
        )
        assert (saved.status_code, saved.headers["location"]) == (
            303,
            f"/notifications#channel-{cid}",
        )
        httpx.post(f"{server.url}/notifications/channels/{cid}/test")
        assert tick(settings, db_url) == 1
        [request] = hook.requests
    assert request.path == SECRET_PATH
    assert "X-Fleetwatch-Signature" in request.headers
    channel = httpx.get(f"{server.url}/api/v1/channels/{cid}").json()
    assert (channel["name"], channel["team"], channel["has_secret"]) == ("renamed", None, True)


def test_a_broken_channel_shows_its_last_error(live: Live, db_url: str) -> None:
    server, settings = live
    with receiver([Answer(status=410, body=b"gone")]) as hook:
        cid = create_webhook(server, hook.url + SECRET_PATH)
        httpx.post(f"{server.url}/notifications/channels/{cid}/test")
        assert tick(settings, db_url) == 0
    page = httpx.get(f"{server.url}/notifications").text
    row = re.search(rf'<tr id="channel-{cid}" class="([^"]*)">(.*?)</tr>', page, re.S)
    assert row is not None
    assert row.group(1) == "row-bad notify-channel"
    assert "✕</span> broken" in row.group(2)
    assert '<div class="channel-error">Last error: Webhook: HTTP 410: gone</div>' in row.group(2)
    assert "✕</span> failed" in row.group(2)
    log_page = httpx.get(f"{server.url}/notifications/channels/{cid}?status=failed").text
    assert 'class="delivery-row row-bad delivery-failed-row"' in log_page
    assert "SECRET" not in page + log_page
    empty = httpx.get(f"{server.url}/notifications/channels/{cid}?status=delivered").text
    assert "No deliveries with status delivered." in empty
    edit = f"{server.url}/notifications/channels/{cid}/edit"
    renamed = httpx.post(edit, data={"name": "still broken", "team": "vision", "url": ""})
    assert renamed.status_code == 303
    assert httpx.get(f"{server.url}/api/v1/channels/{cid}").json()["broken"] is True
    fixed = httpx.post(edit, data={"name": "fixed", "url": "http://127.0.0.1:9/new-SECRET"})
    assert fixed.status_code == 303
    after = httpx.get(f"{server.url}/api/v1/channels/{cid}").json()
    assert (after["broken"], after["last_error"], after["url_masked"]) == (
        False,
        None,
        "http://127.0.0.1:9/…",
    )


def test_user_text_is_escaped(live: Live, db_url: str) -> None:
    server, _ = live
    cid = create_webhook(server, "http://127.0.0.1:9/x", team='<script>alert("t")</script>')
    engine = make_engine(db_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            session.execute(
                update(NotifyChannel)
                .where(NotifyChannel.id == cid)
                .values(name="<img src=x onerror=alert(1)>", last_error="<b>bold</b>")
            )
    finally:
        engine.dispose()
    for path in (
        "/notifications",
        f"/notifications/channels/{cid}",
        f"/notifications/channels/{cid}/delete",
    ):
        html = httpx.get(server.url + path).text
        assert "<img src=x" not in html and "<script>alert" not in html and "<b>bold" not in html
        assert "&lt;img src=x onerror=alert(1)&gt;" in html
    overview = httpx.get(f"{server.url}/notifications").text
    assert (
        '<h3 class="notify-team">&lt;script&gt;alert(&#34;t&#34;)&lt;/script&gt;</h3>' in overview
    )


@pytest.mark.parametrize(
    ("form", "status", "field", "message"),
    [
        (
            {"url": "http://127.0.0.2:9/hook"},
            400,
            "url",
            "url: host 127.0.0.2 resolves to 127.0.0.2, a loopback address "
            "(allow it with FLEETWATCH_NOTIFY_ALLOW_HOSTS",
        ),
        (
            {"url": "ftp://example.com/x"},
            400,
            "url",
            "url: only http and https URLs can be notified",
        ),
        (
            {"name": "<b>"},
            422,
            "name",
            "name: use letters, digits, space, _ . - (starting with a letter or digit)",
        ),
        (
            {"opt_max_alerts": "many"},
            400,
            "opt_max_alerts",
            "options.max_alerts: must be a whole number ≥ 0 (0 = no limit)",
        ),
        (
            {"kind": "pagerduty", "secret": "short"},
            400,
            "secret",
            "secret: a PagerDuty routing key is 32 letters and digits",
        ),
    ],
)
def test_bad_input_is_shown_next_to_the_field(
    live: Live, form: dict[str, str], status: int, field: str, message: str
) -> None:
    server, _ = live
    data = {"kind": "webhook", "name": "n1", "url": "http://127.0.0.1:9/x", "team": "t<1>"}
    data.update(form)
    answer = httpx.post(f"{server.url}/notifications/channels", data=data)
    assert answer.status_code == status
    assert (
        field_errors(answer.text)[field]
        .replace("&#34;", '"')
        .startswith(message.replace("&#34;", '"'))
    )
    assert 'value="t&lt;1&gt;"' in answer.text
    assert re.search(
        r'<input id="url" name="url" type="text" maxlength="2048" value=""', answer.text
    )


def test_routes_are_created_edited_and_deleted(live: Live) -> None:
    server, _ = live
    cid = create_webhook(server, "http://127.0.0.1:9/x")
    base = f"{server.url}/notifications/routes"
    bad = httpx.post(
        base, data={"channel_id": str(cid), "group_by": "a b", "repeat_interval_s": "5"}
    )
    assert bad.status_code == 422
    assert field_errors(bad.text) == {
        "group_by": "group_by: &#39;a b&#39; is not a label name",
        "repeat_interval_s": "repeat_interval_s: Input should be greater than or equal to 60",
    }
    made = httpx.post(
        base,
        data={
            "channel_id": str(cid),
            "team": "ml",
            "severity": ["warning", "critical"],
            "group_by": "alertname, cluster",
            "group_wait_s": "30",
            "repeat_interval_s": "7200",
        },
    )
    assert (made.status_code, made.headers["location"]) == (303, "/notifications#routes")
    [route] = httpx.get(f"{server.url}/api/v1/routes").json()
    assert {
        k: route[k] for k in ("team", "severities", "group_by", "group_wait_s", "repeat_interval_s")
    } == {
        "team": "ml",
        "severities": ["critical", "warning"],
        "group_by": ["alertname", "cluster"],
        "group_wait_s": 30.0,
        "repeat_interval_s": 7200.0,
    }
    page = httpx.get(f"{server.url}/notifications").text
    row = re.search(rf'<tr id="route-{route["id"]}">(.*?)</tr>', page, re.S)
    assert row is not None
    cells = cells_of(row.group(1))
    assert cells[:5] == ["critical, warning", "ops hook", "alertname, cluster", "30 s", "2 h"]
    edit = httpx.get(f"{base}/{route['id']}/edit").text
    assert 'value="alertname, cluster"' in edit and 'value="critical" checked' in edit
    saved = httpx.post(
        f"{base}/{route['id']}/edit",
        data={
            "channel_id": str(cid),
            "team": "",
            "group_by": "",
            "group_wait_s": "0",
            "repeat_interval_s": "60",
        },
    )
    assert saved.status_code == 303
    [route] = httpx.get(f"{server.url}/api/v1/routes").json()
    assert (route["team"], route["severities"], route["group_by"], route["repeat_interval_s"]) == (
        None,
        [],
        [],
        60.0,
    )
    assert httpx.get(f"{base}/{route['id']}/delete").status_code == 200
    assert httpx.post(f"{base}/{route['id']}/delete").status_code == 303
    assert httpx.get(f"{server.url}/api/v1/routes").json() == []


def test_disable_enable_and_delete_a_channel(live: Live) -> None:
    server, _ = live
    cid = create_webhook(server, "http://127.0.0.1:9/x")
    url = f"{server.url}/notifications/channels/{cid}"
    assert httpx.post(f"{url}/enabled", data={"enabled": "false"}).status_code == 303
    assert httpx.get(f"{server.url}/api/v1/channels/{cid}").json()["enabled"] is False
    refused = httpx.post(f"{url}/test", headers={"HX-Request": "true"})
    assert refused.status_code == 400
    assert "channel &#39;ops hook&#39; is disabled; enable it first" in refused.text
    assert httpx.post(f"{url}/enabled", data={"enabled": "maybe"}).status_code == 400
    assert httpx.post(f"{url}/enabled", data={"enabled": "true"}).status_code == 303
    assert httpx.get(f"{server.url}/api/v1/channels/{cid}").json()["enabled"] is True
    confirm = httpx.get(f"{url}/delete")
    assert "Delete channel ops hook?" in confirm.text
    assert httpx.post(f"{url}/delete").status_code == 303
    assert httpx.get(url).status_code == 404
    assert httpx.get(f"{server.url}/notifications/channels/abc").status_code == 400


def test_bad_log_parameters_get_a_400_naming_them(live: Live) -> None:
    server, _ = live
    cid = create_webhook(server, "http://127.0.0.1:9/x")
    url = f"{server.url}/notifications/channels/{cid}"
    odd = httpx.get(f"{url}?status=odd")
    assert (
        odd.status_code == 400
        and "status: one of queued, delivered, failed, suppressed" in odd.text
    )
    page = httpx.get(f"{url}?page=0")
    assert page.status_code == 400 and "page: expected a whole number from 1" in page.text
    for odd_page in ("²", "9" * 5000):  # str.isdigit() is true, int() refused them: a 500
        refused = httpx.get(url, params={"page": odd_page})
        assert refused.status_code == 400 and "page: expected a whole number" in refused.text
    assert httpx.get(f"{server.url}/notifications/channels/new?kind=pigeon").status_code == 400


def test_the_alert_page_lists_its_notifications(live: Live, db_url: str) -> None:
    server, _ = live
    cid = create_webhook(server, "http://127.0.0.1:9/x")
    assert (
        httpx.post(f"{server.url}/notifications/routes", data={"channel_id": str(cid)}).status_code
        == 303
    )
    engine = make_engine(db_url)
    try:
        alerts = Alerts(make_session_factory(engine))
        alert_id = alerts.transition("GpuHot", "node-a", "firing")
        quiet_id = alerts.transition("GpuCold", "node-b", "pending")
    finally:
        engine.dispose()
    html = httpx.get(f"{server.url}/alerts/{alert_id}").text
    section = html[html.index('id="alert-notifications"') :]
    section = section[: section.index("</section>")]
    [row] = re.findall(r"<tr class=\"\">(.*?)</tr>", section, re.S)
    cells = cells_of(row)
    assert [cells[0], *cells[2:6]] == ["ops hook", "firing", "… queued", "0", "—"]
    assert f'href="/notifications/channels/{cid}"' in row
    quiet = httpx.get(f"{server.url}/alerts/{quiet_id}").text
    assert "No notifications sent for this alert." in quiet


def test_the_log_is_paged_newest_first(live: Live, db_url: str) -> None:
    server, _ = live
    cid = create_webhook(server, "http://127.0.0.1:9/x")
    engine = make_engine(db_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            ids = [service.send_test(session, channel_id=cid).id for _ in range(53)]
    finally:
        engine.dispose()
    url = f"{server.url}/notifications/channels/{cid}"
    first = httpx.get(url).text
    shown = [int(i) for i in re.findall(r'<tr id="delivery-(\d+)"', first)]
    assert shown == sorted(ids, reverse=True)[:50]
    assert "53 deliveries · page 1 of 2" in first
    assert f'<a class="btn" rel="next" href="/notifications/channels/{cid}?page=2">' in first
    second = httpx.get(f"{url}?status=queued&page=2&tz=Europe/Berlin").text
    shown = [int(i) for i in re.findall(r'<tr id="delivery-(\d+)"', second)]
    assert shown == sorted(ids, reverse=True)[50:]
    prev = f"/notifications/channels/{cid}?status=queued&amp;tz=Europe%2FBerlin"
    assert f'<a class="btn" rel="prev" href="{prev}">' in second
    assert re.search(r"<th scope=\"row\">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d CE[S]?T</th>", second)
