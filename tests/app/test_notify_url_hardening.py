"""Channel URL hardening: malformed URLs, userinfo and NUL get a 422 naming the field (API and
form, both backends); IPv6 addresses embedding a refused IPv4 address are refused; the URL mask
and log redaction keep nothing after host[:port]."""

from __future__ import annotations

import html
import ipaddress
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.config import Settings
from app.notify.secrets import mask_url, redact
from app.notify.ssrf import BlockedDestination, check_url, embedded_ipv4, refusal
from tests.conftest import make_settings
from tests.live_server import LiveServer
from tests.notify_helpers import wipe_notify

BAD_URLS = [
    ("http://x:99999/", "url: the URL does not parse (the port must be a number in 1..65535)"),
    ("http://x:abc/", "url: the URL does not parse (the port must be a number in 1..65535)"),
    ("http://[::1/", "url: the URL does not parse (an IPv6 address needs both [ and ])"),
    (
        "http://user:pass@example.com/hook",
        "url: user:password@ in the URL is not supported; put credentials in the secret field",
    ),
    ("http://exa mple.com/", "url: the URL may not contain spaces or control characters"),
]


@pytest.fixture
def live(db_url: str, tmp_path: Path) -> Iterator[tuple[LiveServer, Settings]]:
    settings = make_settings(db_url, tmp_path)
    server = LiveServer(settings)
    server.start()
    yield server, settings
    server.stop()
    wipe_notify(db_url)


def _api_error(answer: httpx.Response) -> tuple[int, str]:
    err = answer.json()["detail"][0]
    return answer.status_code, f"{err['loc'][-1]}: {err['msg'].removeprefix('Value error, ')}"


def test_bad_urls_and_nul_get_a_422_naming_the_field(live: tuple[LiveServer, Settings]) -> None:
    server, _ = live
    api = f"{server.url}/api/v1/channels"
    for url, message in BAD_URLS:
        body = {"name": "x", "kind": "webhook", "url": url}
        assert _api_error(httpx.post(api, json=body)) == (422, message)
    nul = "may not contain NUL or other control characters"
    team = {"name": "x", "kind": "webhook", "url": "http://example.com/h", "team": "a\x00b"}
    assert _api_error(httpx.post(api, json=team)) == (422, f"team: {nul}")
    name = {"name": "x\x00y", "kind": "webhook", "url": "http://example.com/h"}
    assert _api_error(httpx.post(api, json=name))[0] == 422
    assert _api_error(httpx.post(api, json=name))[1].startswith("name: ")
    assert httpx.get(api).json() == []


def test_the_form_shows_bad_urls_and_nul_inline(live: tuple[LiveServer, Settings]) -> None:
    server, _ = live
    page = f"{server.url}/notifications/channels"
    for url, message in BAD_URLS:
        form = {"kind": "webhook", "name": "ops hook", "team": "vision", "url": url}
        answer = httpx.post(page, data=form)
        assert answer.status_code == 422, url
        shown = html.escape(message, quote=True)
        assert f'id="url-error">{shown}</span>' in answer.text, url
    form = {"kind": "webhook", "name": "ops hook", "team": "vi\x00sion", "url": "http://e.com/h"}
    answer = httpx.post(page, data=form)
    assert answer.status_code == 422
    assert 'id="team-error">team: may not contain NUL or other control characters<' in answer.text
    assert httpx.get(f"{server.url}/api/v1/channels").json() == []


@pytest.mark.parametrize(
    ("address", "embedded", "why"),
    [
        ("::127.0.0.1", "127.0.0.1", "loopback"),
        ("64:ff9b::7f00:1", "127.0.0.1", "loopback"),
        ("64:ff9b::a9fe:a9fe", "169.254.169.254", "cloud metadata"),
        ("2002:a9fe:101::1", "169.254.1.1", "link-local"),
        ("::ffff:127.0.0.1", "127.0.0.1", "loopback"),
        ("64:ff9b::808:808", "8.8.8.8", None),
        ("2001:db8::1", None, None),
    ],
)
def test_ipv6_addresses_are_judged_by_the_ipv4_address_they_carry(
    address: str, embedded: str | None, why: str | None
) -> None:
    ip = ipaddress.IPv6Address(address)
    found = embedded_ipv4(ip)
    assert (str(found) if found else None, refusal(ip)) == (embedded, why)


@pytest.mark.parametrize("url", ["http://[::127.0.0.1]:8799/", "http://[64:ff9b::7f00:1]:8799/"])
def test_the_guard_refuses_embedded_loopback(url: str) -> None:
    with pytest.raises(BlockedDestination, match="a loopback address"):
        check_url(url)


def test_mask_and_redaction_keep_nothing_after_host_and_port() -> None:
    url = "http://127.0.0.1:8799/hook?token=QSECRET#FRAGLEAK"
    assert mask_url(url) == "http://127.0.0.1:8799/…"
    assert mask_url("http://x:99999/") == "(invalid URL)"
    line = "POST http://10.0.0.1:8799/hook?token=QSECRET#FRAGLEAK failed"
    assert redact(line, url) == "POST http://10.0.0.1:8799… failed"
    assert redact("seen #FRAGLEAK and ?token=QSECRET", url) == "seen … and …"
