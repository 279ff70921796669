"""Single sign-on against a separate OIDC provider process (oidc-provider-mock), driven over
HTTP as a browser would (redirects followed by hand): groups map to a role and teams, the
user is created without a password and updated at each login, a user in no mapped group and
a forged state are refused. The Chromium walk-through is tests/browser/test_oidc_browser.py."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from app.access.oidc import grants_of, parse_grant
from app.access.roles import Role
from app.audit.models import AuditEvent
from app.config import SettingsError, load_settings
from app.db import session_scope
from tests.access_helpers import PASSWORD, add_user, log_in
from tests.conftest import make_settings
from tests.dbs import session_factory, wipe
from tests.factories import wipe_alerts
from tests.live_server import LiveServer
from tests.notify_helpers import wipe_notify
from tests.oidc_provider import oidc_provider, set_user

GROUP_ROLES = {"gpu-oncall": "responder:team-a", "sre": "admin", "ml-rules": "editor:team-b"}


@pytest.fixture
def sso(postgres_url: str, tmp_path: Path) -> Iterator[tuple[LiveServer, str]]:
    with oidc_provider() as issuer:
        settings = make_settings(
            postgres_url,
            tmp_path,
            oidc_issuer=issuer,
            oidc_client_id="fleetwatch",
            oidc_client_secret="client-secret",
            oidc_group_roles=GROUP_ROLES,
        )
        server = LiveServer(settings, as_admin=False)
        server.start()
        yield server, issuer
        server.stop()
    wipe_alerts(postgres_url)
    wipe_notify(postgres_url)
    wipe(postgres_url)


def sso_login(base: str, sub: str) -> httpx.Response:
    """Walk the code flow for ``sub``: Fleetwatch → provider form → callback. Returns the
    callback's answer."""
    with httpx.Client(follow_redirects=False, timeout=30) as client:
        start = client.get(f"{base}/login/oidc", params={"next": "/alerts"})
        assert start.status_code == 303, start.text
        authorize = start.headers["location"]
        assert "code_challenge=" in authorize and "nonce=" in authorize and "state=" in authorize
        form = client.post(authorize, data={"sub": sub})
        assert form.status_code in (302, 303), form.text
        callback = form.headers["location"]
        assert callback.startswith(f"{base}/login/oidc/callback?")
        answer = client.get(callback)
        answer.read()
        return answer


def test_group_claims_map_to_a_role_and_teams_and_log_in(sso: tuple[LiveServer, str]) -> None:
    server, issuer = sso
    set_user(
        issuer,
        "olivia",
        {"preferred_username": "olivia", "groups": ["gpu-oncall", "ml-rules", "other"]},
    )
    answer = sso_login(server.url, "olivia")
    assert (answer.status_code, answer.headers["location"]) == (303, "/alerts"), answer.text
    cookie = answer.cookies["fw_session"]
    who = httpx.get(f"{server.url}/api/v1/whoami", cookies={"fw_session": cookie}).json()
    assert who == {
        "kind": "user",
        "name": "olivia",
        "role": "editor",
        "teams": ["team-a", "team-b"],
    }
    # Removed from a group at the provider: the next login has less.
    set_user(issuer, "olivia", {"preferred_username": "olivia", "groups": ["gpu-oncall"]})
    again = sso_login(server.url, "olivia")
    who = httpx.get(
        f"{server.url}/api/v1/whoami", cookies={"fw_session": again.cookies["fw_session"]}
    ).json()
    assert (who["role"], who["teams"]) == ("responder", ["team-a"])
    # No local password was set: the password form cannot log in as olivia.
    form = httpx.post(
        f"{server.url}/login", data={"username": "olivia", "password": "anything-at-all"}
    )
    assert form.status_code == 401


