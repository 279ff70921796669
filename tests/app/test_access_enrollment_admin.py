"""Enrollment tokens on ``/admin/access`` (create with name, nodes and expiry, shown once;
listed with uses left, expiry and state; revoked) and from ``fleetwatch enroll-token``; the
agent-token list a page at a time with a hostname filter. Both backends."""

from __future__ import annotations

import re
from datetime import timedelta

import httpx
from sqlalchemy import update

from app.auth import service as agent_tokens
from app.auth.models import EnrollmentToken
from app.db import session_scope, utcnow
from tests.app.test_cli import fleetwatch
from tests.dbs import session_factory
from tests.live_server import LiveServer


def _enroll(url: str, token: str, hostname: str) -> httpx.Response:
    return httpx.post(
        f"{url}/api/v1/enroll",
        json={"hostname": hostname},
        headers={"Authorization": f"Bearer {token}"},
    )


def _row(page: str, token_id: str) -> str:
    found = re.search(rf'<tr data-enrollment-token-id="{token_id}">(.*?)</tr>', page, re.S)
    assert found, page
    return re.sub(r"<[^>]+>", "|", found.group(1))


def test_admin_page_creates_lists_and_revokes_enrollment_tokens(server: LiveServer) -> None:
    made = httpx.post(
        f"{server.url}/admin/enrollment-tokens",
        data={"name": "rack-12", "max_uses": "2", "ttl": "7d"},
    )
    assert made.status_code == 201, made.text
    secret = re.search(r'id="shown-secret">(fwe_[\w-]+)<', made.text).group(1)  # type: ignore[union-attr]
    assert "Enrollment token rack-12 (2 nodes, until " in made.text
    assert _enroll(server.url, secret, "enrol-page-1").status_code == 201

    page = httpx.get(f"{server.url}/admin/access").text
    assert secret not in page and secret[:12] in page
    token_id = re.search(r'data-enrollment-token-id="(\d+)"', page).group(1)  # type: ignore[union-attr]
    cells = _row(page, token_id)
    assert "|rack-12|" in cells and "|1 of 2|" in cells and "|active|" in cells
    expires = (utcnow() + timedelta(days=7)).strftime("%Y-%m-%d")
    assert expires in cells

    assert _enroll(server.url, secret, "enrol-page-2").status_code == 201
    used_up = _row(httpx.get(f"{server.url}/admin/access").text, token_id)
    assert "|0 of 2|" in used_up and "|used up|" in used_up

    revoked = httpx.post(f"{server.url}/admin/enrollment-tokens/{token_id}/revoke")
    assert revoked.status_code == 303
    after = _row(httpx.get(f"{server.url}/admin/access").text, token_id)
    assert "|revoked|" in after and "Revoke" not in after
    assert _enroll(server.url, secret, "enrol-page-3").status_code == 401


def test_admin_page_refuses_bad_enrollment_forms_naming_the_field(server: LiveServer) -> None:
    listed = httpx.get(f"{server.url}/admin/access").text.count("data-enrollment-token-id")
    for form, field in [
        ({"name": "r", "max_uses": "0", "ttl": "1d"}, "max_uses"),
        ({"name": "r", "max_uses": "many", "ttl": "1d"}, "max_uses"),
        ({"name": "r", "max_uses": "1", "ttl": "90d"}, "ttl"),
        ({"name": "  ", "max_uses": "1", "ttl": "1d"}, "name"),
    ]:
        answer = httpx.post(f"{server.url}/admin/enrollment-tokens", data=form)
        assert answer.status_code == 400, form
        error = re.search(r'id="access-error">([^<]*)<', answer.text).group(1)  # type: ignore[union-attr]
        assert error.startswith(f"{field}:"), (form, error)
    after = httpx.get(f"{server.url}/admin/access").text.count("data-enrollment-token-id")
    assert after == listed
    missing = httpx.post(f"{server.url}/admin/enrollment-tokens/999/revoke")
    assert missing.status_code == 404


def test_an_expired_enrollment_token_shows_expired(server: LiveServer, db_url: str) -> None:
    made = httpx.post(
        f"{server.url}/admin/enrollment-tokens", data={"name": "old", "max_uses": "5", "ttl": "1h"}
    )
    assert made.status_code == 201
    with session_factory(db_url) as factory, session_scope(factory) as session:
        session.execute(update(EnrollmentToken).values(expires_at=utcnow() - timedelta(seconds=1)))
    page = httpx.get(f"{server.url}/admin/access").text
    token_id = re.search(r'data-enrollment-token-id="(\d+)"', page).group(1)  # type: ignore[union-attr]
    assert "|expired|" in _row(page, token_id) and "|5 of 5|" in _row(page, token_id)


