"""``/alerts`` and ``/alerts/{id}`` through a real server on Postgres and SQLite, with alerts made
by the real evaluator from ingested samples: tabs, filters, counts, history, links, the ack
form, escaping of user text, and 4xx naming the field."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from tests.factories import add_rules, batch, evaluate_at, gpu, sample, store_payload, wipe_alerts
from tests.live_server import LiveServer

XSS = "<script>alert(1)</script>"
HOT = {"kind": "threshold", "target": "gpu", "metric": "temp_c", "op": ">", "threshold": 85}
WARM = {**HOT, "threshold": 60}
COOL = {**HOT, "op": "<", "threshold": 60}


def seed(db_url: str) -> dict[str, Any]:
    """node-a (rack label with markup), GPU 0 at 50 °C and GPU 1 at 90 °C; rules ``hot``
    (critical, firing on GPU 1, runbook), ``warm`` (warning, ``for: 5m`` so pending on GPU 1,
    runbook_url) and ``cool`` (info, fired on GPU 0 then disabled: resolved). Returns the
    alert ids by rule and the GPUs."""
    now = datetime.now(UTC)
    gpus = [gpu(0), gpu(1)]
    payload = batch("node-a", gpus=gpus, samples_per_gpu=0, labels={"rack": XSS, "pod": "p1"})
    payload["samples"] = [sample(gpus[0], now, temp_c=50), sample(gpus[1], now, temp_c=90)]
    store_payload(db_url, payload, received_at=now)
    add_rules(
        db_url,
        {
            "name": "hot",
            "severity": "critical",
            "owner_team": "<b>gpu-ops</b>",
            "runbook": "gpu-temp",
            "summary": "{hostname} GPU {gpu_index} at {value} °C <img src=x onerror=alert(2)>",
            "description": "Check cooling " + XSS,
            "condition": HOT,
        },
        {
            "name": "warm",
            "owner_team": "facilities",
            "for": "5m",
            "runbook_url": "https://wiki.example/warm",
            "condition": WARM,
        },
        {"name": "cool", "severity": "info", "condition": COOL},
    )
    evaluate_at(db_url, now)
    from app.alerts import store
    from app.db import make_engine, make_session_factory, session_scope

    engine = make_engine(db_url)
    with session_scope(make_session_factory(engine)) as session:
        store.set_enabled(session, name="cool", enabled=False)
    engine.dispose()
    return {"gpus": gpus}


@pytest.fixture
def site(server: LiveServer, db_url: str) -> Any:
    """The server's base URL with :func:`seed` stored, and the alert ids by rule."""
    data = seed(db_url)
    alerts = httpx.get(
        f"{server.url}/api/v1/alerts",
        params={"state": ["firing", "pending", "resolved"]},
        timeout=30,
    ).json()
    data["ids"] = {a["rule"]: a["id"] for a in alerts}
    data["url"] = server.url
    yield data
    wipe_alerts(db_url)


def get(url: str, **params: Any) -> httpx.Response:
    """GET a page."""
    return httpx.get(url, params=params, timeout=30)


def rows(html: str) -> list[str]:
    """The rule names of the table rows of ``/alerts`` in order."""
    out = []
    for chunk in html.split('<tr class="alert-row')[1:]:
        link = chunk.split('<a href="/alerts/', 1)[1]
        out.append(link.split(">", 1)[1].split("<", 1)[0])
    return out


