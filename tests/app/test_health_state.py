"""The stored health (``node_health_state``) gives the same answers as evaluating the fleet on
read, on both backends: every kind of reason, stale and never-seen nodes, GPU states; it is
written only when an answer changes (a new version, ``since`` moved only by a state change),
staleness is applied on read without a write, and one refresh at a time runs per database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select, text

from app.config import load_settings
from app.db import make_engine, make_session_factory, session_scope
from app.fleet import service as fleet_service
from app.health import current, state
from app.health import service as health_service
from app.health.jobs import REFRESH_KEY, HealthRefresher
from app.health.models import NodeHealthState
from app.health.rules import HealthRules, rules_from_settings
from tests.app.section_factories import nvlinks
from tests.app.test_health_query_count import seed
from tests.factories import batch, create_token, gpu, iso, sample, store_payload


def _rules(url: str) -> HealthRules:
    return rules_from_settings(load_settings(database_url=url))


def _direct(url: str, now: datetime) -> dict[str, Any]:
    """Each node's answer evaluated on read (the reference), as plain data."""
    rules = _rules(url)
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            views = fleet_service.list_node_rows(
                session, stale_after_s=rules.stale_after_s, now=now
            )
            found = health_service.evaluate_views(session, views=views, rules=rules, now=now)
            return {host: h.model_dump(mode="json") for host, h in found.items()}
    finally:
        engine.dispose()


def _stored(url: str, now: datetime, *, refresh: bool = True) -> dict[str, Any]:
    """Each node's answer read from the stored state (after a refresh when ``refresh``)."""
    rules = _rules(url)
    engine = make_engine(url)
    try:
        factory = make_session_factory(engine)
        if refresh:
            with session_scope(factory) as session:
                state.refresh(session, rules=rules, now=now)
        with session_scope(factory) as session:
            nodes = current.list_states(session, stale_after_s=rules.stale_after_s, now=now)
            found, _ = current.health_of(session, nodes=nodes, rules=rules, now=now)
            return {host: h.model_dump(mode="json") for host, h in found.items()}
    finally:
        engine.dispose()


def _rows(url: str) -> dict[int, tuple[int, str, datetime]]:
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            return {
                r.node_id: (r.version, r.state, r.since)
                for r in session.scalars(select(NodeHealthState))
            }
    finally:
        engine.dispose()


def test_stored_answers_equal_the_evaluated_ones(db_url: str) -> None:
    now = datetime.now(UTC)
    seed(db_url, 3, at=now - timedelta(seconds=1))
    healthy = [gpu(0, hostname="calm-01")]
    store_payload(
        db_url,
        batch("calm-01", gpus=healthy, start=now - timedelta(seconds=3)),
        received_at=now - timedelta(seconds=1),
    )
    old = [gpu(0, hostname="gone-01")]
    store_payload(
        db_url,
        batch("gone-01", gpus=old, start=now - timedelta(hours=2)),
        received_at=now - timedelta(hours=2),
    )
    create_token(db_url, "new-01")  # never seen

    direct = _direct(db_url, now)
    assert _stored(db_url, now) == direct
    assert direct["calm-01"]["state"] == "healthy"
    assert direct["gone-01"]["state"] == "unknown"
    assert direct["new-01"]["state"] == "unknown"
    assert direct["node-00"]["state"] == "unhealthy"
    assert {g["state"] for g in direct["node-00"]["gpus"]} == {"unhealthy", "degraded"}
    # Nothing changed: nothing is written again.
    rows = _rows(db_url)
    current.DOCS.clear()
    assert _stored(db_url, now) == direct
    assert _rows(db_url) == rows


def test_staleness_is_applied_on_read_without_a_refresh(db_url: str) -> None:
    now = datetime.now(UTC)
    seed(db_url, 1, at=now - timedelta(seconds=1))
    fresh = _stored(db_url, now)
    later = now + timedelta(hours=1)  # past the 120 s stale limit
    stale = _stored(db_url, later, refresh=False)
    assert stale == _direct(db_url, later)
    node = stale["node-00"]
    assert node["state"] == "unknown" and node["reasons"][0]["code"] == "stale"
    assert [r["code"] for r in node["reasons"][1:]] == [
        r["code"] for r in fresh["node-00"]["reasons"]
    ]
    assert {g["state"] for g in node["gpus"]} == {"unknown"}