def test_cli_creates_lists_and_revokes_enrollment_tokens(server: LiveServer, db_url: str) -> None:
    made = fleetwatch(
        "enroll-token", "create", "rack-9", "--max-uses", "3", "--ttl-hours", "2",
        "--database-url", db_url,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip()
    assert secret.startswith("fwe_") and len(secret) > 40
    assert _enroll(server.url, secret, "enrol-cli-1").status_code == 201
    listed = fleetwatch("enroll-token", "list", "--database-url", db_url)
    assert listed.returncode == 0, listed.stderr
    line = listed.stdout.splitlines()[0]  # newest first (tokens outlive a test's wipe)
    token_id, name, prefix, uses, expires, state = line.split("\t")
    assert (name, prefix, uses, state) == ("rack-9", f"{secret[:12]}…", "uses=1/3", "active")
    assert secret not in listed.stdout and expires.startswith("expires=")
    gone = fleetwatch("enroll-token", "revoke", token_id, "--database-url", db_url)
    assert gone.returncode == 0 and gone.stdout.strip() == f"revoked enrollment token {token_id}"
    relisted = fleetwatch("enroll-token", "list", "--database-url", db_url).stdout
    assert relisted.splitlines()[0].endswith("\trevoked")
    assert _enroll(server.url, secret, "enrol-cli-2").status_code == 401
    trail = httpx.get(f"{server.url}/api/v1/audit?actor=cli").json()
    assert [e["action"] for e in trail] == ["enrollment_token.revoke", "enrollment_token.create"]
    assert trail[1]["detail"]["after"]["max_uses"] == 3

    empty = fleetwatch("enroll-token", "create", " ", "--database-url", db_url)
    assert empty.returncode == 1 and "name: 1-64 characters" in empty.stderr
    too_long = fleetwatch(
        "enroll-token", "create", "x", "--ttl-hours", "721", "--database-url", db_url
    )
    assert too_long.returncode == 2 and "--ttl-hours" in too_long.stderr
    unknown = fleetwatch("enroll-token", "revoke", "4242", "--database-url", db_url)
    assert unknown.returncode == 1 and "no enrollment token with id 4242" in unknown.stderr


def test_agent_tokens_are_paged_and_filtered_by_hostname(server: LiveServer, db_url: str) -> None:
    with session_factory(db_url) as factory, session_scope(factory) as session:
        for i in range(105):
            agent_tokens.create_token(session, hostname=f"page-node-{i:03d}")
        agent_tokens.create_token(session, hostname="other-Rack-7")
    page = httpx.get(f"{server.url}/admin/access").text
    assert "Agent tokens (106 live, 0 revoked)" in page
    first = re.findall(r'data-agent-token-id="\d+"><td>\d+</td><td><a href="/nodes/([^"]+)"', page)
    assert len(first) == 100 and first[0] == "other-Rack-7" and first[-1] == "page-node-006"
    older = re.search(r'id="agent-tokens-next" href="([^"]+)"', page).group(1)  # type: ignore[union-attr]
    rest = httpx.get(f"{server.url}{older.replace('&amp;', '&')}").text
    second = re.findall(r'data-agent-token-id="\d+"><td>\d+</td><td><a href="/nodes/([^"]+)"', rest)
    assert second == [f"page-node-{i:03d}" for i in range(5, -1, -1)]
    assert 'id="agent-tokens-next"' not in rest

    found = httpx.get(f"{server.url}/admin/access", params={"agent_host": "rack-7"}).text
    hosts = re.findall(r'data-agent-token-id="\d+"><td>\d+</td><td><a href="/nodes/([^"]+)"', found)
    assert hosts == ["other-Rack-7"]
    none = httpx.get(f"{server.url}/admin/access", params={"agent_host": "100%_"}).text
    assert "No agent token of a node whose hostname contains “100%_”." in none
    bad = httpx.get(f"{server.url}/admin/access", params={"agent_before": "x"})
    assert bad.status_code == 400 and "agent_before" in bad.text
