"""Logins, sessions, API tokens and the audit trail over a live server with the production
defaults (no anonymous access, no test admin): cookie flags, rotation, expiry, logout, the
failed-login limits, token scope/expiry/revocation, secrets never shown or logged, CSRF for
cookie-authenticated posts, the anonymous viewer mode and the CLI."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select, update

from app.access.models import ApiToken, User, UserSession
from app.access.roles import Role
from app.access.secrets import digest
from app.db import session_scope, utcnow
from tests.access_helpers import PASSWORD, add_token, add_user, firing_instance, log_in
from tests.app.test_cli import fleetwatch
from tests.conftest import make_settings
from tests.dbs import session_factory, wipe
from tests.factories import batch, wipe_alerts
from tests.live_server import LiveServer
from tests.notify_helpers import wipe_notify

HOT = {"kind": "threshold", "target": "gpu", "metric": "temp_c", "op": ">", "threshold": 85}


@pytest.fixture
def pg(postgres_url: str) -> Iterator[str]:
    yield postgres_url
    wipe_alerts(postgres_url)
    wipe_notify(postgres_url)
    wipe(postgres_url)


def start(url: str, tmp_path: Path, **overrides: object) -> LiveServer:
    server = LiveServer(make_settings(url, tmp_path, **overrides), as_admin=False)
    server.start()
    return server


@pytest.fixture
def live(pg: str, tmp_path: Path) -> Iterator[LiveServer]:
    server = start(pg, tmp_path)
    yield server
    server.stop()


def test_nothing_without_credentials_by_default(live: LiveServer) -> None:
    page = httpx.get(f"{live.url}/fleet?x=1")
    assert (page.status_code, page.headers["location"]) == (303, "/login?next=%2Ffleet%3Fx%3D1")
    api = httpx.get(f"{live.url}/api/v1/nodes")
    assert (api.status_code, api.headers["www-authenticate"]) == (401, "Bearer")
    write = httpx.post(f"{live.url}/api/v1/channels", json={"name": "x", "kind": "webhook"})
    assert write.status_code == 401
    htmx = httpx.get(f"{live.url}/fleet/_nodes", headers={"HX-Request": "true"})
    assert (htmx.status_code, htmx.headers["hx-redirect"]) == (401, "/login?next=%2Ffleet%2F_nodes")
    assert httpx.get(f"{live.url}/healthz").status_code == 200
    assert httpx.get(f"{live.url}/login").status_code == 200
    assert httpx.get(f"{live.url}/static/favicon.svg").status_code == 200


def test_login_cookie_is_httponly_lax_and_a_new_login_rotates_the_session(
    live: LiveServer, pg: str
) -> None:
    add_user(pg, "sess-alice", Role.viewer)
    first = httpx.post(
        f"{live.url}/login",
        data={"username": "sess-alice", "password": PASSWORD, "next": "/alerts?tz=UTC"},
    )
    assert (first.status_code, first.headers["location"]) == (303, "/alerts?tz=UTC")
    flags = first.headers["set-cookie"].lower()
    assert "httponly" in flags and "samesite=lax" in flags and "path=/" in flags
    assert "secure" not in flags  # plain http here; see the https test below
    old = first.cookies["fw_session"]
    assert httpx.get(f"{live.url}/alerts", cookies={"fw_session": old}).status_code == 200
    again = httpx.post(
        f"{live.url}/login",
        data={"username": "sess-alice", "password": PASSWORD},
        cookies={"fw_session": old},
    )
    new = again.cookies["fw_session"]
    assert new != old
    assert httpx.get(f"{live.url}/alerts", cookies={"fw_session": old}).status_code == 303
    assert httpx.get(f"{live.url}/alerts", cookies={"fw_session": new}).status_code == 200
    # The database holds digests only.
    with session_factory(pg) as factory, session_scope(factory) as session:
        stored = set(session.scalars(select(UserSession.token_sha256)))
    assert digest(new) in stored and new not in stored


def test_login_never_redirects_off_site(live: LiveServer, pg: str) -> None:
    add_user(pg, "sess-next", Role.viewer)
    for target in ("https://evil.example/", "//evil.example/x", "/\\evil.example"):
        answer = httpx.post(
            f"{live.url}/login",
            data={"username": "sess-next", "password": PASSWORD, "next": target},
        )
        assert answer.headers["location"] == "/", target


def test_secure_cookie_when_served_for_https(pg: str, tmp_path: Path) -> None:
    add_user(pg, "sess-tls", Role.viewer)
    server = start(pg, tmp_path, external_url="https://fw.example")
    try:
        answer = httpx.post(
            f"{server.url}/login", data={"username": "sess-tls", "password": PASSWORD}
        )
        assert "secure" in answer.headers["set-cookie"].lower()
    finally:
        server.stop()


def test_an_expired_session_and_a_logged_out_one_are_refused(live: LiveServer, pg: str) -> None:
    add_user(pg, "sess-exp", Role.viewer)
    cookie = log_in(live.url, "sess-exp")
    assert httpx.get(f"{live.url}/api/v1/nodes", cookies={"fw_session": cookie}).status_code == 200
    with session_factory(pg) as factory, session_scope(factory) as session:
        session.execute(
            update(UserSession)
            .where(UserSession.token_sha256 == digest(cookie))
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
    assert httpx.get(f"{live.url}/api/v1/nodes", cookies={"fw_session": cookie}).status_code == 401
    assert httpx.get(f"{live.url}/alerts", cookies={"fw_session": cookie}).status_code == 303

    cookie = log_in(live.url, "sess-exp")
    out = httpx.post(f"{live.url}/logout", cookies={"fw_session": cookie})
    assert (out.status_code, out.headers["location"]) == (303, "/login")
    assert (
        'fw_session=""' in out.headers["set-cookie"]
        or "max-age=0" in out.headers["set-cookie"].lower()
    )
    assert httpx.get(f"{live.url}/api/v1/nodes", cookies={"fw_session": cookie}).status_code == 401


def test_an_idle_session_is_refused_and_a_request_keeps_one_alive(pg: str, tmp_path: Path) -> None:
    server = start(pg, tmp_path, session_idle_s=600.0)
    try:
        add_user(pg, "sess-idle", Role.viewer)
        idle, busy = log_in(server.url, "sess-idle"), log_in(server.url, "sess-idle")
        nodes = f"{server.url}/api/v1/nodes"

        def seen(cookie: str, ago_s: float | None) -> None:
            with session_factory(pg) as factory, session_scope(factory) as session:
                session.execute(
                    update(UserSession)
                    .where(UserSession.token_sha256 == digest(cookie))
                    .values(
                        created_at=utcnow() - timedelta(hours=1),
                        last_seen_at=None if ago_s is None else utcnow() - timedelta(seconds=ago_s),
                    )
                )

        def last_seen(cookie: str) -> object:
            with session_factory(pg) as factory, session_scope(factory) as session:
                return session.scalars(
                    select(UserSession.last_seen_at).where(
                        UserSession.token_sha256 == digest(cookie)
                    )
                ).one()

        # Idle since the login an hour ago (never seen since): 600 s passed, refused.
        seen(idle, None)
        assert httpx.get(nodes, cookies={"fw_session": idle}).status_code == 401
        # A request 9 minutes ago keeps the session open; this request moves the mark to now.
        seen(busy, 540)
        assert httpx.get(nodes, cookies={"fw_session": busy}).status_code == 200
        moved = last_seen(busy)
        assert isinstance(moved, datetime) and utcnow() - moved < timedelta(seconds=30)
        # Within the minute the mark is not written again (no write per request).
        assert httpx.get(nodes, cookies={"fw_session": busy}).status_code == 200
        assert last_seen(busy) == moved
        seen(busy, 601)
        assert httpx.get(nodes, cookies={"fw_session": busy}).status_code == 401
        assert httpx.get(f"{server.url}/alerts", cookies={"fw_session": busy}).status_code == 303
    finally:
        server.stop()


def test_parallel_requests_of_one_session_and_a_live_panel_keep_it_open(
    pg: str, tmp_path: Path
) -> None:
    """Many requests at once with one cookie, all due to record the last request (one row
    written by each): no deadlock, no error; a live panel's refresh counts as a request."""
    server = start(pg, tmp_path, session_idle_s=600.0)
    try:
        add_user(pg, "sess-parallel", Role.viewer)
        cookie = log_in(server.url, "sess-parallel")
        mark = select(UserSession.last_seen_at).where(UserSession.token_sha256 == digest(cookie))

        def seen_ago(seconds: float) -> None:
            with session_factory(pg) as factory, session_scope(factory) as session:
                session.execute(
                    update(UserSession)
                    .where(UserSession.token_sha256 == digest(cookie))
                    .values(last_seen_at=utcnow() - timedelta(seconds=seconds))
                )

        def get(path: str) -> int:
            answer = httpx.get(f"{server.url}{path}", cookies={"fw_session": cookie}, timeout=60)
            return answer.status_code

        paths = ["/api/v1/nodes", "/api/v1/alerts", "/alerts", "/alerts?tz=UTC", "/api/v1/whoami"]
        for _ in range(3):
            seen_ago(120)
            with ThreadPoolExecutor(max_workers=24) as pool:
                codes = list(pool.map(get, paths * 10))
            assert codes == [200] * len(codes)
        seen_ago(590)
        panel = httpx.get(
            f"{server.url}/alerts/_list",
            headers={"HX-Request": "true"},
            cookies={"fw_session": cookie},
        )
        assert panel.status_code in (200, 204)
        with session_factory(pg) as factory, session_scope(factory) as session:
            moved = session.scalars(mark).one()
        assert moved is not None and utcnow() - moved < timedelta(seconds=30)
    finally:
        server.stop()


