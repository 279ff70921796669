"""Access decisions hold under a path prefix: an app served with an ASGI ``root_path``
(``uvicorn --root-path /fleetwatch`` behind a proxy that strips the prefix; uvicorn puts it back
in the scope's ``path``) is matched to its routes the way the router matches them (the path
less the root path), so a prefixed path is never an unchecked one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from app.access.models import User
from app.access.roles import Role
from app.db import session_scope
from tests.access_helpers import add_token
from tests.conftest import make_settings
from tests.dbs import session_factory
from tests.live_server import LiveServer

PREFIX = "/fleetwatch"


@pytest.fixture
def prefixed(db_url: str, tmp_path: Path) -> Iterator[httpx.Client]:
    server = LiveServer(make_settings(db_url, tmp_path), as_admin=False, root_path=PREFIX)
    server.start()
    with httpx.Client(base_url=server.url) as client:
        yield client
    server.stop()


def test_a_path_under_the_root_path_is_checked_like_the_route_it_reaches(
    prefixed: httpx.Client, db_url: str
) -> None:
    nodes = prefixed.get("/api/v1/nodes")
    assert nodes.status_code == 401, nodes.text
    page = prefixed.get("/admin/access", follow_redirects=False)
    assert page.status_code == 303
    created = prefixed.post(
        "/api/v1/users", json={"name": "intruder", "role": "admin", "password": "x" * 20}
    )
    assert created.status_code == 401, created.text
    with session_factory(db_url) as factory, session_scope(factory) as session:
        assert session.scalars(select(User.name).where(User.name == "intruder")).all() == []
    viewer = add_token(db_url, "wall", Role.viewer, None)
    read = prefixed.get("/api/v1/nodes", headers={"Authorization": f"Bearer {viewer}"})
    assert read.status_code == 200, read.text
    users = prefixed.get("/api/v1/users", headers={"Authorization": f"Bearer {viewer}"})
    assert users.status_code == 403, users.text
