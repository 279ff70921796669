"""``/silences`` and ``/rules`` through a real server on Postgres and SQLite, with alerts made by
the real evaluator: create/expire silences, the rule editor (YAML, errors naming the field,
preview), enable/disable, delete with confirmation, escaping, POST-only changes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
import yaml

from tests.app.test_alert_pages import XSS, rows, seed
from tests.factories import wipe_alerts
from tests.live_server import LiveServer


@pytest.fixture
def site(server: LiveServer, db_url: str) -> Any:
    """The server's base URL with the alerts of :func:`seed` stored."""
    seed(db_url)
    yield server.url
    wipe_alerts(db_url)


def post(url: str, data: Any) -> httpx.Response:
    """POST a urlencoded form (a dict or (name, value) pairs), not following the redirect."""
    return httpx.post(
        url,
        content=urlencode(data),
        headers={"content-type": "application/x-www-form-urlencoded"},
        timeout=30,
    )


def silence_form(**fields: Any) -> list[tuple[str, str]]:
    """A silence form muting ``alertname=hot`` for 2 h by alice, with ``fields`` replacing."""
    base: dict[str, Any] = {
        "matchers": [("alertname", "=", "hot"), ("hostname", "=~", "node-.*")],
        "duration": "2h",
        "created_by": "alice",
        "comment": "reboot " + XSS,
    }
    base.update(fields)
    out = []
    for name, op, value in base.pop("matchers"):
        out += [("matcher_name", name), ("matcher_op", op), ("matcher_value", value)]
    out += [("matcher_name", ""), ("matcher_op", "="), ("matcher_value", "")]
    return out + list(base.items())


def test_silence_like_this_prefills_the_matchers(site: str) -> None:
    html = httpx.get(
        f"{site}/silences", params={"matcher": ["alertname=hot", "hostname=node-a"]}, timeout=30
    ).text

    assert 'name="matcher_name" type="text" value="alertname"' in html
    assert 'name="matcher_value" type="text" value="node-a"' in html
    assert 'id="would-mute">These matchers mute 1 active alert now.' in html
    assert 'id="no-active-silences"' in html


def test_create_then_expire_a_silence(site: str) -> None:
    matchers = [("alertname", "=", "hot"), ("hostname", "=~", "node-.*"), ("rack", "=", XSS)]
    created = post(f"{site}/silences", silence_form(matchers=matchers))
    html = httpx.get(f"{site}/silences", timeout=30).text
    listing = httpx.get(f"{site}/alerts", timeout=30).text
    silence_id = html.split('<tr data-silence-id="', 1)[1].split('"', 1)[0]

    assert created.status_code == 303 and created.headers["location"] == "/silences"
    assert '<code class="matcher">alertname="hot"</code>' in html
    assert '<code class="matcher">hostname=~"node-.*"</code>' in html
    assert '<code class="matcher">rack="&lt;script&gt;alert(1)&lt;/script&gt;"</code>' in html
    assert '<td class="silence-comment">reboot &lt;script&gt;alert(1)&lt;/script&gt;</td>' in html
    assert "in 2 h" in html and XSS not in html
    assert listing.count("marker-silenced") == 1

    expired = post(f"{site}/silences/{silence_id}/expire", {})
    after = httpx.get(f"{site}/silences", timeout=30).text

    assert expired.status_code == 303
    assert 'id="no-active-silences"' in after
    assert '<table class="data silences-table" id="expired-silences">' in after
    assert "marker-silenced" not in httpx.get(f"{site}/alerts", timeout=30).text
    assert post(f"{site}/silences/424242/expire", {}).status_code == 404
    assert httpx.get(f"{site}/silences/{silence_id}/expire", timeout=30).status_code == 405


def test_silence_with_explicit_start_and_end_in_the_viewer_zone(site: str) -> None:
    start = datetime.now(UTC).astimezone(UTC) + timedelta(hours=1)
    ends = start + timedelta(hours=3)
    fmt = "%Y-%m-%dT%H:%M:%S"
    created = post(
        f"{site}/silences?tz=Asia%2FTokyo",
        silence_form(
            duration="",
            starts=(start + timedelta(hours=9)).strftime(fmt),
            ends=(ends + timedelta(hours=9)).strftime(fmt),
        ),
    )
    (silence,) = httpx.get(f"{site}/api/v1/silences", timeout=30).json()

    assert created.status_code == 303 and created.headers["location"] == "/silences?tz=Asia%2FTokyo"
    assert silence["starts_at"] == start.strftime(fmt) + "Z"
    assert silence["ends_at"] == ends.strftime(fmt) + "Z"
    assert "scheduled" in httpx.get(f"{site}/silences", timeout=30).text


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"matchers": [("a", "=~", "(")]}, "matchers[0].value: Value error, not a valid regular"),
        ({"matchers": [("", "=", "x"), ("b", "!~", "[")]}, "matchers[0].name: String should"),
        ({"matchers": [("a", "=", "b"), ("c", "~", "d")]}, "matchers[1].op: Input should be"),
        ({"matchers": []}, "matchers: at least one matcher"),
        ({"created_by": ""}, "created_by: who creates this silence"),
        ({"duration": "soon"}, "duration: not a duration: &#39;soon&#39;"),
        ({"duration": ""}, "ends: give an end time or a duration"),
        ({"ends": "yesterday"}, "ends: not a date and time"),
        ({"ends": "2020-01-01T00:00"}, "ends: the end is in the past"),
    ],
)
def test_bad_silence_is_422_with_the_error_beside_the_field(
    site: str, fields: dict[str, Any], error: str
) -> None:
    response = post(f"{site}/silences", silence_form(**fields))

    assert response.status_code == 422
    assert error in response.text
    assert 'id="silence-errors"' in response.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;</textarea>" in response.text
    assert httpx.get(f"{site}/api/v1/silences", timeout=30).json() == []