def test_a_changed_answer_gets_a_new_version_and_since(db_url: str) -> None:
    now = datetime.now(UTC)
    gpus = [gpu(0, hostname="n-01"), gpu(1, hostname="n-01")]
    store_payload(
        db_url,
        batch("n-01", gpus=gpus, start=now - timedelta(seconds=20)),
        received_at=now - timedelta(seconds=20),
    )
    _stored(db_url, now - timedelta(seconds=19))
    ((node_id, (v1, s1, since1)),) = _rows(db_url).items()
    assert s1 == "healthy"

    # A batch that changes nothing the answer shows: evaluated, not rewritten.
    store_payload(
        db_url,
        batch("n-01", gpus=gpus, start=now - timedelta(seconds=10)),
        received_at=now - timedelta(seconds=10),
    )
    _stored(db_url, now - timedelta(seconds=9))
    assert _rows(db_url)[node_id] == (v1, s1, since1)

    # An Xid 79: unhealthy, a newer version, since = that evaluation.
    xid = {"kind": "xid", "xid": 79, "occurred_at": iso(now), "gpu_uuid": gpus[0]["uuid"]}
    store_payload(db_url, batch("n-01", gpus=gpus, start=now, events=[xid]), received_at=now)
    assert _stored(db_url, now)["n-01"] == _direct(db_url, now)["n-01"]
    v2, s2, since2 = _rows(db_url)[node_id]
    assert (s2, v2 > v1, since2) == ("unhealthy", True, now)


def test_a_small_fleet_reads_its_own_writes_before_the_refresh(db_url: str) -> None:
    now = datetime.now(UTC)
    gpus = [gpu(0, hostname="n-01")]
    store_payload(
        db_url,
        batch("n-01", gpus=gpus, start=now - timedelta(seconds=20)),
        received_at=now - timedelta(seconds=20),
    )
    assert _stored(db_url, now - timedelta(seconds=19))["n-01"]["state"] == "healthy"
    xid = {"kind": "xid", "xid": 79, "occurred_at": iso(now), "gpu_uuid": gpus[0]["uuid"]}
    store_payload(db_url, batch("n-01", gpus=gpus, start=now, events=[xid]), received_at=now)
    # Not refreshed: the stored answer is behind, and this node is evaluated on read.
    assert _stored(db_url, now, refresh=False)["n-01"]["state"] == "unhealthy"


def test_one_refresh_at_a_time_per_postgres_database(db_url: str) -> None:
    if not db_url.startswith("postgresql"):
        pytest.skip("SQLite is one process: its refresh takes no lock")
    now = datetime.now(UTC)
    seed(db_url, 1, at=now - timedelta(seconds=1))
    engine = make_engine(db_url)
    try:
        factory = make_session_factory(engine)
        refresher = HealthRefresher(
            factory, rules=_rules(db_url), interval_s=60, recheck_after_s=60
        )
        with engine.connect() as other:
            other.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": REFRESH_KEY})
            assert refresher.run_once() is None  # another process is refreshing
            other.rollback()
        report = refresher.run_once()
        assert report is not None and report.evaluated == 1 and report.changed == 1
    finally:
        engine.dispose()


def test_an_answer_changed_since_listed_is_shown_but_not_filed_under_the_old_digest(
    db_url: str,
) -> None:
    """A refresh between the listing and the document read: the newer answer is shown, and
    the node's digest is cleared so no cache files it under the digest it was listed with."""
    now = datetime.now(UTC)
    gpus = [gpu(0, hostname="n-01")]
    store_payload(
        db_url,
        batch("n-01", gpus=gpus, start=now - timedelta(seconds=20)),
        received_at=now - timedelta(seconds=20),
    )
    _stored(db_url, now - timedelta(seconds=19))
    rules = _rules(db_url)
    engine = make_engine(db_url)
    try:
        factory = make_session_factory(engine)
        with session_scope(factory) as session:
            nodes = current.list_states(session, stale_after_s=rules.stale_after_s, now=now)
        listed = nodes[0].digest
        xid = {"kind": "xid", "xid": 79, "occurred_at": iso(now), "gpu_uuid": gpus[0]["uuid"]}
        store_payload(db_url, batch("n-01", gpus=gpus, start=now, events=[xid]), received_at=now)
        with session_scope(factory) as session:
            state.refresh(session, rules=rules, now=now)
        current.DOCS.clear()
        with session_scope(factory) as session:
            nodes[0].behind = False  # as listed before the batch
            found, shown = current.health_of(session, nodes=nodes, rules=rules, now=now)
        assert found["n-01"].state == "unhealthy"
        assert listed is not None and shown[0].digest is None
    finally:
        engine.dispose()


