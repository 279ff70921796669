"""One bad GPU sample value or one bad event is left out alone, with its path and reason; the
rest of the batch is stored (issue 14). Once, a power reading sent as ``"12,5"`` (a locale's
decimal comma) or an Xid line whose code did not parse refused the whole batch with 422, and
the node's healthy readings went with it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select

from app.db import make_engine
from app.events.models import NodeEvent
from tests.app.helpers import counts, post_batch, stored_samples
from tests.app.metrics_helpers import scrape, value
from tests.factories import batch, create_token, iso
from tests.live_server import LiveServer

LEFT_OUT = 'fleetwatch_ingest_values_left_out_total{list="%s",reason="%s"}'
SAMPLES_INVALID = 'fleetwatch_ingest_samples_rejected_total{reason="invalid"}'
EVENTS_INVALID = 'fleetwatch_ingest_events_rejected_total{reason="invalid"}'


def _events(url: str) -> list[tuple[Any, ...]]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            query = select(NodeEvent.kind, NodeEvent.xid, NodeEvent.message, NodeEvent.test)
            return [tuple(row) for row in conn.execute(query.order_by(NodeEvent.id))]
    finally:
        engine.dispose()


def test_a_sample_value_that_is_not_a_number_is_nulled_and_the_rest_stored(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    payload = batch(gpus=2, samples_per_gpu=3)
    payload["samples"][1]["power_w"] = "12,5"  # a locale's decimal comma
    payload["samples"][4]["temp_c"] = True
    payload["samples"][5]["sm_clock_mhz"] = {"value": 1755}
    before = scrape(server.url)

    response = post_batch(server.url, token, payload)

    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["samples_received"] == 6 and answer["samples_stored"] == 6
    assert answer["samples_rejected"] == 0
    assert answer["nulled_values"] == {"power_w": 1, "temp_c": 1, "sm_clock_mhz": 1}
    assert answer["left_out"] == [
        {"loc": ["samples", 1, "power_w"], "reason": "number_type", "action": "nulled"},
        {"loc": ["samples", 4, "temp_c"], "reason": "number_type", "action": "nulled"},
        {"loc": ["samples", 5, "sm_clock_mhz"], "reason": "number_type", "action": "nulled"},
    ]
    assert answer["left_out_by_reason"] == {"samples.number_type": 3}
    rows = stored_samples(db_url)
    assert [r["power_w"] for r in rows] == [350.5, None, 350.5, 350.5, 350.5, 350.5]
    assert [r["temp_c"] for r in rows] == [55, 55, 55, 55, None, 55]
    assert [r["sm_clock_mhz"] for r in rows] == [1755, 1755, 1755, 1755, 1755, None]
    assert {r["util_gpu_pct"] for r in rows} == {50}
    assert {r["mem_used_bytes"] for r in rows} == {40 * 2**30}

    after = scrape(server.url)
    series = LEFT_OUT % ("samples", "number_type")
    assert (value(after, series) or 0) - (value(before, series) or 0) == 3

    again = post_batch(server.url, token, payload).json()
    assert again["replayed"] is True
    assert again["left_out"] == answer["left_out"]
    assert value(scrape(server.url), series) == value(after, series)  # a replay counts nothing


def test_a_sample_without_a_usable_gpu_or_time_is_left_out_by_its_index_as_sent(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    payload = batch(gpus=2, samples_per_gpu=3)
    uuid_1 = payload["gpus"][1]["uuid"]
    payload["samples"][1]["gpu_uuid"] = 7
    payload["samples"][3]["sampled_at"] = "29/11/2026 16:00"
    payload["samples"][5]["sampled_at"] = iso(datetime.now(UTC) + timedelta(days=1))
    payload["samples"].append("not a sample")
    before = value(scrape(server.url), SAMPLES_INVALID) or 0

    response = post_batch(server.url, token, payload)

    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["samples_received"] == 7
    assert answer["samples_stored"] == 3
    assert answer["samples_rejected"] == 4
    assert answer["rejected_by_reason"] == {"invalid": 3, "sampled_at_in_future": 1}
    assert answer["rejections"] == [
        {"index": 1, "gpu_uuid": "", "reason": "invalid"},
        {"index": 3, "gpu_uuid": uuid_1, "reason": "invalid"},
        {"index": 5, "gpu_uuid": uuid_1, "reason": "sampled_at_in_future"},
        {"index": 6, "gpu_uuid": "", "reason": "invalid"},
    ]
    assert answer["left_out"] == [
        {"loc": ["samples", 1, "gpu_uuid"], "reason": "string_type", "action": "entry_left_out"},
        {"loc": ["samples", 3, "sampled_at"], "reason": "datetime_from_date_parsing",
         "action": "entry_left_out"},
        {"loc": ["samples", 6], "reason": "model_type", "action": "entry_left_out"},
    ]  # fmt: skip
    kept = [payload["samples"][i]["sampled_at"] for i in (0, 2, 4)]
    rows = stored_samples(db_url)
    assert [iso(r["sampled_at"].replace(tzinfo=UTC)) for r in rows] == kept
    assert value(scrape(server.url), SAMPLES_INVALID) == before + 3


def test_a_bad_event_is_left_out_with_its_reason_and_the_others_stored(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    now = iso(datetime.now(UTC) - timedelta(seconds=5))
    message = "NVRM: Xid (PCI:0000:18:00): 79, pid=1234, GPU has fallen off the bus."
    events: list[Any] = [
        {"occurred_at": now, "kind": "xid", "xid": "79, pid=1234", "message": message},
        {"occurred_at": now, "kind": "xid", "xid": 79, "message": message},
        {"occurred_at": "yesterday", "kind": "xid", "xid": 13},
        {"occurred_at": now, "kind": "Xid Error", "xid": 31},
        {"occurred_at": now, "kind": "xid", "xid": 48, "test": "yes"},
        {"occurred_at": now, "kind": "xid", "xid": 63, "pci_bus_id": "0000:18:00.0\u202e"},
        42,
        {"occurred_at": now, "kind": "gpu_lost", "message": "GPU 0000:3b:00.0 lost"},
    ]
    before = scrape(server.url)

    response = post_batch(server.url, token, batch(events=events))

    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["samples_stored"] == 6
    assert answer["events_stored"] == 2
    assert answer["events_rejected"] == {"invalid": 6}
    assert [(e["loc"], e["reason"], e["action"]) for e in answer["left_out"]] == [
        (["events", 0, "xid"], "int_type", "entry_left_out"),
        (["events", 2, "occurred_at"], "datetime_from_date_parsing", "entry_left_out"),
        (["events", 3, "kind"], "string_pattern_mismatch", "entry_left_out"),
        (["events", 4, "test"], "bool_type", "entry_left_out"),
        (["events", 5, "pci_bus_id"], "value_error", "entry_left_out"),
        (["events", 6], "model_type", "entry_left_out"),
    ]
    assert answer["left_out_by_reason"] == {
        "events.int_type": 1,
        "events.datetime_from_date_parsing": 1,
        "events.string_pattern_mismatch": 1,
        "events.bool_type": 1,
        "events.value_error": 1,
        "events.model_type": 1,
    }
    assert _events(db_url) == [
        ("xid", 79, message, False),
        ("gpu_lost", None, "GPU 0000:3b:00.0 lost", False),
    ]
    after = scrape(server.url)
    assert (value(after, EVENTS_INVALID) or 0) - (value(before, EVENTS_INVALID) or 0) == 6
    series = LEFT_OUT % ("events", "int_type")
    assert (value(after, series) or 0) - (value(before, series) or 0) == 1


@pytest.mark.parametrize(
    ("change", "loc"),
    [
        (lambda p: p.update(samples={"not": "a list"}), ["body", "samples"]),
        (lambda p: p.update(events="Xid 79"), ["body", "events"]),
        (lambda p: p["node"].update(hostname="node a"), ["body", "node", "hostname"]),
        (lambda p: p.update(sent_at="now"), ["body", "sent_at"]),
        (lambda p: p.pop("batch_id"), ["body", "batch_id"]),
    ],
)
def test_what_is_not_a_batch_is_still_refused_whole_naming_the_field(
    server: LiveServer, db_url: str, change: Any, loc: list[Any]
) -> None:
    token = create_token(db_url, "node-a")
    payload = batch(gpus=2, samples_per_gpu=2)
    payload["samples"][0]["power_w"] = "12,5"  # would be left out in a readable batch
    change(payload)

    response = post_batch(server.url, token, payload)

    assert response.status_code == 422, response.text
    assert loc in [err["loc"] for err in response.json()["detail"]]
    assert counts(db_url) == {"samples": 0, "events": 0, "batches": 0}
