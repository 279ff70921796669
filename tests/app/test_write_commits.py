"""Writes are committed before the response is sent: a client reading right after its POST
sees its change (Postgres and SQLite, real HTTP server), and every write route's yield
dependencies run their teardown (the commit) before the response (``scope="function"``)."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute

from app.db import get_session
from app.main import create_app
from tests.conftest import make_settings
from tests.factories import iso, wipe_alerts
from tests.live_server import LiveServer

HOT = {"kind": "threshold", "target": "gpu", "metric": "temp_c", "op": ">", "threshold": 85}
WRITES = {"POST", "PUT", "PATCH", "DELETE"}


def test_a_post_is_seen_by_the_get_right_after_it(server: LiveServer, db_url: str) -> None:
    api = f"{server.url}/api/v1"
    ends = iso(datetime.now(UTC) + timedelta(hours=1))
    try:
        with httpx.Client(timeout=30) as client:
            for i in range(10):
                silence = client.post(
                    f"{api}/silences",
                    json={
                        "matchers": [{"name": "hostname", "op": "=", "value": f"n{i}"}],
                        "ends_at": ends,
                        "created_by": "alice",
                    },
                )
                assert silence.status_code == 201, silence.text
                listed = [s["id"] for s in client.get(f"{api}/silences").json()]
                assert silence.json()["id"] in listed

                rule = client.post(f"{api}/rules", json={"name": f"hot-{i}", "condition": HOT})
                assert rule.status_code == 201, rule.text
                assert client.get(f"{api}/rules/hot-{i}").status_code == 200
    finally:
        wipe_alerts(db_url)


def _generator_dependencies(dependant: Dependant) -> Iterator[Dependant]:
    for dep in dependant.dependencies:
        if inspect.isgeneratorfunction(dep.call) or inspect.isasyncgenfunction(dep.call):
            yield dep
        yield from _generator_dependencies(dep)


def _api_routes(routes: list[BaseRoute]) -> Iterator[APIRoute]:
    """Every APIRoute, also inside included routers (FastAPI 0.16x keeps them nested)."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        nested = getattr(route, "original_router", None)
        if nested is not None:
            yield from _api_routes(nested.routes)


def test_every_write_route_commits_before_it_responds(sqlite_url: str, tmp_path: Path) -> None:
    app = create_app(make_settings(sqlite_url, tmp_path), run_jobs=False)
    checked: list[str] = []
    late: list[str] = []
    for route in _api_routes(app.routes):
        if not route.methods & WRITES:
            continue
        for dep in _generator_dependencies(route.dependant):
            if dep.call is get_session:
                continue  # read-only session: nothing to commit
            checked.append(route.path)
            if dep.scope != "function":
                late.append(f"{sorted(route.methods)} {route.path}: {dep.call.__name__}")

    assert late == []
    assert {
        "/api/v1/silences",
        "/api/v1/rules",
        "/runbooks/{name}/edit",
        "/notify/ack/{token}",
    } <= set(checked), checked
