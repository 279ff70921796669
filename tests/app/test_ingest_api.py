"""POST /api/v1/ingest through a real HTTP server, on Postgres and SQLite."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from tests.app.helpers import counts, post_batch, stored_samples
from tests.factories import batch, create_token, gpu, iso, sample
from tests.live_server import LiveServer


def test_it_stores_a_batch_and_counts_what_it_stored(server: LiveServer, db_url: str) -> None:
    token = create_token(db_url, "node-a")
    payload = batch(gpus=2, samples_per_gpu=3, events=[])
    response = post_batch(server.url, token, payload)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["samples_received"] == 6
    assert body["samples_stored"] == 6
    assert body["samples_duplicate"] == 0
    assert body["samples_rejected"] == 0
    assert body["replayed"] is False
    assert counts(db_url)["samples"] == 6


def test_it_accepts_gzip_bodies(server: LiveServer, db_url: str) -> None:
    token = create_token(db_url, "node-a")
    response = post_batch(server.url, token, batch(samples_per_gpu=2), gzip_body=True)
    assert response.status_code == 200, response.text
    assert response.json()["samples_stored"] == 4


def test_a_resent_batch_is_answered_as_a_replay_and_stores_nothing(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    payload = batch(
        samples_per_gpu=2,
        events=[{"occurred_at": iso(datetime.now(UTC)), "kind": "xid", "xid": 79, "message": "x"}],
    )
    first = post_batch(server.url, token, payload).json()
    before = counts(db_url)
    second = post_batch(server.url, token, payload)
    assert second.status_code == 200
    assert second.json()["replayed"] is True
    assert second.json()["samples_stored"] == first["samples_stored"] == 4
    assert counts(db_url) == before


def test_concurrent_deliveries_of_one_batch_store_it_once(server: LiveServer, db_url: str) -> None:
    token = create_token(db_url, "node-a")
    post_batch(server.url, token, batch(samples_per_gpu=1))  # node and GPUs exist
    payload = batch(samples_per_gpu=20)
    results: list[int] = []
    replayed: list[bool] = []

    def send() -> None:
        answer = post_batch(server.url, token, payload)
        results.append(answer.status_code)
        replayed.append(answer.json()["replayed"])

    threads = [threading.Thread(target=send) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [200, 200, 200, 200]
    assert sorted(replayed) == [False, True, True, True]  # one stored it, three got its answer
    assert counts(db_url)["samples"] == 2 + 40
    assert counts(db_url)["batches"] == 2


def test_samples_already_stored_are_counted_as_duplicates(server: LiveServer, db_url: str) -> None:
    token = create_token(db_url, "node-a")
    payload = batch(samples_per_gpu=3)
    post_batch(server.url, token, payload)
    again = dict(payload, batch_id="another-batch")
    again["samples"] = [*payload["samples"], payload["samples"][0]]
    body = post_batch(server.url, token, again).json()
    assert body["samples_stored"] == 0
    assert body["samples_duplicate"] == 7
    assert counts(db_url)["samples"] == 6


def test_implausible_values_are_stored_as_null_and_counted(server: LiveServer, db_url: str) -> None:
    token = create_token(db_url, "node-a")
    g = gpu(0)
    now = datetime.now(UTC)
    payload = batch(gpus=[g], samples_per_gpu=0)
    payload["samples"] = [
        sample(
            g,
            now - timedelta(seconds=2),
            util_gpu_pct=4294967295,
            temp_c=9223372036854775794,
            power_w=-12.5,
            pstate=2.5,
        ),
        sample(g, now - timedelta(seconds=1), util_gpu_pct=77, temp_c=61),
    ]
    body = post_batch(server.url, token, payload).json()
    assert body["samples_stored"] == 2
    assert body["nulled_values"] == {"util_gpu_pct": 1, "temp_c": 1, "power_w": 1, "pstate": 1}
    rows = stored_samples(db_url)
    assert [r["util_gpu_pct"] for r in rows] == [None, 77]
    assert [r["temp_c"] for r in rows] == [None, 61]
    assert rows[0]["power_w"] is None
    assert rows[0]["sm_clock_mhz"] == 1755  # the sample's other metrics are kept


def test_nan_metric_values_are_nulled(server: LiveServer, db_url: str) -> None:
    token = create_token(db_url, "node-a")
    g = gpu(0)
    payload = batch(gpus=[g], samples_per_gpu=0)
    payload["samples"] = [sample(g, datetime.now(UTC), power_w=0.0)]
    raw = post_batch.__globals__["json"].dumps(payload).replace('"power_w": 0.0', '"power_w": NaN')
    body = post_batch(server.url, token, raw.encode()).json()
    assert body["nulled_values"] == {"power_w": 1}
    assert stored_samples(db_url)[0]["power_w"] is None


def test_null_means_not_available_and_is_never_stored_as_zero(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    g = gpu(0)
    payload = batch(gpus=[g], samples_per_gpu=0)
    payload["samples"] = [sample(g, datetime.now(UTC), util_gpu_pct=None, fan_pct=None)]
    post_batch(server.url, token, payload)
    row = stored_samples(db_url)[0]
    assert row["util_gpu_pct"] is None
    assert row["fan_pct"] is None


def test_samples_from_a_clock_in_the_future_are_rejected_and_the_skew_recorded(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    g = gpu(0)
    ahead = datetime.now(UTC) + timedelta(hours=2)
    payload = batch(gpus=[g], samples_per_gpu=0, sent_at=iso(ahead))
    payload["samples"] = [sample(g, ahead), sample(g, datetime.now(UTC))]
    body = post_batch(server.url, token, payload).json()
    assert body["samples_stored"] == 1
    assert body["rejected_by_reason"] == {"sampled_at_in_future": 1}
    assert body["rejections"] == [
        {"index": 0, "gpu_uuid": g["uuid"], "reason": "sampled_at_in_future"}
    ]
    assert 7100 < body["clock_skew_s"] < 7300
    import httpx

    node = httpx.get(f"{server.url}/api/v1/nodes/node-a").json()
    assert 7100 < node["clock_skew_s"] < 7300


def test_samples_older_than_retention_and_of_unknown_gpus_are_rejected(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    g = gpu(0)
    payload = batch(gpus=[g], samples_per_gpu=0)
    stranger = gpu(5, hostname="elsewhere")
    payload["samples"] = [
        sample(g, datetime.now(UTC) - timedelta(days=400)),
        sample(stranger, datetime.now(UTC)),
        sample(g, datetime.now(UTC)),
    ]
    body = post_batch(server.url, token, payload).json()
    assert body["samples_stored"] == 1
    assert body["rejected_by_reason"] == {"older_than_retention": 1, "unknown_gpu": 1}


def test_each_event_is_stored_even_the_same_xid_twice(server: LiveServer, db_url: str) -> None:
    token = create_token(db_url, "node-a")
    g = gpu(0)
    at = iso(datetime.now(UTC))
    xid = {
        "occurred_at": at,
        "kind": "xid",
        "xid": 48,
        "pci_bus_id": g["pci_bus_id"],
        "message": "m",
    }
    payload = batch(gpus=[g], samples_per_gpu=1, events=[xid, dict(xid)])
    body = post_batch(server.url, token, payload).json()
    assert body["events_stored"] == 2
    assert counts(db_url)["events"] == 2