def test_failed_logins_are_limited_per_user_and_per_address(pg: str, tmp_path: Path) -> None:
    add_user(pg, "sess-limit", Role.viewer)
    server = start(pg, tmp_path, login_max_failures_per_user=3, login_max_failures_per_address=5)
    try:

        def attempt(name: str, password: str) -> int:
            return httpx.post(
                f"{server.url}/login", data={"username": name, "password": password}
            ).status_code

        assert [attempt("sess-limit", "wrong") for _ in range(3)] == [401, 401, 401]
        # The right password no longer helps until the window passes.
        limited = httpx.post(
            f"{server.url}/login", data={"username": "sess-limit", "password": PASSWORD}
        )
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) == 900
        # Another name from the same address: the address limit (5) counts every failure.
        assert [attempt("nobody", "x") for _ in range(3)] == [401, 401, 429]
    finally:
        server.stop()


def test_api_token_scope_expiry_revocation_and_last_use(live: LiveServer, pg: str) -> None:
    admin = add_token(pg, "tok-admin", Role.admin, None)
    viewer = add_token(pg, "tok-viewer", Role.viewer, None)
    api = f"{live.url}/api/v1"

    def h(token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    rule = {"name": "tok-rule-b", "condition": HOT, "owner_team": "team-b"}
    assert httpx.post(f"{api}/rules", json=rule, headers=h(admin)).status_code == 201
    assert httpx.get(f"{api}/rules", headers=h(viewer)).status_code == 200
    refused = httpx.put(f"{api}/rules/tok-rule-b", json=rule, headers=h(viewer))
    assert refused.status_code == 403 and "viewer" in refused.json()["detail"]
    # An editor token of team A cannot touch team B's rule; one of team B can.
    editor_a = add_token(pg, "tok-editor-a", Role.editor, "team-a")
    editor_b = add_token(pg, "tok-editor-b", Role.editor, "team-b")
    other_team = httpx.put(f"{api}/rules/tok-rule-b", json=rule, headers=h(editor_a))
    assert other_team.status_code == 403 and "team-b" in other_team.json()["detail"]
    assert httpx.put(f"{api}/rules/tok-rule-b", json=rule, headers=h(editor_b)).status_code == 200

    created = httpx.post(
        f"{api}/tokens",
        json={"name": "tok-ci", "role": "responder", "ttl_s": 3600},
        headers=h(admin),
    )
    assert created.status_code == 201, created.text
    secret, token_id = created.json()["token"], created.json()["id"]
    assert httpx.get(f"{api}/whoami", headers=h(secret)).json() == {
        "kind": "token",
        "name": "tok-ci",
        "role": "responder",
        "teams": None,
    }
    listed = httpx.get(f"{api}/tokens", headers=h(admin))
    row = next(t for t in listed.json() if t["id"] == token_id)
    assert row["last_used_at"] is not None and row["prefix"] == secret[:12]
    assert secret not in listed.text and digest(secret) not in listed.text
    # Expiry.
    with session_factory(pg) as factory, session_scope(factory) as session:
        session.execute(
            update(ApiToken)
            .where(ApiToken.id == token_id)
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
    expired = httpx.get(f"{api}/nodes", headers=h(secret))
    assert expired.status_code == 401 and "expired" in expired.json()["detail"]
    # Revocation takes effect at once.
    assert httpx.get(f"{api}/nodes", headers=h(viewer)).status_code == 200
    viewer_id = next(
        t["id"]
        for t in httpx.get(f"{api}/tokens", headers=h(admin)).json()
        if t["name"] == "tok-viewer"
    )
    assert httpx.post(f"{api}/tokens/{viewer_id}/revoke", headers=h(admin)).status_code == 200
    assert httpx.get(f"{api}/nodes", headers=h(viewer)).status_code == 401
    assert httpx.get(f"{api}/nodes", headers=h("fwk_not-a-token")).status_code == 401
    assert httpx.get(f"{api}/nodes", headers={"Authorization": "Basic eDp5"}).status_code == 401


def test_secrets_never_in_a_response_or_a_log_line(
    live: LiveServer, pg: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    admin = add_token(pg, "sec-admin", Role.admin, None)
    h = {"Authorization": f"Bearer {admin}"}
    api = f"{live.url}/api/v1"
    made = httpx.post(f"{api}/users", json={"name": "sec-bob", "role": "viewer"}, headers=h)
    assert made.status_code == 201
    password = made.json()["one_time_password"]
    cookie = log_in(live.url, "sec-bob", password)
    token = httpx.post(f"{api}/tokens", json={"name": "sec-ci"}, headers=h).json()["token"]
    httpx.post(f"{live.url}/login", data={"username": "sec-bob", "password": "wrong " + password})
    with session_factory(pg) as factory, session_scope(factory) as session:
        password_hash = session.scalars(
            select(User.password_hash).where(User.name == "sec-bob")
        ).one()
    assert password_hash and password_hash.startswith("$argon2id$")
    secrets = [
        password,
        password_hash,
        cookie,
        digest(cookie),
        token,
        digest(token),
        admin,
        digest(admin),
    ]
    texts = [
        httpx.get(f"{api}/users", headers=h).text,
        httpx.get(f"{api}/tokens", headers=h).text,
        httpx.get(f"{api}/audit", headers=h).text,
        httpx.get(f"{live.url}/audit", headers=h).text,
        httpx.get(f"{api}/whoami", cookies={"fw_session": cookie}).text,
        httpx.get(f"{live.url}/alerts", cookies={"fw_session": cookie}).text,
        # The server's log lines (uvicorn, app.*), not this test's own HTTP client's.
        "\n".join(
            r.getMessage() for r in caplog.records if not r.name.startswith(("httpx", "httpcore"))
        ),
    ]
    for text in texts:
        for secret in secrets:
            assert secret not in text


def test_csrf_is_still_enforced_for_cookie_authenticated_posts(live: LiveServer, pg: str) -> None:
    add_user(pg, "csrf-resp", Role.responder)
    cookie = log_in(live.url, "csrf-resp")
    form = {
        "matcher_name": "hostname",
        "matcher_op": "=",
        "matcher_value": "x",
        "duration": "1h",
        "comment": "c",
    }
    foreign = httpx.post(
        f"{live.url}/silences",
        data=form,
        cookies={"fw_session": cookie},
        headers={"Origin": "https://evil.example"},
    )
    assert foreign.status_code == 403 and "cross-origin" in foreign.text
    same = httpx.post(
        f"{live.url}/silences",
        data=form,
        cookies={"fw_session": cookie},
        headers={"Origin": live.url},
    )
    assert same.status_code not in (401, 403)


def test_anonymous_viewer_mode_reads_but_never_writes(pg: str, tmp_path: Path) -> None:
    server = start(pg, tmp_path, anonymous_role="viewer")
    try:
        assert httpx.get(f"{server.url}/alerts").status_code == 200
        assert httpx.get(f"{server.url}/api/v1/nodes").status_code == 200
        write = httpx.post(f"{server.url}/api/v1/silences", json={})
        assert (
            write.status_code == 401 and "anonymous access is read-only" in write.json()["detail"]
        )
        edit = httpx.get(f"{server.url}/rules/new")
        assert (edit.status_code, edit.headers["location"]) == (303, "/login?next=%2Frules%2Fnew")
        assert httpx.get(f"{server.url}/api/v1/audit").status_code == 401
    finally:
        server.stop()


def test_the_audit_trail_says_who_did_what_from_where(live: LiveServer, pg: str) -> None:
    editor = add_token(pg, "aud-editor", Role.editor, None)
    admin = add_token(pg, "aud-admin", Role.admin, None)
    api = f"{live.url}/api/v1"
    made = httpx.post(
        f"{api}/rules",
        json={"name": "aud-rule", "condition": HOT},
        headers={"Authorization": f"Bearer {editor}"},
    )
    assert made.status_code == 201
    httpx.delete(f"{api}/rules/aud-rule", headers={"Authorization": f"Bearer {editor}"})
    events = httpx.get(
        f"{api}/audit",
        params={"actor": "token:aud-editor"},
        headers={"Authorization": f"Bearer {admin}"},
    ).json()
    assert [(e["action"], e["target"], e["status"], e["address"]) for e in events] == [
        ("DELETE /api/v1/rules/{name}", {"name": "aud-rule"}, 204, "127.0.0.1"),
        ("POST /api/v1/rules", None, 201, "127.0.0.1"),
    ]
    page = httpx.get(
        f"{live.url}/audit",
        params={"action": "/rules"},
        headers={"Authorization": f"Bearer {admin}"},
    )
    assert page.status_code == 200 and "token:aud-editor" in page.text


def test_cli_user_create_prints_a_password_that_logs_in_and_the_client_cli_uses_tokens(
    live: LiveServer, pg: str
) -> None:
    made = fleetwatch("user", "create", "cli-root", "--admin", "--database-url", pg)
    assert made.returncode == 0, made.stderr
    password = made.stdout.split("one-time password: ")[1].strip()
    assert log_in(live.url, "cli-root", password)
    bad_role = fleetwatch("user", "create", "cli-x", "--role", "boss", "--database-url", pg)
    assert bad_role.returncode == 2 and "viewer, responder, editor, admin" in bad_role.stderr
    token = fleetwatch("api-token", "create", "cli-ci", "--role", "viewer", "--database-url", pg)
    assert token.returncode == 0, token.stderr
    secret = token.stdout.strip()
    listed = fleetwatch("alerts", "--server", live.url, "--token", secret)
    assert listed.returncode == 0, listed.stderr
    refused = fleetwatch("alerts", "--server", live.url)
    assert refused.returncode != 0 and "log in or send" in refused.stderr


def test_acks_and_silences_record_the_logged_in_user(live: LiveServer, pg: str) -> None:
    admin = add_token(pg, "who-admin", Role.admin, None)
    bot = add_token(pg, "who-bot", Role.responder, None)
    api = f"{live.url}/api/v1"
    rule = {"name": "who-rule", "condition": HOT}
    assert (
        httpx.post(
            f"{api}/rules", json=rule, headers={"Authorization": f"Bearer {admin}"}
        ).status_code
        == 201
    )
    alert_id = firing_instance(pg, "who-rule")
    add_user(pg, "who-carol", Role.responder)
    cookie = {"fw_session": log_in(live.url, "who-carol")}
    page = httpx.get(f"{live.url}/alerts/{alert_id}", cookies=cookie)
    assert 'value="who-carol"' in page.text  # the form is prefilled with the user
    acked = httpx.post(
        f"{live.url}/alerts/{alert_id}/ack",
        data={"owner": "someone-else", "note": "on it"},
        cookies=cookie,
    )
    assert acked.status_code == 303
    silence = {
        "matchers": [{"name": "alertname", "value": "who-rule"}],
        "ends_at": (utcnow() + timedelta(hours=1)).isoformat(),
        "created_by": "not-carol",
        "comment": "c",
    }
    by_user = httpx.post(f"{api}/silences", json=silence, cookies=cookie)
    assert by_user.status_code == 201, by_user.text
    assert by_user.json()["created_by"] == "who-carol"
    # A token acts for whoever the body names (a chat bot); the trail keeps the token.
    by_bot = httpx.post(
        f"{api}/silences",
        json={**silence, "created_by": "dave"},
        headers={"Authorization": f"Bearer {bot}"},
    )
    assert by_bot.json()["created_by"] == "dave"
    detail = httpx.get(
        f"{api}/alerts/{alert_id}", headers={"Authorization": f"Bearer {admin}"}
    ).json()
    assert [a["owner"] for a in detail["acks"]] == ["who-carol"]
    trail = httpx.get(
        f"{api}/audit", params={"action": "silences"}, headers={"Authorization": f"Bearer {admin}"}
    ).json()
    assert [e["actor"] for e in trail] == ["token:who-bot", "user:who-carol"]


def test_admin_page_creates_shows_once_and_revokes_tokens_and_disables_users(
    live: LiveServer, pg: str
) -> None:
    add_user(pg, "page-admin", Role.admin)
    add_user(pg, "page-erin", Role.viewer)
    admin = {"fw_session": log_in(live.url, "page-admin")}
    erin = {"fw_session": log_in(live.url, "page-erin")}
    assert httpx.get(f"{live.url}/admin/access", cookies=erin).status_code == 403
    made = httpx.post(
        f"{live.url}/admin/tokens",
        data={"name": "page-ci", "role": "viewer", "ttl": "30d"},
        cookies=admin,
    )
    assert made.status_code == 201
    secret = re.search(r'id="shown-secret">(fwk_[\w-]+)<', made.text).group(1)  # type: ignore[union-attr]
    listing = httpx.get(f"{live.url}/admin/access", cookies=admin).text
    assert secret not in listing and secret[:12] in listing
    assert (
        httpx.get(
            f"{live.url}/api/v1/nodes", headers={"Authorization": f"Bearer {secret}"}
        ).status_code
        == 200
    )
    token_id = re.search(r'data-token-id="(\d+)"><td>\d+</td><td>page-ci<', listing).group(1)  # type: ignore[union-attr]
    revoked = httpx.post(f"{live.url}/admin/tokens/{token_id}/revoke", cookies=admin)
    assert revoked.status_code == 303
    assert (
        httpx.get(
            f"{live.url}/api/v1/nodes", headers={"Authorization": f"Bearer {secret}"}
        ).status_code
        == 401
    )
    # Disabling a user ends its sessions and its logins.
    off = httpx.post(
        f"{live.url}/admin/users/page-erin/active", data={"active": "false"}, cookies=admin
    )
    assert off.status_code == 303
    assert httpx.get(f"{live.url}/api/v1/nodes", cookies=erin).status_code == 401
    again = httpx.post(f"{live.url}/login", data={"username": "page-erin", "password": PASSWORD})
    assert again.status_code == 401
    bad = httpx.post(
        f"{live.url}/admin/users", data={"name": "x y", "role": "viewer"}, cookies=admin
    )
    assert bad.status_code == 400 and "user name" in bad.text


def test_an_editor_cannot_give_an_object_to_another_team(live: LiveServer, pg: str) -> None:
    editor_a = {"Authorization": f"Bearer {add_token(pg, 'give-editor-a', Role.editor, 'team-a')}"}
    api = f"{live.url}/api/v1"
    mine = {"name": "give-rule", "condition": HOT, "owner_team": "team-a"}
    theirs = {**mine, "owner_team": "team-b"}
    assert httpx.post(f"{api}/rules", json=theirs, headers=editor_a).status_code == 403
    assert httpx.post(f"{api}/rules", json=mine, headers=editor_a).status_code == 201
    moved = httpx.put(f"{api}/rules/give-rule", json=theirs, headers=editor_a)
    assert moved.status_code == 403 and "team-b" in moved.json()["detail"]
    channel = {"name": "give-chan", "kind": "webhook", "url": "http://192.0.2.1/h"}
    assert (
        httpx.post(
            f"{api}/channels", json={**channel, "team": "team-b"}, headers=editor_a
        ).status_code
        == 403
    )
    made = httpx.post(f"{api}/channels", json={**channel, "team": "team-a"}, headers=editor_a)
    assert made.status_code == 201, made.text
    cid = made.json()["id"]
    assert (
        httpx.patch(f"{api}/channels/{cid}", json={"team": "team-b"}, headers=editor_a).status_code
        == 403
    )
    route = {"channel_id": cid, "team": "team-b"}
    assert httpx.post(f"{api}/routes", json=route, headers=editor_a).status_code == 403
    # The rule editor page checks the same.
    page = httpx.post(
        f"{live.url}/rules",
        data={
            "document": "name: give-page\nowner_team: team-b\ncondition:\n  kind: threshold\n"
            "  target: gpu\n  metric: temp_c\n  op: '>'\n  threshold: 85\n"
        },
        headers=editor_a,
    )
    assert page.status_code == 403 and "team-b" in page.text


def test_admin_page_issues_and_revokes_agent_tokens(live: LiveServer, pg: str) -> None:
    add_user(pg, "agent-admin", Role.admin)
    admin = {"fw_session": log_in(live.url, "agent-admin")}
    made = httpx.post(
        f"{live.url}/admin/agent-tokens", data={"hostname": "enrol-07"}, cookies=admin
    )
    assert made.status_code == 201
    secret = re.search(r'id="shown-secret">(fwt_[\w-]+)<', made.text).group(1)  # type: ignore[union-attr]
    auth = {"Authorization": f"Bearer {secret}"}
    assert (
        httpx.post(
            f"{live.url}/api/v1/ingest", json=batch("enrol-07", gpus=1), headers=auth
        ).status_code
        == 200
    )
    # The token writes only its node, and reads nothing.
    assert (
        httpx.post(
            f"{live.url}/api/v1/ingest", json=batch("other-08", gpus=1), headers=auth
        ).status_code
        == 403
    )
    assert httpx.get(f"{live.url}/api/v1/nodes", headers=auth).status_code == 403
    listing = httpx.get(f"{live.url}/admin/access", cookies=admin).text
    assert secret not in listing and secret[:12] in listing
    token_id = re.search(
        r'data-agent-token-id="(\d+)"><td>\d+</td><td><a href="/nodes/enrol-07"', listing
    ).group(1)  # type: ignore[union-attr]
    assert (
        httpx.post(f"{live.url}/admin/agent-tokens/{token_id}/revoke", cookies=admin).status_code
        == 303
    )
    assert (
        httpx.post(
            f"{live.url}/api/v1/ingest", json=batch("enrol-07", gpus=1), headers=auth
        ).status_code
        == 401
    )
    bad = httpx.post(
        f"{live.url}/admin/agent-tokens", data={"hostname": "no spaces"}, cookies=admin
    )
    assert bad.status_code == 400 and "hostname" in bad.text
