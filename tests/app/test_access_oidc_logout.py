"""The logout of a single sign-on session against whatever the provider's discovery says: an
``end_session_endpoint`` with a query or a fragment, none, one in another scheme (never put in
the page), a broken discovery document or a provider down at logout time (local logout still
happens, logged), the URL HTML-escaped and no inline script. The provider here is a real HTTP
server answering a discovery document the test sets (the code flow itself is
tests/app/test_access_oidc.py, against oidc-provider-mock). Both backends."""

from __future__ import annotations

import html
import json
import logging
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from app.access import oidc, sessions
from app.access.models import User
from app.access.roles import Role
from app.audit.models import AuditEvent
from app.db import session_scope
from tests.access_helpers import add_user
from tests.conftest import make_settings
from tests.dbs import session_factory, wipe
from tests.live_server import LiveServer, free_port

NAMES = {
    "test_the_logout_page_goes_only_to_an_http_provider_endpoint_and_escapes_it": "sso-out-a",
    "test_a_broken_discovery_or_a_provider_down_still_logs_out_locally": "sso-out-b",
}


class Discovery:
    """A provider's discovery endpoint answering ``document`` (``None``: nothing listens)."""

    def __init__(self) -> None:
        self.document: Any = None
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = json.dumps(owner.document).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._server: ThreadingHTTPServer | None = ThreadingHTTPServer(
            ("127.0.0.1", self.port), Handler
        )
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


@pytest.fixture
def provider(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[tuple[LiveServer, Discovery, str]]:
    # Each logout reads the document the test has just set (the server runs in this process).
    monkeypatch.setattr(oidc, "DISCOVERY_TTL_S", 0.0)
    discovery = Discovery()
    settings = make_settings(
        db_url,
        tmp_path,
        oidc_issuer=discovery.issuer,
        oidc_client_id="fleetwatch",
        oidc_client_secret="client-secret",
        oidc_group_roles={"sre": "admin"},
    )
    server = LiveServer(settings, as_admin=False)
    server.start()
    # Users outlive the test's wipe: one name per test.
    add_user(db_url, NAMES[request.node.originalname], Role.viewer)
    yield server, discovery, db_url
    server.stop()
    discovery.stop()
    wipe(db_url)


def sso_session(url: str, name: str) -> str:
    """A session of user ``name`` opened by single sign-on; its cookie value."""
    with session_factory(url) as factory, session_scope(factory) as session:
        user = session.scalars(select(User).where(User.name == name)).one()
        return sessions.open_session(session, user, address="127.0.0.1", ttl_s=3600, via_sso=True)


def log_out(base: str, cookie: str) -> tuple[httpx.Response, str | None]:
    """POST /logout; the answer and the provider URL its page navigates to (``None``: a plain
    303 to the login page). Checks the session is closed and the cookie cleared either way."""
    out = httpx.post(f"{base}/logout", cookies={"fw_session": cookie})
    assert 'fw_session=""' in out.headers["set-cookie"]
    who = httpx.get(f"{base}/api/v1/whoami", cookies={"fw_session": cookie}).json()
    assert who["kind"] == "anonymous"
    if out.status_code == 303:
        assert out.headers["location"] == "/login"
        return out, None
    assert out.status_code == 200, out.text
    links = re.findall(r'id="provider-logout" href="([^"]*)"', out.text)
    refresh = re.findall(r'http-equiv="refresh" content="0;url=([^"]*)"', out.text)
    assert len(links) == 1 and refresh == links
    # No inline script: the CSP allows none, and the page needs none.
    assert all("src=" in tag for tag in re.findall(r"<script[^>]*>", out.text))
    csp = out.headers["content-security-policy"]
    assert "script-src" in csp and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
    return out, html.unescape(links[0])


def logouts(url: str) -> list[Any]:
    with session_factory(url) as factory, session_scope(factory) as session:
        query = select(AuditEvent.detail).where(AuditEvent.action == "logout")
        return list(session.scalars(query.order_by(AuditEvent.id)))


BACK = "client_id=fleetwatch&post_logout_redirect_uri=http%3A%2F%2F127.0.0.1%3A{port}%2Flogin"

#: (end_session_endpoint in the discovery, the URL the page must navigate to: ``{back}`` is
#: this server's parameters; ``None``: local logout only).
ENDPOINTS: list[tuple[Any, str | None]] = [
    ("https://idp.example/logout", "https://idp.example/logout?{back}"),
    ("https://idp.example/logout?tenant=a&x=1", "https://idp.example/logout?tenant=a&x=1&{back}"),
    # A fragment would have swallowed the parameters; the endpoint's own client_id is not ours.
    ("HTTPS://idp.example/logout?client_id=other#top", "https://idp.example/logout?{back}"),
    (
        'https://idp.example/out"><script>alert(1)</script>',
        'https://idp.example/out"><script>alert(1)</script>?{back}',
    ),
    ("javascript:alert(1)", None),
    ("JavaScript:alert(1)//https://idp.example/", None),
    ("data:text/html,<script>alert(1)</script>", None),
    ("vbscript:msgbox(1)", None),
    ("https:///javascript:alert(1)", None),
    ("http://", None),
    ("https://idp.example:99999/logout", None),
    (" https://idp.example/logout", None),
    ("https://idp.example/log\nout", None),
    (["https://idp.example/logout"], None),
    (None, None),
]


def test_the_logout_page_goes_only_to_an_http_provider_endpoint_and_escapes_it(
    provider: tuple[LiveServer, Discovery, str],
) -> None:
    server, discovery, url = provider
    back = BACK.format(port=server.port)
    details = []
    for endpoint, expected in ENDPOINTS:
        document: dict[str, Any] = {"issuer": discovery.issuer}
        if endpoint is not None:
            document["end_session_endpoint"] = endpoint
        discovery.document = document
        out, went = log_out(server.url, sso_session(url, "sso-out-a"))
        want = expected.format(back=back) if expected is not None else None
        assert went == want, endpoint
        if went is not None:
            assert "<script>alert" not in out.text
        details.append({"identity_provider": want is not None})
    assert logouts(url) == details


def test_a_broken_discovery_or_a_provider_down_still_logs_out_locally(
    provider: tuple[LiveServer, Discovery, str], caplog: pytest.LogCaptureFixture
) -> None:
    server, discovery, url = provider
    caplog.set_level(logging.WARNING, logger="app.access.router")
    # The issuer as a number or null: checked, not a 500 leaving the session open.
    for document in ({"issuer": 5}, {"issuer": None}, ["not", "an", "object"], "text"):
        discovery.document = document
        assert log_out(server.url, sso_session(url, "sso-out-b"))[1] is None
    discovery.stop()
    cookie = sso_session(url, "sso-out-b")
    assert log_out(server.url, cookie)[1] is None
    warnings = [r.getMessage() for r in caplog.records if r.name == "app.access.router"]
    assert len(warnings) == 5 and all("session stays open" in w for w in warnings)
    assert "did not answer its discovery" in warnings[-1]
    # Again, and without a cookie: nothing to close, the login page.
    for cookies in ({"fw_session": cookie}, {}):
        again = httpx.post(f"{server.url}/logout", cookies=cookies)
        assert (again.status_code, again.headers["location"]) == (303, "/login")
    assert logouts(url) == [{"identity_provider": False}] * 5
