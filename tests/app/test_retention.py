"""Retention prune deletes what is older than the window and keeps the rest."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from app.db import make_engine, make_session_factory, session_scope
from app.retention.jobs import prune
from tests.app.helpers import counts, post_batch, section_counts
from tests.app.section_factories import with_sections
from tests.factories import batch, create_token
from tests.live_server import LiveServer


def test_prune_deletes_samples_sections_events_and_batch_ids_past_retention(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    # An Xid 48: it opens an incident, which goes with its event.
    event = {"occurred_at": datetime.now(UTC).isoformat(), "kind": "xid", "xid": 48}
    payload = with_sections(batch(samples_per_gpu=2, events=[event]), datetime.now(UTC))
    post_batch(server.url, token, payload)
    sections = {"nvlink_sample": 36, "disk_sample": 2, "mount_sample": 2, "nfs_sample": 1}
    sections["nic_port_sample"] = 2
    engine = make_engine(db_url)
    factory = make_session_factory(engine)
    with session_scope(factory) as session:
        kept = prune(session, retention_days=1)
    # The alert evaluator's feed keeps an hour whatever the retention (the server's evaluator
    # may also have taken it meanwhile): tested in test_series_recent_gpu.
    assert kept.pop("sample_arrival") == 0
    blocks = {f"{raw}_block": 0 for raw in ("gpu_sample", *sections)}  # nothing compacted here
    # Each entity's current state goes with its last reading (one per entity here).
    latest = {f"{raw}_latest": sections[raw] for raw in sections}
    kept_rows = {"gpu_sample": 0, "node_event": 0, "ingest_batch": 0, "incident": 0}
    assert kept == kept_rows | blocks | dict.fromkeys([*sections, *latest], 0)
    assert counts(db_url) == {"samples": 4, "events": 1, "batches": 1}
    with session_scope(factory) as session:
        gone = prune(session, retention_days=1, now=datetime.now(UTC) + timedelta(days=2))
    engine.dispose()
    gone.pop("sample_arrival")
    gone_rows = {"gpu_sample": 4, "node_event": 1, "ingest_batch": 1, "incident": 1}
    assert gone == gone_rows | blocks | sections | latest
    assert counts(db_url) == {"samples": 0, "events": 0, "batches": 0}
    left = section_counts(db_url)
    assert {name: left[name] for name in sections} == dict.fromkeys(sections, 0)
    assert left["topology_snapshot"] == left["topology_change"] == 1  # the current one stays


def test_raw_samples_go_after_the_raw_retention_and_events_after_the_longer_one(
    server: LiveServer, db_url: str
) -> None:
    """Raw samples and section readings are pruned after ``raw_retention_days``, events and
    batch ids after ``retention_days`` (30): two days on, with a one-day raw retention, the
    samples are gone and the event and the batch id stay."""
    token = create_token(db_url, "node-a")
    event = {"occurred_at": datetime.now(UTC).isoformat(), "kind": "xid", "xid": 13}
    payload = with_sections(batch(samples_per_gpu=2, events=[event]), datetime.now(UTC))
    post_batch(server.url, token, payload)
    engine = make_engine(db_url)
    with session_scope(make_session_factory(engine)) as session:
        gone = prune(
            session,
            retention_days=30,
            raw_retention_days=1,
            now=datetime.now(UTC) + timedelta(days=2),
        )
    engine.dispose()
    assert (gone["gpu_sample"], gone["nvlink_sample"], gone["disk_sample"]) == (4, 36, 2)
    assert (gone["node_event"], gone["ingest_batch"]) == (0, 0)
    assert counts(db_url) == {"samples": 0, "events": 1, "batches": 1}