def _pending_batch(gpus: list[dict[str, Any]], at: datetime, *, pending: bool) -> dict[str, Any]:
    """GPU 0 sampled at ``at`` with remapped rows pending (or not) and a PCIe link at x8 of
    x16 (while pending)."""
    payload = batch("n-01", gpus=gpus, samples_per_gpu=0)
    degraded = {"remapped_rows_pending": 1, "pcie_link_width": 8, "pcie_link_width_max": 16}
    payload["samples"] = [sample(gpus[0], at, **(degraded if pending else {}))]
    return payload


def test_reasons_read_off_the_newest_values_keep_the_time_first_seen(db_url: str) -> None:
    """Remapped rows pending and a downtrained PCIe link show in every new sample; their
    ``since`` is when the node was first evaluated with them, not the newest sample's time, so
    the stored answer (and the overview's version) does not change with every batch."""
    now = datetime.now(UTC).replace(microsecond=0)
    gpus = [gpu(0, hostname="n-01")]
    times = [now - timedelta(seconds=s) for s in (40, 30, 20, 10)]
    store_payload(db_url, _pending_batch(gpus, times[0], pending=True), received_at=times[0])
    first = _stored(db_url, times[0])["n-01"]
    assert {r["code"]: r["since"] for r in first["reasons"]} == {
        "remapped_rows_pending": iso(times[0]),
        "pcie_downtrained": iso(times[0]),
    }
    rows = _rows(db_url)

    store_payload(db_url, _pending_batch(gpus, times[1], pending=True), received_at=times[1])
    assert _stored(db_url, times[1])["n-01"] == first  # the same answer: not rewritten
    assert _rows(db_url) == rows
    assert _direct(db_url, times[1])["n-01"] == first  # the node page says the same

    # Cleared, then seen again: since starts from the new reading.
    store_payload(db_url, _pending_batch(gpus, times[2], pending=False), received_at=times[2])
    assert _stored(db_url, times[2])["n-01"]["reasons"] == []
    store_payload(db_url, _pending_batch(gpus, times[3], pending=True), received_at=times[3])
    again = _stored(db_url, times[3])["n-01"]
    assert {r["since"] for r in again["reasons"]} == {iso(times[3])}


def test_a_clear_reading_the_refresh_did_not_see_restarts_the_since(db_url: str) -> None:
    """One batch carries a sample without pending rows and a newer one with them again: the
    evaluation sees only the newest, but the held time is dropped for the newest reading's."""
    now = datetime.now(UTC).replace(microsecond=0)
    gpus = [gpu(0, hostname="n-01")]
    t0 = now - timedelta(seconds=60)
    store_payload(db_url, _pending_batch(gpus, t0, pending=True), received_at=t0)
    assert {r["since"] for r in _stored(db_url, t0)["n-01"]["reasons"]} == {iso(t0)}
    payload = batch("n-01", gpus=gpus, samples_per_gpu=0)
    pending = {"remapped_rows_pending": 1, "pcie_link_width": 8, "pcie_link_width_max": 16}
    clear = {"remapped_rows_pending": 0, "pcie_link_width": 16, "pcie_link_width_max": 16}
    times = [t0 + timedelta(seconds=s) for s in (10, 20, 30)]
    payload["samples"] = [
        sample(gpus[0], times[0], **pending),
        sample(gpus[0], times[1], **clear),
        sample(gpus[0], times[2], **pending),
    ]
    store_payload(db_url, payload, received_at=times[2])
    answer = _stored(db_url, times[2])["n-01"]
    assert {r["code"]: r["since"] for r in answer["reasons"]} == {
        "remapped_rows_pending": iso(times[2]),
        "pcie_downtrained": iso(times[2]),
    }
    assert _direct(db_url, times[2])["n-01"] == answer