def test_active_tab_lists_firing_then_pending_with_counts_links_and_escaping(site: Any) -> None:
    response = get(site["url"] + "/alerts")
    html = response.text

    assert response.status_code == 200
    assert rows(html) == ["hot", "warm"]
    uuid1 = site["gpus"][1]["uuid"]
    assert f'<a href="/nodes/node-a/gpus/{uuid1}">node-a GPU 1</a>' in html
    hot = site["ids"]["hot"]
    assert f'<a class="runbook-link" href="/runbooks/gpu-temp?alert={hot}">gpu-temp</a>' in html
    assert 'href="https://wiki.example/warm" rel="noopener noreferrer"' in html
    assert "●</span> firing" in html and "◔</span> pending" in html
    assert "✖</span> critical</span> 1</a>" in html and "▲</span> warning</span> 1</a>" in html
    assert "team &lt;b&gt;gpu-ops&lt;/b&gt;: 1" in html and "team facilities: 1" in html
    assert "node-a GPU 1 at 90 °C &lt;img src=x onerror=alert(2)&gt;" in html
    assert "<img src=x" not in html and "<b>gpu-ops" not in html and XSS not in html
    badge = '<span class="nav-badge" title="1 firing">1<span class="sr-only"> firing</span></span>'
    assert f">Alerts {badge}</a>" in html
    assert 'hx-get="/alerts/_list" hx-trigger="every 5s"' in html


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"tab": "firing"}, ["hot"]),
        ({"tab": "pending"}, ["warm"]),
        ({"severity": "warning"}, ["warm"]),
        ({"team": "<b>gpu-ops</b>"}, ["hot"]),
        ({"rule": "warm"}, ["warm"]),
        ({"q": "onerror"}, ["hot"]),
        ({"q": "<SCRIPT>"}, ["hot", "warm"]),
        ({"q": "node-b"}, []),
        ({"tab": "resolved"}, ["cool"]),
        ({"tab": "resolved", "range": "1h", "q": "GPU 0"}, ["cool"]),
        ({"tab": "resolved", "severity": "critical"}, []),
    ],
)
def test_filters_narrow_the_list(site: Any, params: dict[str, str], expected: list[str]) -> None:
    response = get(site["url"] + "/alerts", **params)

    assert response.status_code == 200
    assert rows(response.text) == expected


def test_resolved_history_row_and_empty_state(site: Any) -> None:
    html = get(site["url"] + "/alerts", tab="resolved").text
    empty = get(site["url"] + "/alerts", tab="pending", q="nothing").text

    assert "1 resolution in the last 24h" in html
    assert "✓</span> resolved" in html
    assert 'id="no-alerts">No pending alerts matching the filters.' in empty


@pytest.mark.parametrize(
    ("params", "detail"),
    [
        ({"tab": "silenced"}, "tab: one of active, firing, pending, resolved, got 'silenced'"),
        ({"severity": "high"}, "severity: one of critical, warning, info, got 'high'"),
        ({"tab": "resolved", "range": "2w"}, "range: one of 1h, 6h, 24h, 7d, 30d, got '2w'"),
    ],
)
def test_bad_filter_is_400_naming_the_parameter(
    site: Any, params: dict[str, str], detail: str
) -> None:
    response = get(site["url"] + "/alerts", **params)

    assert response.status_code == 400
    assert detail.replace("'", "&#39;") in response.text


def test_list_partial_pushes_the_page_url(site: Any) -> None:
    response = httpx.get(
        site["url"] + "/alerts/_list",
        params={"severity": "critical", "push": "1"},
        headers={"HX-Request": "true"},
        timeout=30,
    )

    assert response.status_code == 200
    assert response.headers["HX-Push-Url"] == "/alerts?severity=critical"
    assert rows(response.text) == ["hot"]
    assert "<html" not in response.text


def test_nav_badge_and_fleet_summary_count_firing_alerts(site: Any) -> None:
    storage = get(site["url"] + "/storage").text
    summary = get(site["url"] + "/alerts/_summary").text

    assert '<span class="nav-badge" title="1 firing">1' in storage
    assert "<strong>1 firing</strong>" in summary
    assert f'<a href="/alerts/{site["ids"]["hot"]}">hot</a>' in summary
    assert "warm" not in summary


def test_detail_shows_labels_annotations_timeline_and_links(site: Any) -> None:
    hot = site["ids"]["hot"]
    html = get(f"{site['url']}/alerts/{hot}").text
    resolved = get(f"{site['url']}/alerts/{site['ids']['cool']}").text

    assert '<span class="label-key">rack</span>=<span class="label-value">&lt;script&gt;' in html
    assert (
        '<dd class="alert-description">Check cooling &lt;script&gt;alert(1)&lt;/script&gt;' in html
    )
    assert "GPU 1 at 90 °C &lt;img" in html
    assert html.count('○</span> inactive</span> → <span class="alert-state state-firing">') == 1
    assert f'<a class="runbook-link" href="/runbooks/gpu-temp?alert={hot}">' in html
    assert XSS not in html and "<img src=x" not in html
    uuid1 = site["gpus"][1]["uuid"]
    assert (
        f'href="/silences?matcher=alertname%3Dhot&amp;matcher=hostname%3Dnode-a'
        f'&amp;matcher=gpu_uuid%3D{uuid1}"' in html
    )
    assert 'id="ack-form"' in html
    assert 'id="ack-form"' not in resolved
    assert 'firing</span> → <span class="alert-state state-resolved">' in resolved


