"""Cross-origin form posts refused (OWASP "verify origin with standard headers") through a real
server on Postgres and SQLite; same-origin posts and header-less API clients still work."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from app.csrf import csrf_refusal, normalize_origin
from tests.app.helpers import post_batch
from tests.app.test_alert_pages_forms import silence_form
from tests.conftest import make_settings
from tests.factories import batch, create_token, wipe_alerts
from tests.live_server import LiveServer

FORM = {"content-type": "application/x-www-form-urlencoded"}


def silences(base: str) -> list[dict[str, Any]]:
    """All silences, expired included, from the JSON API."""
    response = httpx.get(f"{base}/api/v1/silences", params={"include_expired": "true"}, timeout=30)
    assert response.status_code == 200, response.text
    body: list[dict[str, Any]] = response.json()
    return body


def post_silence(base: str, headers: dict[str, str]) -> httpx.Response:
    """POST the /silences form with extra ``headers``, not following the redirect."""
    return httpx.post(
        f"{base}/silences",
        content=urlencode(silence_form(comment="x")),
        headers={**FORM, **headers},
        timeout=30,
    )


@pytest.fixture
def site(server: LiveServer, db_url: str) -> Any:
    """The server's base URL; alerts and silences wiped afterwards."""
    yield server.url
    wipe_alerts(db_url)


def test_a_cross_origin_form_post_is_refused_and_stores_nothing(site: str) -> None:
    response = post_silence(site, {"Origin": "http://evil.example"})
    assert response.status_code == 403
    assert "text/html" in response.headers["content-type"]
    assert "cross-origin request refused (Origin: http://evil.example)" in response.text
    assert silences(site) == []


def test_sec_fetch_site_cross_site_is_refused_even_without_origin(site: str) -> None:
    response = post_silence(site, {"Sec-Fetch-Site": "cross-site"})
    assert response.status_code == 403
    assert silences(site) == []


def test_a_same_site_sibling_origin_is_refused(site: str) -> None:
    headers = {"Sec-Fetch-Site": "same-site", "Origin": "http://other.127.0.0.1.nip.io"}
    assert post_silence(site, headers).status_code == 403
    assert silences(site) == []


def test_a_null_origin_is_refused(site: str) -> None:
    assert post_silence(site, {"Origin": "null"}).status_code == 403
    assert silences(site) == []


def test_a_same_origin_form_post_creates_the_silence(site: str) -> None:
    headers = {"Origin": site, "Sec-Fetch-Site": "same-origin"}
    response = post_silence(site, headers)
    assert response.status_code == 303, response.text
    assert [s["created_by"] for s in silences(site)] == ["alice"]


def test_a_post_with_neither_header_passes(site: str) -> None:
    assert post_silence(site, {}).status_code == 303
    assert len(silences(site)) == 1


def test_cross_origin_api_calls_get_json_403(site: str) -> None:
    response = httpx.post(
        f"{site}/api/v1/silences/1/expire", headers={"Origin": "http://evil.example"}, timeout=30
    )
    assert response.status_code == 403
    assert response.json() == {
        "detail": "cross-origin request refused (Origin: http://evil.example)"
    }


def test_safe_methods_are_not_checked(site: str) -> None:
    headers = {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}
    response = httpx.get(f"{site}/silences", headers=headers, timeout=30)
    assert response.status_code == 200


def test_the_ingest_api_without_origin_still_works(server: LiveServer, db_url: str) -> None:
    token = create_token(db_url, "node-a")
    response = post_batch(server.url, token, batch(gpus=1, samples_per_gpu=2, events=[]))
    assert response.status_code == 200, response.text
    assert response.json()["samples_stored"] == 2


def test_the_configured_external_url_is_an_allowed_origin(db_url: str, tmp_path: Path) -> None:
    live = LiveServer(make_settings(db_url, tmp_path, external_url="https://fw.example.org/"))
    live.start()
    try:
        ok = post_silence(live.url, {"Origin": "https://fw.example.org"})
        bad = post_silence(live.url, {"Origin": "http://fw.example.org"})
        assert (ok.status_code, bad.status_code) == (303, 403)
        assert len(silences(live.url)) == 1
    finally:
        live.stop()
        wipe_alerts(db_url)


def test_normalize_origin_fills_default_ports_and_lowercases() -> None:
    assert normalize_origin("https://Fw.Example") == "https://fw.example:443"
    assert normalize_origin("http://127.0.0.1:8765") == "http://127.0.0.1:8765"
    assert normalize_origin("http://[::1]:80/") == "http://[::1]:80"
    assert normalize_origin("null") is None
    assert normalize_origin("http://x:notaport") is None


def test_refusal_rules_without_a_server() -> None:
    def scope(method: str, **headers: str) -> dict[str, Any]:
        raw = [(b"host", b"fw.local:8000")]
        raw += [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]
        return {"method": method, "scheme": "http", "headers": raw}

    assert csrf_refusal(scope("POST", origin="http://fw.local:8000"), None) is None
    assert csrf_refusal(scope("DELETE", origin="http://fw.local"), None) is not None
    assert csrf_refusal(scope("PATCH", sec_fetch_site="same-site"), None) is not None
    assert csrf_refusal(scope("PUT", sec_fetch_site="same-origin"), None) is None
    assert csrf_refusal(scope("GET", sec_fetch_site="cross-site"), None) is None
