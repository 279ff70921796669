"""Ingest's bulk path (plain-loop validation, COPY on Postgres, executemany on SQLite): exact
counts for duplicates, rejections and nulled values, on both backends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from app.db import make_engine
from app.fleet.models import Gpu
from tests.app import section_factories as sections
from tests.app.helpers import counts, post_batch, section_counts, stored_samples
from tests.factories import batch, create_token, gpu, iso, sample
from tests.live_server import LiveServer


def _newest_sample_per_gpu(url: str) -> dict[str, datetime | None]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return {uuid: at for uuid, at in conn.execute(select(Gpu.uuid, Gpu.last_sample_at))}
    finally:
        engine.dispose()


def test_duplicates_within_and_across_batches_are_counted_exactly(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    first = batch(samples_per_gpu=3)
    original = list(first["samples"])
    first["samples"] = [*original, original[0], original[4]]
    body = post_batch(server.url, token, first).json()
    assert (body["samples_stored"], body["samples_duplicate"]) == (6, 2)

    gpus = first["gpus"]
    later = datetime.now(UTC) - timedelta(seconds=2)
    second = batch(gpus=gpus, samples_per_gpu=0)
    second["samples"] = [*original[:3], sample(gpus[0], later), sample(gpus[1], later)]
    body = post_batch(server.url, token, second).json()
    assert (body["samples_stored"], body["samples_duplicate"]) == (2, 3)
    assert body["samples_received"] == 5
    assert counts(db_url)["samples"] == 8
    newest = _newest_sample_per_gpu(db_url)
    assert newest[gpus[0]["uuid"]] == later
    assert newest[gpus[1]["uuid"]] == later


def test_a_batch_mixing_good_and_bad_rows_stores_the_good_ones_and_counts_the_rest(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    now = datetime.now(UTC)
    good = gpu(0)
    payload = batch(gpus=[good], samples_per_gpu=0)
    payload["samples"] = [
        sample(good, now - timedelta(seconds=30)),
        sample(good, now - timedelta(seconds=20), util_gpu_pct=150, pstate=2.5, temp_c=None),
        sample(gpu(7), now - timedelta(seconds=20)),  # not in the inventory
        sample(good, now + timedelta(hours=1)),
        sample(good, now - timedelta(days=400)),
        sample(good, now - timedelta(seconds=10), clocks_event_reasons=4.0, power_w=-1),
        sample(good, now - timedelta(seconds=30), util_gpu_pct=1),  # a repeat: first one kept
    ]
    body = post_batch(server.url, token, payload).json()
    assert body["samples_stored"] == 3
    assert body["samples_duplicate"] == 1
    assert body["samples_rejected"] == 3
    assert body["rejected_by_reason"] == {
        "unknown_gpu": 1,
        "sampled_at_in_future": 1,
        "older_than_retention": 1,
    }
    assert [(r["index"], r["reason"]) for r in body["rejections"]] == [
        (2, "unknown_gpu"),
        (3, "sampled_at_in_future"),
        (4, "older_than_retention"),
    ]
    assert body["nulled_values"] == {"util_gpu_pct": 1, "pstate": 1, "power_w": 1}
    rows = stored_samples(db_url)
    assert [r["util_gpu_pct"] for r in rows] == [50, None, 50]
    assert [r["pstate"] for r in rows] == [0, None, 0]
    assert rows[1]["temp_c"] is None
    assert rows[2]["clocks_event_reasons"] == 4
    assert isinstance(rows[2]["clocks_event_reasons"], int)
    assert rows[2]["power_w"] is None


def test_section_entries_repeated_within_and_across_batches_are_stored_once(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    at = datetime.now(UTC) - timedelta(seconds=30)
    payload = sections.with_sections(batch(gpus=2, samples_per_gpu=1), at)
    payload["disks"] = [*payload["disks"], sections.disk(at, "nvme0n1", busy_pct=250.0)]
    payload["nic_ports"] = [*payload["nic_ports"], sections.nic_port(at, "mlx5_9", rate_gbps=-5)]
    body = post_batch(server.url, token, payload).json()
    assert body["sections_stored"] == {
        "nvlinks": 36,
        "disks": 2,
        "mounts": 2,
        "nfs_mounts": 1,
        "nic_ports": 3,
    }
    # The repeated disk reading is judged (its busy_pct nulled and counted) before it is skipped.
    assert body["nulled_values"] == {"disks.busy_pct": 1, "nic_ports.rate_gbps": 1}

    again = dict(payload, batch_id="another-batch")
    later = at + timedelta(seconds=10)
    again["disks"] = [*payload["disks"], sections.disk(later, "nvme0n1")]
    body = post_batch(server.url, token, again).json()
    assert body["sections_stored"] == {
        "nvlinks": 0,
        "disks": 1,
        "mounts": 0,
        "nfs_mounts": 0,
        "nic_ports": 0,
    }
    stored = section_counts(db_url)
    assert stored["nvlink_sample"] == 36
    assert stored["disk_sample"] == 3
    assert stored["nic_port_sample"] == 3


def test_a_bad_entry_deep_in_a_bulk_list_is_left_out_naming_its_field(
    server: LiveServer, db_url: str
) -> None:
    """Issue 14: once the whole batch was refused with 422 for these three values."""
    token = create_token(db_url, "node-a")
    at = datetime.now(UTC) - timedelta(seconds=30)
    payload = sections.with_sections(batch(gpus=2, samples_per_gpu=3), at)
    payload["samples"][4]["util_gpu_pct"] = "busy"
    payload["nvlinks"][7]["link"] = True
    payload["mounts"][1]["sampled_at"] = "yesterday"
    response = post_batch(server.url, token, payload)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert [item["loc"] for item in answer["left_out"]] == [
        ["samples", 4, "util_gpu_pct"],
        ["nvlinks", 7, "link"],
        ["mounts", 1, "sampled_at"],
    ]
    assert answer["nulled_values"] == {"util_gpu_pct": 1}
    assert answer["sections_rejected"] == {"nvlinks.invalid": 1, "mounts.invalid": 1}
    assert counts(db_url)["samples"] == 6
    assert section_counts(db_url)["nvlink_sample"] == 35


def test_a_replay_of_a_batch_with_sections_answers_identically(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    at = datetime.now(UTC) - timedelta(seconds=30)
    payload = sections.with_sections(batch(gpus=2, samples_per_gpu=2), at)
    payload["samples"][0]["avg_power_w"] = 1e-05  # an unknown key, and a float orjson spells
    first = post_batch(server.url, token, payload, gzip_body=True).json()
    resent = dict(payload, sent_at=iso(datetime.now(UTC)))
    second = post_batch(server.url, token, resent).json()
    assert second["replayed"] is True
    assert {k: v for k, v in second.items() if k != "replayed"} == {
        k: v for k, v in first.items() if k != "replayed"
    }
    changed = dict(payload, samples=payload["samples"][1:])
    assert post_batch(server.url, token, changed).status_code == 409