def test_no_mapped_group_a_local_name_and_a_forged_state_are_refused(
    sso: tuple[LiveServer, str], postgres_url: str
) -> None:
    server, issuer = sso
    set_user(issuer, "mallory", {"preferred_username": "mallory", "groups": ["interns"]})
    refused = sso_login(server.url, "mallory")
    assert (
        refused.status_code == 401
        and "no group" in refused.text
        and "fw_session" not in refused.cookies
    )
    add_user(postgres_url, "root-local", Role.admin)
    set_user(issuer, "root-local", {"preferred_username": "root-local", "groups": ["sre"]})
    taken = sso_login(server.url, "root-local")
    assert taken.status_code == 409 or (taken.status_code == 401 and "local user" in taken.text)
    assert (
        httpx.post(
            f"{server.url}/login", data={"username": "root-local", "password": PASSWORD}
        ).status_code
        == 303
    )
    # A callback with another state than this browser's cookie holds.
    with httpx.Client(follow_redirects=False, timeout=30) as client:
        start = client.get(f"{server.url}/login/oidc")
        form = client.post(start.headers["location"], data={"sub": "olivia"})
        forged = re.sub(r"state=[^&]+", "state=forged", form.headers["location"])
        assert client.get(forged).status_code == 401
    # And with no state cookie at all (a link sent to someone else).
    assert httpx.get(form.headers["location"]).status_code == 401


def test_logout_of_an_sso_session_ends_the_providers_session_too(
    sso: tuple[LiveServer, str], postgres_url: str
) -> None:
    server, issuer = sso
    set_user(issuer, "lena", {"preferred_username": "lena", "groups": ["sre"]})
    cookie = sso_login(server.url, "lena").cookies["fw_session"]
    out = httpx.post(f"{server.url}/logout", cookies={"fw_session": cookie})
    # A page that navigates to the provider (the pages' CSP keeps form posts, and so their
    # redirects, to this server), and the cookie cleared.
    assert out.status_code == 200 and 'fw_session=""' in out.headers["set-cookie"]
    links = re.findall(r'id="provider-logout" href="([^"]+)"', out.text)
    refresh = re.findall(r'http-equiv="refresh" content="0;url=([^"]+)"', out.text)
    assert len(links) == 1 and refresh == links
    provider = httpx.URL(html.unescape(links[0]))
    assert str(provider.copy_with(query=None)) == f"{issuer}/oauth2/end_session"
    assert dict(provider.params) == {
        "client_id": "fleetwatch",
        "post_logout_redirect_uri": f"{server.url}/login",
    }
    assert (
        httpx.get(f"{server.url}/api/v1/whoami", cookies={"fw_session": cookie}).json()["kind"]
        == "anonymous"
    )
    # The provider asks to confirm, then sends the browser back to Fleetwatch's login page.
    form = httpx.get(str(provider))
    assert form.status_code == 200
    back = httpx.post(
        f"{issuer}/oauth2/end_session/confirm", data={"redirect_uri": f"{server.url}/login"}
    )
    assert (back.status_code, back.headers["location"]) == (302, f"{server.url}/login")
    # A local login's logout stays local, and the audit says which went to the provider.
    add_user(postgres_url, "lena-local", Role.viewer)
    local = log_in(server.url, "lena-local")
    out = httpx.post(f"{server.url}/logout", cookies={"fw_session": local})
    assert (out.status_code, out.headers["location"]) == (303, "/login")
    with session_factory(postgres_url) as factory, session_scope(factory) as session:
        logouts = session.execute(
            select(AuditEvent.actor, AuditEvent.detail)
            .where(AuditEvent.action == "logout")
            .order_by(AuditEvent.id)
        ).all()
    assert [tuple(r) for r in logouts] == [
        ("user:lena", {"identity_provider": True}),
        ("user:lena-local", None),
    ]


def test_group_role_setting_forms() -> None:
    assert parse_grant("responder:team-a") == (Role.responder, "team-a")
    assert parse_grant("Admin") == (Role.admin, None)
    with pytest.raises(ValueError, match="unknown role"):
        parse_grant("boss")
    with pytest.raises(ValueError, match="team after"):
        parse_grant("editor:")
    assert grants_of(["a", "b", "c"], {"a": "viewer:x", "b": "editor:y"}) == (
        Role.editor,
        {"x", "y"},
    )
    assert grants_of(["c"], {"a": "viewer"}) == (None, set())


def test_bad_access_settings_name_the_variable() -> None:
    with pytest.raises(
        SettingsError, match="FLEETWATCH_OIDC_GROUP_ROLES: sre: unknown role 'boss'"
    ):
        load_settings(oidc_group_roles="sre=boss")
    with pytest.raises(SettingsError, match="FLEETWATCH_ANONYMOUS_ROLE: none or viewer"):
        load_settings(anonymous_role="admin")
    assert load_settings(anonymous_role="Viewer").anonymous_role == "viewer"