def test_ack_form_marks_the_alert_and_escapes_the_note(site: Any) -> None:
    hot = site["ids"]["hot"]
    posted = httpx.post(
        f"{site['url']}/alerts/{hot}/ack",
        data={"owner": "<i>alice</i>", "note": "on it " + XSS},
        timeout=30,
    )
    html = get(f"{site['url']}/alerts/{hot}").text
    listing = get(site["url"] + "/alerts").text

    assert posted.status_code == 303
    assert posted.headers["location"] == f"/alerts/{hot}"
    assert '<strong class="ack-owner">&lt;i&gt;alice&lt;/i&gt;</strong>' in html
    assert '<span class="ack-note">on it &lt;script&gt;alert(1)&lt;/script&gt;</span>' in html
    assert "✔</span> acked</span>" in html and XSS not in html
    assert listing.count("marker-acked") == 1


def test_bad_ack_is_4xx_with_the_error_beside_the_field(site: Any) -> None:
    url = f"{site['url']}/alerts/{site['ids']['hot']}/ack"
    missing = httpx.post(url, data={"owner": " ", "note": XSS}, timeout=30)
    resolved = httpx.post(
        f"{site['url']}/alerts/{site['ids']['cool']}/ack", data={"owner": "bob"}, timeout=30
    )
    unknown = httpx.post(f"{site['url']}/alerts/999999/ack", data={"owner": "bob"}, timeout=30)
    as_get = httpx.get(f"{site['url']}/alerts/{site['ids']['hot']}/ack", timeout=30)

    assert missing.status_code == 422
    assert '<span class="field-error" id="ack-owner-error">owner: who is handling' in missing.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;</textarea>" in missing.text
    assert resolved.status_code == 400
    assert f"owner: alert {site['ids']['cool']} is resolved" in resolved.text
    assert unknown.status_code == 404
    assert as_get.status_code == 405
    assert "marker-acked" not in get(site["url"] + "/alerts").text


def test_unknown_alert_is_a_404_page(site: Any) -> None:
    response = get(site["url"] + "/alerts/424242")

    assert response.status_code == 404
    assert "no alert with id 424242" in response.text


def test_times_and_links_follow_the_viewer_time_zone(site: Any) -> None:
    hot = site["ids"]["hot"]
    html = get(site["url"] + "/alerts", tz="Asia/Tokyo").text
    detail = get(f"{site['url']}/alerts/{hot}", tz="Asia/Tokyo").text
    bad = get(site["url"] + "/alerts", tz="Mars/Olympus")

    assert f'<a href="/alerts/{hot}?tz=Asia%2FTokyo">hot</a>' in html
    assert 'href="/alerts?tab=firing&amp;tz=Asia%2FTokyo"' in html
    assert 'hx-get="/alerts/_list?tz=Asia%2FTokyo"' in html
    assert ' JST<div class="reason">for ' in html
    assert 'Z<div class="reason">for ' not in html
    assert detail.count(" JST</td>") == 1
    assert bad.status_code == 400


def test_non_numeric_ids_are_400_pages_naming_the_id(site: Any) -> None:
    detail = get(site["url"] + "/alerts/<b>x")
    ack = httpx.post(site["url"] + "/alerts/x/ack", data={"owner": "a"}, timeout=30)
    expire = httpx.post(site["url"] + "/silences/1e3/expire", timeout=30)

    assert detail.status_code == 400
    assert "alert id: expected an integer 1..2147483647, got &#39;&lt;b&gt;x&#39;" in detail.text
    assert ack.status_code == 400 and "alert id: expected an integer 1..2147483647" in ack.text
    assert expire.status_code == 400
    assert "silence id: expected an integer 1..2147483647" in expire.text


def test_fleet_overview_panel_lists_firing_alerts(site: Any, db_url: str) -> None:
    html = get(site["url"] + "/").text
    panel = html.split('id="overview-alerts"', 1)[1].split("</section>", 1)[0]

    assert "<strong>1 firing</strong>" in panel
    assert f'<a href="/alerts/{site["ids"]["hot"]}">hot</a> on ' in panel
    assert "warm" not in panel and '<a href="/alerts">All alerts →</a>' in panel
    assert "<b>" not in panel

    wipe_alerts(db_url)
    empty = get(site["url"] + "/fleet/_nodes").text
    assert "No firing alerts" in empty.split('id="overview-alerts"', 1)[1]


