"""A bad ``?tz=`` is a 400 page naming ``tz`` on every HTML page (GET and form POSTs), with
nothing stored; a good one still works. Real server, Postgres and SQLite."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from tests.app.test_alert_pages_forms import silence_form
from tests.factories import wipe_alerts
from tests.live_server import LiveServer

BAD = "Mars/Phobos"
DETAIL = "tz: unknown time zone &#39;Mars/Phobos&#39;"

PAGES = [
    "/",
    "/fleet",
    "/alerts",
    "/silences",
    "/rules",
    "/rules/new",
    "/notifications",
    "/notifications/channels/new",
    "/runbooks",
    "/topology",
    "/storage",
    "/nodes/node-a",
]


@pytest.fixture
def site(server: LiveServer, db_url: str) -> Any:
    """The server's base URL; alerts and silences wiped afterwards."""
    yield server.url
    wipe_alerts(db_url)


@pytest.mark.parametrize("path", PAGES)
def test_every_page_answers_400_naming_tz(site: str, path: str) -> None:
    response = httpx.get(f"{site}{path}", params={"tz": BAD}, timeout=30)
    assert response.status_code == 400, (path, response.status_code)
    assert "text/html" in response.headers["content-type"]
    assert DETAIL in response.text


def test_an_htmx_partial_gets_the_error_fragment(site: str) -> None:
    response = httpx.get(
        f"{site}/fleet/_nodes", params={"tz": BAD}, headers={"HX-Request": "true"}, timeout=30
    )
    assert response.status_code == 400
    assert DETAIL in response.text
    assert "<html" not in response.text


def test_posting_a_silence_with_a_bad_tz_stores_nothing(site: str) -> None:
    response = httpx.post(
        f"{site}/silences?tz={BAD}",
        content=urlencode(silence_form(comment="x")),
        headers={"content-type": "application/x-www-form-urlencoded"},
        timeout=30,
    )
    assert response.status_code == 400
    assert DETAIL in response.text
    listed = httpx.get(f"{site}/api/v1/silences", params={"include_expired": "true"}, timeout=30)
    assert listed.json() == []


def test_a_good_or_empty_tz_still_renders(site: str) -> None:
    for tz in ("Europe/Berlin", ""):
        for path in ("/silences", "/rules", "/notifications", "/topology"):
            response = httpx.get(f"{site}{path}", params={"tz": tz}, timeout=30)
            assert response.status_code == 200, (path, tz, response.status_code)


def test_the_api_is_not_affected(site: str) -> None:
    response = httpx.get(f"{site}/api/v1/silences", params={"tz": BAD}, timeout=30)
    assert response.status_code == 200
    assert response.json() == []
