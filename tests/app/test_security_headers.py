"""Security headers on every kind of answer, HSTS behind TLS only, and no inline script in
any template (the Content-Security-Policy allows scripts from files only)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.config import PROJECT_ROOT
from app.security_headers import CONTENT_SECURITY_POLICY
from tests.conftest import make_settings
from tests.live_server import LiveServer


@pytest.fixture
def server(sqlite_url: str, tmp_path: Path) -> Iterator[LiveServer]:
    live = LiveServer(make_settings(sqlite_url, tmp_path), as_admin=False)
    live.start()
    yield live
    live.stop()


def test_every_answer_carries_the_headers_and_no_hsts_over_plain_http(server: LiveServer) -> None:
    for path in ("/login", "/api/v1/nodes", "/alerts", "/static/favicon.svg", "/nope", "/docs"):
        answer = httpx.get(f"{server.url}{path}")
        h = answer.headers
        assert h["content-security-policy"] == CONTENT_SECURITY_POLICY, path
        assert "frame-ancestors 'none'" in h["content-security-policy"]
        assert "script-src 'self';" in h["content-security-policy"]
        assert (h["x-content-type-options"], h["x-frame-options"], h["referrer-policy"]) == (
            "nosniff",
            "DENY",
            "same-origin",
        ), path
        assert "strict-transport-security" not in h, path


def test_hsts_when_the_external_url_is_https(sqlite_url: str, tmp_path: Path) -> None:
    live = LiveServer(
        make_settings(sqlite_url, tmp_path, external_url="https://fw.example"), as_admin=False
    )
    live.start()
    try:
        answer = httpx.get(f"{live.url}/login")
        assert answer.headers["strict-transport-security"].startswith("max-age=31536000")
    finally:
        live.stop()


INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*type=\"application/json\")[^>]*>", re.I)
INLINE_HANDLER = re.compile(r"\s(on[a-z]+|hx-on[:\w-]*)\s*=", re.I)


def test_no_template_has_an_inline_script_or_handler() -> None:
    found = []
    for path in sorted((PROJECT_ROOT / "templates").rglob("*.html")):
        text = path.read_text()
        for pattern in (INLINE_SCRIPT, INLINE_HANDLER):
            found += [
                f"{path.relative_to(PROJECT_ROOT)}: {m.group(0).strip()}"
                for m in pattern.finditer(text)
            ]
        assert "javascript:" not in text, path
    assert found == []