def test_rules_list_shows_kind_team_severity_enabled_and_counts(site: str) -> None:
    html = httpx.get(f"{site}/rules", timeout=30).text

    hot = html.split('<tr data-rule="hot">', 1)[1].split("</tr>", 1)[0]
    cool = html.split('<tr data-rule="cool">', 1)[1].split("</tr>", 1)[0]
    assert "<td>threshold</td>" in hot and "<td>&lt;b&gt;gpu-ops&lt;/b&gt;</td>" in hot
    assert '<a href="/alerts?tab=firing&amp;rule=hot">1</a>' in hot
    assert '<a href="/alerts?tab=pending&amp;rule=hot">0</a>' in hot
    assert "● </span> enabled" not in hot and "●</span> enabled" in hot
    assert "○</span> disabled" in cool and 'action="/rules/cool/enable"' in cool
    assert "<b>gpu-ops" not in html


RULE = {
    "name": "very-hot",
    "severity": "critical",
    "for": "1m",
    "condition": {
        "kind": "threshold",
        "target": "gpu",
        "metric": "temp_c",
        "op": ">",
        "threshold": 80,
    },
}


def doc(**changes: Any) -> str:
    """:data:`RULE` with ``changes`` as YAML."""
    return yaml.safe_dump({**RULE, **changes})


def test_preview_shows_entities_and_states_without_saving(site: str) -> None:
    response = post(f"{site}/rules/_preview", {"document": doc()})
    editing = post(f"{site}/rules/_preview", {"document": doc(name="hot"), "original": "hot"})

    assert response.status_code == 200
    assert "Preview: 1 entity" in response.text
    assert '<tr><td>node-a GPU 1</td><td class="num">90</td>' in response.text
    assert "◔</span> pending" in response.text
    assert 'data-rule="very-hot"' not in httpx.get(f"{site}/rules", timeout=30).text
    assert editing.status_code == 200
    assert '<form id="rule-form" method="post" action="/rules/hot"' in editing.text
    assert "●</span> firing" in editing.text


def test_create_edit_disable_enable_and_delete_a_rule(site: str) -> None:
    created = post(f"{site}/rules", {"document": doc()})
    duplicate = post(f"{site}/rules", {"document": doc()})
    edit = httpx.get(f"{site}/rules/very-hot/edit", timeout=30).text
    updated = post(f"{site}/rules/very-hot", {"document": doc(severity="info")})
    disabled = post(f"{site}/rules/very-hot/disable", {})
    listing = httpx.get(f"{site}/rules", timeout=30).text
    confirm = httpx.get(f"{site}/rules/very-hot/delete", timeout=30).text
    deleted = post(f"{site}/rules/very-hot/delete", {})

    assert created.status_code == 303 and created.headers["location"] == "/rules"
    assert duplicate.status_code == 409
    assert '<code class="error-field">name</code>: an alert rule named &#39;very-hot&#39;' in (
        duplicate.text
    )
    assert "name: very-hot\n" in edit and "for: 1m\n" in edit
    assert updated.status_code == 303
    assert disabled.status_code == 303
    row = listing.split('<tr data-rule="very-hot">', 1)[1].split("</tr>", 1)[0]
    assert "ℹ</span> info" in row and "○</span> disabled" in row
    assert "Delete rule very-hot?" in confirm and 'action="/rules/very-hot/delete"' in confirm
    assert deleted.status_code == 303
    assert httpx.get(f"{site}/rules/very-hot/edit", timeout=30).status_code == 404
    assert post(f"{site}/rules/very-hot/delete", {}).status_code == 404
    assert httpx.get(f"{site}/rules/hot/disable", timeout=30).status_code == 405


def test_disabling_a_rule_resolves_its_alerts(site: str) -> None:
    assert post(f"{site}/rules/hot/disable", {}).status_code == 303

    assert rows(httpx.get(f"{site}/alerts", timeout=30).text) == ["warm"]
    assert rows(httpx.get(f"{site}/alerts?tab=resolved", timeout=30).text) == ["hot", "cool"]


@pytest.mark.parametrize(
    ("document", "error"),
    [
        ("name: [unclosed", '<code class="error-field">document</code>: not valid YAML at line'),
        ("- a list", '<code class="error-field">document</code>: the rule must be a mapping'),
        (
            doc(condition={**RULE["condition"], "metric": "tmp"}),
            '<code class="error-field">condition.metric</code>: Value error, &#39;tmp&#39; is',
        ),
        (doc(name=XSS), '<code class="error-field">name</code>: Value error, a rule name'),
        (doc(**{"for": "soon"}), '<code class="error-field">for</code>: Value error, not a'),
        (doc(runbook_url="javascript:x"), '<code class="error-field">runbook_url</code>'),
    ],
)
def test_bad_rule_is_422_naming_the_field(site: str, document: str, error: str) -> None:
    for path in ("/rules", "/rules/_preview", "/rules/hot"):
        response = post(site + path, {"document": document})

        assert response.status_code == 422
        assert error in response.text
        assert XSS not in response.text


def test_rule_form_refuses_other_content_types(site: str) -> None:
    response = httpx.post(f"{site}/rules", json={"document": doc()}, timeout=30)

    assert response.status_code == 415
    assert "content-type: expected a form" in response.text
