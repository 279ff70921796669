"""Enrollment tokens: an admin makes one; a new node's agent (the real ``python -m agents``)
exchanges it on first start for its own token, saved 0600 in its token file and used from
then on; expiry, use count, revocation, and never taking over a node that has a token."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import update

from app.access.roles import Role
from app.auth.models import EnrollmentToken
from app.db import session_scope, utcnow
from tests.access_helpers import add_agent_token, add_token
from tests.conftest import make_settings
from tests.dbs import session_factory, wipe
from tests.factories import wipe_alerts
from tests.live_server import LiveServer
from tests.notify_helpers import wipe_notify


@pytest.fixture
def live(postgres_url: str, tmp_path: Path) -> Iterator[tuple[LiveServer, dict[str, str]]]:
    server = LiveServer(make_settings(postgres_url, tmp_path), as_admin=False)
    server.start()
    admin = {"Authorization": f"Bearer {add_token(postgres_url, 'enrol-admin', Role.admin, None)}"}
    yield server, admin
    server.stop()
    wipe_alerts(postgres_url)
    wipe_notify(postgres_url)
    wipe(postgres_url)


def agent(
    server: LiveServer, token_file: Path, hostname: str, enroll_token: str | None
) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable,
        "-m",
        "agents",
        "--server",
        server.url,
        "--token-file",
        str(token_file),
        "--hostname",
        hostname,
        "--collector",
        "sim",
        "--sim-gpus",
        "1",
        "--once",
        "--spool-dir",
        str(token_file.parent / "spool"),
    ]
    if enroll_token:
        command += ["--enroll-token", enroll_token]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def test_a_new_node_enrolls_once_and_keeps_its_token(
    live: tuple[LiveServer, dict[str, str]], tmp_path: Path
) -> None:
    server, admin = live
    made = httpx.post(
        f"{server.url}/api/v1/enrollment-tokens",
        json={"name": "rack-12", "max_uses": 1, "ttl_s": 3600},
        headers=admin,
    )
    assert made.status_code == 201, made.text
    enroll_token = made.json()["token"]
    token_file = tmp_path / "agent" / "agent.token"
    first = agent(server, token_file, "enrol-node-1", enroll_token)
    assert first.returncode == 0, first.stderr
    assert token_file.stat().st_mode & 0o777 == 0o600
    node_token = token_file.read_text().strip()
    assert node_token.startswith("fwt_")
    nodes = httpx.get(f"{server.url}/api/v1/nodes", headers=admin).json()
    assert [n["hostname"] for n in nodes] == ["enrol-node-1"]
    # Later starts use the saved token; the enrollment token is not asked again.
    again = agent(server, token_file, "enrol-node-1", enroll_token)
    assert again.returncode == 0, again.stderr
    [row] = httpx.get(f"{server.url}/api/v1/enrollment-tokens", headers=admin).json()
    assert (row["uses"], row["max_uses"]) == (1, 1) and enroll_token not in str(row)
    # Used up: a second node is refused, with the server's reason.
    other = agent(server, tmp_path / "other" / "agent.token", "enrol-node-2", enroll_token)
    assert other.returncode == 2 and "used up" in other.stderr
    assert not (tmp_path / "other" / "agent.token").exists()
    trail = httpx.get(
        f"{server.url}/api/v1/audit", params={"action": "node.enroll"}, headers=admin
    ).json()
    assert [(e["actor"], e["target"]) for e in trail] == [
        ("enrollment:rack-12", {"hostname": "enrol-node-1"})
    ]


def test_expired_revoked_and_existing_nodes_are_refused(
    live: tuple[LiveServer, dict[str, str]], postgres_url: str
) -> None:
    server, admin = live
    made = httpx.post(
        f"{server.url}/api/v1/enrollment-tokens",
        json={"name": "batch", "max_uses": 10},
        headers=admin,
    ).json()
    auth = {"Authorization": f"Bearer {made['token']}"}
    url = f"{server.url}/api/v1/enroll"
    add_agent_token(postgres_url, "enrol-taken")
    taken = httpx.post(url, json={"hostname": "enrol-taken"}, headers=auth)
    assert taken.status_code == 409 and "cannot take over" in taken.json()["detail"]
    assert httpx.post(url, json={"hostname": "bad host"}, headers=auth).status_code == 400
    assert httpx.post(url, json={"hostname": "enrol-ok"}, headers=auth).status_code == 201
    assert httpx.post(url, json={"hostname": "enrol-x"}).status_code == 401
    with session_factory(postgres_url) as factory, session_scope(factory) as session:
        session.execute(update(EnrollmentToken).values(expires_at=utcnow() - timedelta(seconds=1)))
    expired = httpx.post(url, json={"hostname": "enrol-late"}, headers=auth)
    assert expired.status_code == 401 and "expired" in expired.json()["detail"]
    fresh = httpx.post(
        f"{server.url}/api/v1/enrollment-tokens", json={"name": "b2"}, headers=admin
    ).json()
    assert (
        httpx.post(
            f"{server.url}/api/v1/enrollment-tokens/{fresh['id']}/revoke", headers=admin
        ).status_code
        == 200
    )
    revoked = httpx.post(
        url, json={"hostname": "enrol-rev"}, headers={"Authorization": f"Bearer {fresh['token']}"}
    )
    assert revoked.status_code == 401
    # Only admins make enrollment tokens.
    viewer = {
        "Authorization": f"Bearer {add_token(postgres_url, 'enrol-viewer', Role.viewer, None)}"
    }
    assert (
        httpx.post(
            f"{server.url}/api/v1/enrollment-tokens", json={"name": "x"}, headers=viewer
        ).status_code
        == 403
    )
