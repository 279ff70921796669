"""Ingest behaviour found by trying to break it: ownership of GPUs, missing GPUs, batch id reuse,
event times, text that databases and browsers choke on, and JSON edge cases."""

from __future__ import annotations

import gzip
import json
import logging
import socket
import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from tests.app.helpers import counts, post_batch
from tests.factories import batch, create_token, gpu, iso
from tests.live_server import LiveServer


def test_a_token_cannot_take_over_another_nodes_gpus_and_history(
    server: LiveServer, db_url: str
) -> None:
    token_a, token_b = create_token(db_url, "node-a"), create_token(db_url, "node-b")
    shared = gpu(0, hostname="node-a")
    assert post_batch(server.url, token_a, batch("node-a", gpus=[shared])).status_code == 200
    stolen = batch("node-b", gpus=[dict(shared, name="STOLEN")])
    body = post_batch(server.url, token_b, stolen).json()
    assert body["gpu_conflicts"] == [{"uuid": shared["uuid"], "node": "node-a"}]
    assert body["samples_stored"] == 0
    assert body["rejected_by_reason"] == {"unknown_gpu": 3}
    node_a = httpx.get(f"{server.url}/api/v1/nodes/node-a").json()
    assert [g["name"] for g in node_a["gpus"]] == ["NVIDIA H100 80GB HBM3"]
    assert httpx.get(f"{server.url}/api/v1/nodes/node-b").json()["gpus"] == []


def test_a_gpu_that_leaves_the_inventory_is_marked_missing(server: LiveServer, db_url: str) -> None:
    token = create_token(db_url, "node-a")
    post_batch(server.url, token, batch(gpus=2))
    body = post_batch(server.url, token, batch(gpus=[gpu(0)])).json()
    assert body["gpus_missing"] == [gpu(1)["uuid"]]
    node = httpx.get(f"{server.url}/api/v1/nodes/node-a").json()
    assert [g["state"] for g in node["gpus"]] == ["ok", "missing"]
    assert node["gpus_not_ok"] == 1
    assert "not in the agent's GPU list" in node["gpus"][1]["state_reason"]


def test_a_batch_id_reused_for_other_content_is_a_409_and_stores_nothing(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    first = batch(samples_per_gpu=1, batch_id="reuse-1")
    assert post_batch(server.url, token, first).status_code == 200
    resent = dict(first, sent_at=iso(datetime.now(UTC)))  # a faithful re-send: new sent_at only
    assert post_batch(server.url, token, resent).json()["replayed"] is True
    before = counts(db_url)
    other = batch(samples_per_gpu=2, batch_id="reuse-1")
    response = post_batch(server.url, token, other)
    assert response.status_code == 409
    assert "reuse-1" in response.json()["detail"]
    assert counts(db_url) == before


def test_events_from_the_future_or_past_retention_are_rejected_and_counted(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    now = datetime.now(UTC)
    events = [
        {"occurred_at": iso(now + timedelta(days=3)), "kind": "xid", "xid": 79},
        {"occurred_at": iso(now - timedelta(days=400)), "kind": "xid", "xid": 79},
        {"occurred_at": iso(now), "kind": "xid", "xid": 79},
    ]
    body = post_batch(server.url, token, batch(events=events)).json()
    assert body["events_stored"] == 1
    assert body["events_rejected"] == {"occurred_at_in_future": 1, "older_than_retention": 1}


def test_nul_and_lone_surrogates_in_free_text_are_replaced_not_a_500(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    g = gpu(0, name="H100\u0000")
    event = {"occurred_at": iso(datetime.now(UTC)), "kind": "xid", "message": "bad \udc80 \u0000"}
    raw = json.dumps(batch(gpus=[g], events=[event]))  # json escapes the surrogate as \\udc80
    response = post_batch(server.url, token, raw.encode())
    assert response.status_code == 200, response.text
    node = httpx.get(f"{server.url}/api/v1/nodes/node-a").json()
    assert node["gpus"][0]["name"] == "H100\ufffd"


@pytest.mark.parametrize("value", ["x\u202ey", "tab\there", "rlm\u200f", "bom\ufeff"])
def test_labels_with_control_or_bidi_characters_are_never_stored(
    server: LiveServer, db_url: str, value: str
) -> None:
    """The label is left out and counted; the batch is stored (issue 14: one bad value never
    takes the batch)."""
    token = create_token(db_url, "node-a")
    response = post_batch(server.url, token, batch(labels={"team": value, "rack": "r01"}))
    assert response.status_code == 200, response.text
    assert response.json()["nulled_values"] == {"node.labels": 1}
    node = httpx.get(f"{server.url}/api/v1/nodes/node-a").json()
    assert node["labels"] == {"rack": "r01"}


def test_the_hostname_matches_its_token_without_regard_to_case(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    assert post_batch(server.url, token, batch("NODE-A")).status_code == 200


@pytest.mark.parametrize(
    ("mutation", "loc"),
    [
        ({"schema_version": True}, ["body", "schema_version"]),
        ({"schema_version": 1.0}, ["body", "schema_version"]),
        ({"sent_at": 1764432000}, ["body", "sent_at"]),
    ],
)
def test_loose_values_are_refused_with_422_at_the_field(
    server: LiveServer, db_url: str, mutation: dict[str, object], loc: list[object]
) -> None:
    token = create_token(db_url, "node-a")
    response = post_batch(server.url, token, batch(samples_per_gpu=0, **mutation))
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == loc


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"[" * 5000 + b"]" * 5000, "nested too deeply"),
        (b'{"a": ' + b"1" * 5000 + b"}", "digits"),
        (b'{"schema_version": 1, "schema_version": 1}', "appears twice"),
    ],
)
def test_pathological_json_gets_400_not_500(
    server: LiveServer, db_url: str, body: bytes, message: str
) -> None:
    token = create_token(db_url, "node-a")
    response = post_batch(server.url, token, body)
    assert response.status_code == 400
    assert message in response.json()["detail"]


def test_a_gzip_body_in_two_members_is_read_whole_and_trailing_garbage_refused(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    text = json.dumps(batch(samples_per_gpu=1)).encode()
    two_members = gzip.compress(text[:50]) + gzip.compress(text[50:])
    response = post_batch(server.url, token, two_members, Content_Encoding="gzip")
    assert response.status_code == 200, response.text
    garbage = gzip.compress(json.dumps(batch()).encode()) + b"junk"
    response = post_batch(server.url, token, garbage, Content_Encoding="gzip")
    assert response.status_code == 400
    assert "after the end of the gzip stream" in response.json()["detail"]


def test_an_event_time_at_the_edge_of_the_calendar_leaves_the_event_out_not_a_500(
    server: LiveServer, db_url: str
) -> None:
    """The event is left out naming its field (issue 14: once the whole batch got 422)."""
    token = create_token(db_url, "node-a")
    for stamp in ("0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"):
        event = {"occurred_at": stamp, "kind": "xid"}
        response = post_batch(server.url, token, batch(events=[event]))
        assert response.status_code == 200, stamp
        answer = response.json()
        assert answer["events_stored"] == 0 and answer["events_rejected"] == {"invalid": 1}
        assert answer["left_out"][0]["loc"] == ["events", 0, "occurred_at"]
    assert counts(db_url)["events"] == 0


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/nodes/%00",
        "/api/v1/nodes/%00/samples",
        "/api/v1/nodes?q=%00",
        "/nodes/%00",
        "/?q=%00",
        "/fleet/_nodes?q=%00",
        "/alerts?a%00b=1",
    ],
)
def test_a_nul_in_the_url_gets_400_not_a_database_error(server: LiveServer, path: str) -> None:
    response = httpx.get(f"{server.url}{path}")
    assert response.status_code == 400
    assert "NUL" in response.text


