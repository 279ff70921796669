"""Every kind of bad ingest request gets its status code and a message naming the problem, and
leaves the stored data exactly as it was."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.app.helpers import counts, post_batch, stored_samples
from tests.conftest import make_settings
from tests.factories import batch, create_token
from tests.live_server import LiveServer

LIMIT = 64 * 1024


@pytest.fixture
def small_server(db_url: str, tmp_path: Path) -> Iterator[LiveServer]:
    """A server with a 64 KiB ingest limit."""
    live = LiveServer(make_settings(db_url, tmp_path, ingest_max_bytes=LIMIT))
    live.start()
    yield live
    live.stop()


@pytest.fixture
def seeded(small_server: LiveServer, db_url: str) -> tuple[LiveServer, str, dict[str, Any]]:
    """A server with node-a's token and one accepted batch; returns (server, token, snapshot)."""
    token = create_token(db_url, "node-a")
    assert post_batch(small_server.url, token, batch(samples_per_gpu=2)).status_code == 200
    return small_server, token, {"counts": counts(db_url), "rows": stored_samples(db_url)}


def assert_unchanged(db_url: str, snapshot: dict[str, Any]) -> None:
    assert counts(db_url) == snapshot["counts"]
    assert stored_samples(db_url) == snapshot["rows"]


@pytest.mark.parametrize(
    ("authorization", "message"),
    [
        (None, "missing Authorization header"),
        ("Basic dXNlcjpwYXNz", "must be 'Bearer <node token>'"),
        ("Bearer", "must be 'Bearer <node token>'"),
        ("Bearer fwt_not-a-real-token", "unknown or revoked node token"),
    ],
)
def test_missing_or_wrong_credentials_get_401(
    seeded: tuple[LiveServer, str, dict[str, Any]],
    db_url: str,
    authorization: str | None,
    message: str,
) -> None:
    server, _, snapshot = seeded
    headers = {"Authorization": authorization} if authorization else {}
    response = post_batch(server.url, None, batch(), **headers)
    assert response.status_code == 401
    assert message in response.json()["detail"]
    assert response.headers["www-authenticate"] == "Bearer"
    assert_unchanged(db_url, snapshot)


def test_a_revoked_token_gets_401(
    seeded: tuple[LiveServer, str, dict[str, Any]], db_url: str
) -> None:
    from app.auth import service as auth_service
    from app.db import make_engine, make_session_factory, session_scope

    server, token, snapshot = seeded
    engine = make_engine(db_url)
    with session_scope(make_session_factory(engine)) as session:
        auth_service.revoke_tokens(session, hostname="node-a")
    engine.dispose()
    response = post_batch(server.url, token, batch())
    assert response.status_code == 401
    assert_unchanged(db_url, snapshot)


def test_a_token_of_another_node_gets_403(
    seeded: tuple[LiveServer, str, dict[str, Any]], db_url: str
) -> None:
    server, token, snapshot = seeded
    response = post_batch(server.url, token, batch("node-b"))
    assert response.status_code == 403
    assert "node-b" in response.json()["detail"]
    assert_unchanged(db_url, snapshot)


def test_a_body_over_the_limit_gets_413(
    seeded: tuple[LiveServer, str, dict[str, Any]], db_url: str
) -> None:
    server, token, snapshot = seeded
    response = post_batch(server.url, token, batch(gpus=8, samples_per_gpu=100))
    assert response.status_code == 413
    assert "limit" in response.json()["detail"]
    assert_unchanged(db_url, snapshot)


def test_a_gzip_bomb_over_the_limit_once_inflated_gets_413(
    seeded: tuple[LiveServer, str, dict[str, Any]], db_url: str
) -> None:
    server, token, snapshot = seeded
    payload = batch()
    payload["padding"] = " " * (LIMIT * 20)
    body = gzip.compress(json.dumps(payload).encode())
    assert len(body) < LIMIT
    response = post_batch(server.url, token, body, Content_Encoding="gzip")
    assert response.status_code == 413
    assert "decompressed" in response.json()["detail"]
    assert_unchanged(db_url, snapshot)


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({"Content-Type": "text/plain"}, "Content-Type must be application/json"),
        ({"Content-Type": "application/x-www-form-urlencoded"}, "Content-Type must be"),
        ({"Content-Type": "application/json; charset=latin-1"}, "charset must be utf-8"),
        ({"Content-Encoding": "br"}, "Content-Encoding must be gzip"),
    ],
)
def test_wrong_content_types_and_encodings_get_415(
    seeded: tuple[LiveServer, str, dict[str, Any]],
    db_url: str,
    headers: dict[str, str],
    message: str,
) -> None:
    server, token, snapshot = seeded
    response = post_batch(
        server.url, token, batch(), **{k.replace("-", "_"): v for k, v in headers.items()}
    )
    assert response.status_code == 415
    assert message in response.json()["detail"]
    assert_unchanged(db_url, snapshot)


@pytest.mark.parametrize(
    ("body", "encoding", "message"),
    [
        (b"plainly not gzip data", "gzip", "not valid gzip"),
        (gzip.compress(b'{"schema_version": 1')[:-6], "gzip", "gzip"),
        (b'{"schema_version": 1,', None, "not valid JSON"),
        (b"\xff\xfe{}", None, "not valid UTF-8"),
        (b"", None, "empty body"),
    ],
)
def test_unreadable_bodies_get_400(
    seeded: tuple[LiveServer, str, dict[str, Any]],
    db_url: str,
    body: bytes,
    encoding: str | None,
    message: str,
) -> None:
    server, token, snapshot = seeded
    extra = {"Content_Encoding": encoding} if encoding else {}
    response = post_batch(server.url, token, body, **extra)
    assert response.status_code == 400
    assert message in response.json()["detail"]
    assert_unchanged(db_url, snapshot)


def _mutate(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    payload = batch()
    target: Any = payload
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return payload


@pytest.mark.parametrize(
    ("path", "value", "loc"),
    [
        (("schema_version",), 2, ["body", "schema_version"]),
        (("batch_id",), "", ["body", "batch_id"]),
        (("batch_id",), "has spaces in it", ["body", "batch_id"]),
        (("sent_at",), "2026-11-29T16:00:00", ["body", "sent_at"]),
        (("node", "hostname"), "bad host!", ["body", "node", "hostname"]),
        (("node", "labels"), ["rack"], ["body", "node", "labels"]),
        (("gpus",), {"uuid": "GPU-1"}, ["body", "gpus"]),
        (("samples",), {"not": "a list"}, ["body", "samples"]),
        (("events",), "Xid 79", ["body", "events"]),
    ],
)
def test_a_malformed_batch_gets_422_naming_the_field(
    seeded: tuple[LiveServer, str, dict[str, Any]],
    db_url: str,
    path: tuple[Any, ...],
    value: Any,
    loc: list[Any],
) -> None:
    server, token, snapshot = seeded
    response = post_batch(server.url, token, _mutate(path, value))
    assert response.status_code == 422, response.text
    assert loc in [err["loc"] for err in response.json()["detail"]]
    assert_unchanged(db_url, snapshot)


def test_a_json_document_that_is_not_an_object_gets_422(
    seeded: tuple[LiveServer, str, dict[str, Any]], db_url: str
) -> None:
    server, token, snapshot = seeded
    response = post_batch(server.url, token, b"[1, 2, 3]")
    assert response.status_code == 422
    assert_unchanged(db_url, snapshot)