def test_a_replaced_gpu_does_not_inherit_the_since_of_the_one_before(db_url: str) -> None:
    """GPU index 0 is a new card (another UUID) with pending rows too: its reason starts at
    its own reading, not at the old card's."""
    now = datetime.now(UTC).replace(microsecond=0)
    old_card = [gpu(0, hostname="n-01")]
    t0, t1 = now - timedelta(seconds=60), now
    store_payload(db_url, _pending_batch(old_card, t0, pending=True), received_at=t0)
    _stored(db_url, t0)
    new_card = [gpu(0, hostname="n-01", uuid="GPU-00000000-0000-4000-8000-00000000beef")]
    store_payload(db_url, _pending_batch(new_card, t1, pending=True), received_at=t1)
    answer = _stored(db_url, t1)["n-01"]
    (card,) = [g for g in answer["gpus"] if g["uuid"] == new_card[0]["uuid"]]
    assert {r["code"]: r["since"] for r in card["reasons"]} == {
        "remapped_rows_pending": iso(t1),
        "pcie_downtrained": iso(t1),
    }


def test_an_nvlink_back_up_in_between_restarts_the_since(db_url: str) -> None:
    """Link 3 down, then (in one batch) up and down again: held while down, new after."""
    now = datetime.now(UTC).replace(microsecond=0)
    gpus = [gpu(0, hostname="n-01")]

    def links_batch(*readings: tuple[datetime, str]) -> dict[str, Any]:
        payload = batch("n-01", gpus=gpus, samples_per_gpu=0)
        payload["samples"] = [sample(gpus[0], readings[-1][0])]
        payload["nvlinks"] = [
            entry
            for at, state in readings
            for entry in nvlinks(gpus[0], at, links=4)
            if entry["link"] != 3 or state == "up"
        ] + [nvlinks(gpus[0], at, links=4, state="down")[3] for at, s in readings if s == "down"]
        return payload

    t0, t1, t2, t3 = (now - timedelta(seconds=s) for s in (60, 40, 30, 20))
    store_payload(db_url, links_batch((t0, "down")), received_at=t0)
    assert [r["since"] for r in _stored(db_url, t0)["n-01"]["reasons"]] == [iso(t0)]
    store_payload(db_url, links_batch((t1, "down")), received_at=t1)
    assert [r["since"] for r in _stored(db_url, t1)["n-01"]["reasons"]] == [iso(t0)]
    store_payload(db_url, links_batch((t2, "up"), (t3, "down")), received_at=t3)
    answer = _stored(db_url, t3)["n-01"]
    assert [(r["code"], r["since"]) for r in answer["reasons"]] == [("nvlink_down", iso(t3))]


def test_another_nvlink_down_or_an_unknown_reading_is_judged_as_the_links_say(db_url: str) -> None:
    """Link 1 down, then (one batch) link 1 back up and link 2 down: another condition, from
    link 2's reading. A link read ``unknown`` in between tells nothing: the time is held."""
    now = datetime.now(UTC).replace(microsecond=0)
    gpus = [gpu(0, hostname="n-01")]
    t = [now - timedelta(seconds=s) for s in (100, 90, 85, 82, 70, 65, 60)]

    def links_batch(*readings: tuple[datetime, int, str]) -> dict[str, Any]:
        payload = batch("n-01", gpus=gpus, samples_per_gpu=0)
        payload["samples"] = [sample(gpus[0], max(at for at, _, _ in readings))]
        payload["nvlinks"] = [
            nvlinks(gpus[0], at, links=4, state=state)[link] for at, link, state in readings
        ]
        return payload

    def since_of(at: datetime) -> list[tuple[str, str]]:
        return [(r["text"], r["since"]) for r in _stored(db_url, at)["n-01"]["reasons"]]

    full = [(t[0], link, "up") for link in range(4)]
    store_payload(db_url, links_batch(*full), received_at=t[0])
    store_payload(db_url, links_batch((t[1], 1, "down")), received_at=t[1])
    assert since_of(t[1]) == [("NVLink down: link 1", iso(t[1]))]
    store_payload(db_url, links_batch((t[2], 1, "up"), (t[3], 2, "down")), received_at=t[3])
    assert since_of(t[3]) == [("NVLink down: link 2", iso(t[3]))]
    store_payload(db_url, links_batch((t[4], 2, "down")), received_at=t[4])
    assert since_of(t[4]) == [("NVLink down: link 2", iso(t[3]))]
    store_payload(db_url, links_batch((t[5], 2, "unknown"), (t[6], 2, "down")), received_at=t[6])
    assert since_of(t[6]) == [("NVLink down: link 2", iso(t[3]))]