def test_an_inhibited_alert_is_marked_with_its_source_and_the_rules_page_lists_the_rules(
    site: Any, db_url: str
) -> None:
    from app.alerts import inhibition
    from app.alerts.inhibit_spec import InhibitRuleSpec
    from app.db import make_engine, make_session_factory, session_scope

    add_rules(db_url, {"name": "hotter", "severity": "critical", "condition": HOT})
    evaluate_at(db_url, datetime.now(UTC))
    spec = InhibitRuleSpec.model_validate(
        {
            "name": "hot-mutes-hotter",
            "description": "one page for one " + XSS,
            "source_matchers": ['alertname="hot"'],
            "target_matchers": ['alertname="hotter"'],
            "equal": ["hostname", "gpu_uuid"],
        }
    )
    engine = make_engine(db_url)
    with session_scope(make_session_factory(engine)) as session:
        inhibition.put_rule(session, spec=spec)
    engine.dispose()
    ids = {a["rule"]: a["id"] for a in get(site["url"] + "/api/v1/alerts").json()}
    chip = f'<a class="chip marker-silenced marker-inhibited" href="/alerts/{ids["hot"]}"'

    listing = get(site["url"] + "/alerts").text
    detail = get(site["url"] + f"/alerts/{ids['hotter']}").text
    source = get(site["url"] + f"/alerts/{ids['hot']}").text
    rules = get(site["url"] + "/rules").text

    assert listing.count(chip) == 1 and "inhibited by hot</a>" in listing
    assert chip in detail
    assert chip not in source
    assert '<tr data-inhibit-rule="hot-mutes-hotter">' in rules
    assert '<code>alertname="hot"</code>' in rules and "hostname, gpu_uuid" in rules
    assert "one page for one &lt;script&gt;" in rules and XSS not in rules


def test_the_nav_badge_shows_acknowledged_alerts_apart(site: Any) -> None:
    """An acknowledged firing alert pages nobody: it leaves the red count for a muted one."""
    hot = site["ids"]["hot"]
    acked = httpx.post(
        f"{site['url']}/api/v1/alerts/{hot}/ack", json={"owner": "alice"}, timeout=30
    )
    assert acked.status_code == 201, acked.text

    storage = get(site["url"] + "/storage").text

    assert '<span class="nav-badge" title' not in storage
    assert (
        '<span class="nav-badge nav-badge-muted" title="1 firing but silenced, acknowledged or'
        ' inhibited">+1<span class="sr-only"> silenced, acknowledged or inhibited</span></span>'
    ) in storage


def test_node_and_gpu_pages_list_their_open_alerts_with_runbooks(site: Any) -> None:
    hot = site["ids"]["hot"]
    node = get(site["url"] + "/nodes/node-a").text
    gpu1 = get(site["url"] + "/nodes/node-a/gpus/1").text
    gpu0 = get(site["url"] + "/nodes/node-a/gpus/0").text

    for page in (node, gpu1):
        section = page[page.index('id="entity-alerts-heading"') :]
        assert f'<a href="/alerts/{hot}">hot</a>' in section
        assert f'<a class="runbook-link" href="/runbooks/gpu-temp?alert={hot}">' in section
        assert "&lt;img src=x" in section and "<img src=x" not in section
    assert f'<a href="/alerts/{hot}">hot</a>' not in gpu0


def test_the_alert_page_charts_its_metric_around_the_firing(site: Any) -> None:
    import json

    page = get(site["url"] + f"/alerts/{site['ids']['hot']}").text
    assert '<div id="alert-chart-temp_c" class="plot" data-metric="temp_c"></div>' in page
    boot = page.split('<script type="application/json" id="chart-boot">', 1)[1]
    figure = json.loads(boot.split("</script>", 1)[0])["figures"][0]
    [trace] = figure["figure"]["data"]
    assert trace["name"] == "GPU 1" and 90.0 in trace["y"]  # the alert's GPU only
    threshold, began = figure["figure"]["layout"]["shapes"]
    assert (threshold["y0"], threshold["line"]["dash"]) == (85.0, "dash")
    assert began["line"]["dash"] == "dot"
    assert "/static/js/charts.js" in page