def test_nul_and_surrogates_in_any_section_string_are_replaced_not_a_500(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    now = iso(datetime.now(UTC))
    payload = batch(
        disks=[{"sampled_at": now, "device": "sd\u0000"}],
        collection={"collector": "nvml\u0000", "errors": []},
        topology={
            "collected_at": now,
            "source": "nvml",
            "errors": ["\udc80"],
            "devices": [],
            "links": [],
        },
    )
    raw = json.dumps(payload)
    response = post_batch(server.url, token, raw.encode())
    assert response.status_code == 200, response.text
    storage = httpx.get(f"{server.url}/api/v1/nodes/node-a/storage").json()
    assert storage["disks"][0]["device"] == "sd\ufffd"


def test_a_lost_gpu_keeping_its_index_while_nvml_renumbers_the_rest_is_accepted(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    lost = gpu(0, state="lost", state_reason="GPU_IS_LOST")
    renumbered = dict(gpu(1), index=0)
    response = post_batch(server.url, token, batch(gpus=[lost, renumbered], samples_per_gpu=1))
    assert response.status_code == 200, response.text


def test_an_agent_that_hangs_up_mid_body_costs_one_log_line_and_stores_nothing(
    server: LiveServer, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    token = create_token(db_url, "node-gone")
    head = (
        "POST /api/v1/ingest HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {token}\r\nContent-Length: 100000\r\n\r\n"
    )
    caplog.set_level(logging.INFO)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(head.encode() + b'{"schema_version": 1, "batch_id": ')
        time.sleep(0.5)  # the server is reading the body when the agent hangs up

    def logged() -> bool:
        return any("client went away after" in r.getMessage() for r in caplog.records)

    deadline = time.monotonic() + 10
    while not logged() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert logged()
    assert not [r for r in caplog.records if r.exc_info and r.levelno >= logging.ERROR]
    assert counts(db_url)["batches"] == 0
    assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200


def test_thousands_of_digits_inside_a_string_are_text_not_a_500(
    server: LiveServer, db_url: str
) -> None:
    """Found by fuzzing the ingest body (issue 14): the check for integers wider than 64 bits
    read a 5,000-digit run inside an event message as a number and int() raised (500)."""
    token = create_token(db_url, "node-a")
    message = "NVRM: Xid " + "7" * 5000
    event = {"occurred_at": iso(datetime.now(UTC)), "kind": "xid", "message": message}
    response = post_batch(server.url, token, batch(events=[event]))
    assert response.status_code == 200, response.text
    assert response.json()["events_stored"] == 1
