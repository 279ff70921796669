"""A pasted ``?tz=`` link keeps its zone while clicking around: the brand, the main nav and
the breadcrumbs / back links carry the viewer's ``tz`` (and nothing when the viewer is in UTC)."""

from __future__ import annotations

import re

import httpx

from tests.live_server import LiveServer

NAV = [
    "/",
    "/topology",
    "/storage",
    "/alerts",
    "/incidents",
    "/reliability",
    "/maintenance",
    "/runbooks",
    "/notifications",
]
BERLIN = "?tz=Europe%2FBerlin"


def nav_hrefs(html: str) -> list[str]:
    """The brand link then each main-nav link's href, in page order (``/docs`` left out)."""
    brand = re.search(r'<a class="brand" href="([^"]*)"', html)
    assert brand is not None
    header = html[html.index('<a class="brand"') : html.index("</nav>")]
    links = re.findall(r'<li><a href="([^"]*)"', header)
    return [brand.group(1), *[h for h in links if h != "/docs"]]


def test_nav_and_breadcrumbs_keep_the_viewer_time_zone(server: LiveServer) -> None:
    berlin = httpx.get(f"{server.url}/rules/new?tz=Europe/Berlin", timeout=30).text
    utc = httpx.get(f"{server.url}/rules/new", timeout=30).text
    missing = httpx.get(f"{server.url}/runbooks/no-such-book?tz=Europe/Berlin", timeout=30)

    assert nav_hrefs(berlin) == [f"{path}{BERLIN}" for path in ["/", *NAV]]
    assert nav_hrefs(utc) == ["/", *NAV]
    assert f'<a href="/rules{BERLIN}">Rules</a>' in berlin
    assert f'href="/rules{BERLIN}">Cancel</a>' in berlin
    assert '<a href="/rules">Rules</a>' in utc
    assert f'<a href="/runbooks{BERLIN}">All runbooks</a>' in missing.text
