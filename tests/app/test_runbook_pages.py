"""Runbook pages and JSON API through a real HTTP server on Postgres and SQLite: list, view
(with and without an alert's context), edit, preview, revert, name validation and escaping."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from tests.conftest import make_settings
from tests.factories import add_rules, batch, evaluate_at, gpu, sample, store_payload, wipe_alerts
from tests.live_server import LiveServer

HOSTILE = '<img src=x onerror="alert(1)">**b**'
FILE_MD = (
    "# Hot GPU {{ gpu.index }}\n\n"
    "On {{ node.hostname }} ({{ labels.cluster }}): {{ value }} °C.\n\n"
    "```sh\nnvidia-smi -q -d TEMPERATURE -i {{ gpu.index }}\n```\n\n<script>alert(1)</script>\n"
)


@dataclass
class Site:
    """A live server with a runbooks folder of its own."""

    url: str
    folder: Path
    db_url: str


@pytest.fixture
def site(db_url: str, tmp_path: Path) -> Iterator[Site]:
    folder = tmp_path / "runbooks"
    folder.mkdir()
    (folder / "gpu-hot.md").write_text(FILE_MD)
    (folder / "plain.md").write_text("# Plain\n\nNothing to fill in.\n")
    (folder / "not a runbook.md").write_text("ignored: not a valid name")
    live = LiveServer(make_settings(db_url, tmp_path, runbooks_dir=folder))
    live.start()
    yield Site(live.url, folder, db_url)
    live.stop()
    wipe_alerts(db_url)


def firing_alert(site: Site) -> int:
    """A firing ``hot`` alert on node-a GPU 1 (90 °C, cluster label with markup); its id."""
    now = datetime.now(UTC)
    gpus = [gpu(0), gpu(1)]
    payload = batch("node-a", gpus=gpus, samples_per_gpu=0, labels={"cluster": HOSTILE})
    payload["samples"] = [sample(gpus[0], now, temp_c=50), sample(gpus[1], now, temp_c=90)]
    store_payload(site.db_url, payload, received_at=now)
    add_rules(
        site.db_url,
        {
            "name": "hot",
            "runbook": "gpu-hot",
            "condition": {
                "kind": "threshold",
                "target": "gpu",
                "metric": "temp_c",
                "op": ">",
                "threshold": 85,
            },
        },
    )
    evaluate_at(site.db_url, now)
    alerts = httpx.get(f"{site.url}/api/v1/alerts").json()
    assert [(a["rule"], a["state"]) for a in alerts] == [("hot", "firing")]
    return int(alerts[0]["id"])


def test_the_list_shows_files_and_their_source(site: Site) -> None:
    api = httpx.get(f"{site.url}/api/v1/runbooks")
    page = httpx.get(f"{site.url}/runbooks")

    assert [(r["name"], r["title"], r["source"], r["has_file"]) for r in api.json()] == [
        ("gpu-hot", "Hot GPU <gpu.index>", "file", True),
        ("plain", "Plain", "file", True),
    ]
    assert page.status_code == 200
    assert '<a href="/runbooks/gpu-hot">gpu-hot</a>' in page.text
    assert page.text.count("▤ file") == 2
    assert "not a runbook" not in page.text


def test_view_without_an_alert_shows_placeholders_and_neutralises_script(site: Site) -> None:
    page = httpx.get(f"{site.url}/runbooks/gpu-hot")

    assert page.status_code == 200
    assert '<h1>Hot GPU <span class="rb-unknown">&lt;gpu.index&gt;</span></h1>' in page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    assert "<script>alert(1)" not in page.text


def test_view_with_an_alert_fills_in_its_values_and_escapes_its_labels(site: Site) -> None:
    alert_id = firing_alert(site)
    page = httpx.get(f"{site.url}/runbooks/gpu-hot", params={"alert": alert_id})

    assert page.status_code == 200
    assert "<h1>Hot GPU 1</h1>" in page.text
    assert '<p>On node-a (&lt;img src=x onerror="alert(1)"&gt;**b**): 90 °C.</p>' in page.text
    assert "nvidia-smi -q -d TEMPERATURE -i 1\n" in page.text
    assert f'<a href="/alerts/{alert_id}">alert {alert_id}</a>' in page.text
    assert "<img" not in page.text
    assert 'class="alert alert-warn"' not in page.text


@pytest.mark.parametrize(
    ("query", "status", "detail"),
    [
        ("alert=abc", 400, "alert: expected an alert id (a whole number), got &#39;abc&#39;"),
        ("alert=%C2%B2", 400, "alert: expected an alert id (a whole number), got &#39;²&#39;"),
        ("alert=999999", 404, "no alert with id 999999"),
    ],
)
def test_a_bad_alert_parameter_is_a_friendly_error(
    site: Site, query: str, status: int, detail: str
) -> None:
    page = httpx.get(f"{site.url}/runbooks/gpu-hot?{query}")
    assert page.status_code == status
    assert detail in page.text


def test_edit_through_the_ui_overrides_the_file_and_revert_restores_it(site: Site) -> None:
    edit = httpx.get(f"{site.url}/runbooks/plain/edit")
    assert edit.status_code == 200
    assert "Nothing to fill in.\n</textarea>" in edit.text
    assert "Revert to file" not in edit.text

    saved = httpx.post(
        f"{site.url}/runbooks/plain/edit",
        data={"markdown": "# Edited\r\n\r\nDrain {{ node.hostname }} <b>now</b>\r\n"},
    )
    assert (saved.status_code, saved.headers["location"]) == (303, "/runbooks/plain")
    view = httpx.get(f"{site.url}/runbooks/plain")
    assert "<h1>Edited</h1>" in view.text
    assert "&lt;b&gt;now&lt;/b&gt;" in view.text
    assert "✎ edited in UI" in view.text
    got = httpx.get(f"{site.url}/api/v1/runbooks/plain").json()
    assert (got["source"], got["markdown"]) == (
        "ui",
        "# Edited\n\nDrain {{ node.hostname }} <b>now</b>\n",
    )
    assert (site.folder / "plain.md").read_text() == "# Plain\n\nNothing to fill in.\n"
    assert "Revert to file" in httpx.get(f"{site.url}/runbooks/plain/edit").text

    reverted = httpx.post(f"{site.url}/runbooks/plain/revert")
    assert (reverted.status_code, reverted.headers["location"]) == (303, "/runbooks/plain")
    got = httpx.get(f"{site.url}/api/v1/runbooks/plain").json()
    assert (got["source"], got["markdown"]) == ("file", "# Plain\n\nNothing to fill in.\n")
    assert httpx.post(f"{site.url}/runbooks/plain/revert").status_code == 404


def test_saving_an_empty_text_shows_the_editor_with_the_error(site: Site) -> None:
    page = httpx.post(f"{site.url}/runbooks/plain/edit", data={"markdown": "  "})
    assert page.status_code == 400
    assert "markdown: a runbook cannot be empty (revert to the file instead)" in page.text
    assert httpx.get(f"{site.url}/api/v1/runbooks/plain").json()["source"] == "file"


def test_preview_renders_the_posted_text_sanitised(site: Site) -> None:
    page = httpx.post(
        f"{site.url}/runbooks/plain/preview",
        data={"markdown": "**x** {{ gpu.index }} [j](javascript:alert(1)) <iframe></iframe>"},
    )
    assert page.status_code == 200
    assert page.text.strip().endswith(
        '<article class="runbook"><p><strong>x</strong> '
        '<span class="rb-unknown">&lt;gpu.index&gt;</span> [j](javascript:alert(1)) '
        "&lt;iframe&gt;&lt;/iframe&gt;</p>\n</article>"
    )


def test_the_api_creates_edits_and_reverts_a_runbook_without_a_file(site: Site) -> None:
    url = f"{site.url}/api/v1/runbooks/new-one"
    assert httpx.get(url).status_code == 404
    created = httpx.put(url, json={"markdown": "# New\n"})
    assert created.status_code == 200
    body = created.json()
    assert (body["name"], body["title"], body["source"], body["has_file"]) == (
        "new-one",
        "New",
        "ui",
        False,
    )
    assert httpx.put(url, json={"markdown": "# Newer\n"}).json()["markdown"] == "# Newer\n"
    assert [r["name"] for r in httpx.get(f"{site.url}/api/v1/runbooks").json()] == [
        "gpu-hot",
        "new-one",
        "plain",
    ]
    deleted = httpx.delete(url)
    assert deleted.status_code == 204
    assert httpx.get(url).status_code == 404
    missing = httpx.get(f"{site.url}/runbooks/new-one")
    assert missing.status_code == 404
    assert '<a class="btn" href="/runbooks/new-one/edit">Write it</a>' in missing.text


def test_the_api_rejects_a_bad_body_naming_the_field(site: Site) -> None:
    response = httpx.put(f"{site.url}/api/v1/runbooks/plain", json={"markdown": ""})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "markdown"]


@pytest.mark.parametrize(
    "name", [".hidden", "a%20b", "a%5Cb", "-x", "x" * 129, "gpu-hot%00", "a:b", "%C3%A9"]
)
def test_names_that_are_not_slugs_are_refused_naming_name(site: Site, name: str) -> None:
    for path in (f"/api/v1/runbooks/{name}", f"/runbooks/{name}", f"/runbooks/{name}/edit"):
        response = httpx.get(site.url + path)
        assert response.status_code == 400, path
        assert "name" in response.text or "NUL" in response.text, path
    put = httpx.put(f"{site.url}/api/v1/runbooks/{name}", json={"markdown": "# x"})
    assert put.status_code == 400


@pytest.mark.parametrize(
    "path",
    [
        "/runbooks/../../etc/passwd",
        "/api/v1/runbooks/..",
        "/api/v1/runbooks/%2e%2e",
        "/api/v1/runbooks/..%2F..%2Fetc",
        "/runbooks/..%2Fsecret",
    ],
)
def test_path_traversal_never_reads_outside_the_folder(site: Site, path: str) -> None:
    (site.folder.parent / "secret.md").write_text("TOP SECRET")
    response = httpx.get(site.url + path)
    assert response.status_code in (400, 404)
    assert "TOP SECRET" not in response.text
    up = httpx.get(f"{site.url}/api/v1/runbooks/..%2Fsecret")
    assert up.status_code in (400, 404)
    assert "TOP SECRET" not in up.text


def test_the_editor_previews_with_an_alerts_values(site: Site) -> None:
    alert_id = firing_alert(site)
    view = httpx.get(f"{site.url}/runbooks/gpu-hot?alert={alert_id}")
    assert f'<a class="btn" href="/runbooks/gpu-hot/edit?alert={alert_id}">Edit</a>' in view.text
    edit = httpx.get(f"{site.url}/runbooks/gpu-hot/edit?alert={alert_id}")
    assert f'name="alert" value="{alert_id}"' in edit.text

    page = httpx.post(
        f"{site.url}/runbooks/gpu-hot/preview",
        data={"markdown": "GPU {{ gpu.index }} of {{ labels.cluster }}", "alert": str(alert_id)},
    )
    assert page.text.strip().endswith(
        '<article class="runbook"><p>GPU 1 of &lt;img src=x onerror="alert(1)"&gt;**b**</p>\n'
        "</article>"
    )
    bad = httpx.post(f"{site.url}/runbooks/gpu-hot/preview", data={"markdown": "x", "alert": "x"})
    assert bad.status_code == 400
