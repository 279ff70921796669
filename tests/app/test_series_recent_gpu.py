"""The GPUs' recent samples kept in memory for the alert rules' short windows
(``app.series.recent_gpu``) and the ingest's arrival feed behind them (``app.series.arrivals``):
windows equal to the database's own aggregates on both backends, whatever the arrival order;
only what arrived is read between refreshes; nothing is lost to a late commit or a rollback."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import func, insert, select

from app.alerts.context import load_context
from app.alerts.kinds import shared
from app.db import make_engine, make_session_factory, session_scope
from app.health.rules import DEFAULT_RULES
from app.series import arrivals
from app.series import rule_scans as scans
from app.series.recent_gpu import RecentGpuSamples
from app.series.rule_targets import TARGETS
from tests.factories import batch, gpu, sample, store_payload

NOW = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
METRICS = ("temp_c", "power_w", "thermal_throttled", "ecc_corrected_volatile_count")
WINDOWS = (15.0, 30.0, 60.0, 300.0)
Group = dict[tuple[str, str, float], list[tuple[str, str]]]
GROUP: Group = {
    ("gpu", "window", w): [(m, a) for m in METRICS for a in ("avg", "min", "max")] for w in WINDOWS
}


@pytest.fixture
def session_of(db_url: str) -> Iterator[Any]:
    """A function giving a session on ``db_url`` (one transaction per ``with``)."""
    engine = make_engine(db_url)
    factory = make_session_factory(engine)
    yield lambda: session_scope(factory)
    engine.dispose()


def random_batch(rng: random.Random, hostname: str, ages: Sequence[float]) -> dict[str, Any]:
    """A batch of ``hostname``'s 3 GPUs with one sample per age (seconds before NOW) and
    random values, some missing."""
    gpus = [gpu(i, hostname=hostname) for i in range(3)]
    payload = batch(hostname, gpus=gpus, samples_per_gpu=0)

    def value(low: float, high: float) -> float | None:
        return None if rng.random() < 0.15 else round(rng.uniform(low, high), 2)

    payload["samples"] = [
        sample(
            g,
            NOW - timedelta(seconds=age),
            temp_c=value(30, 95),
            power_w=value(50, 700),
            clocks_event_reasons=rng.choice([None, 0, 0x20, 0x4]),
            ecc_corrected_volatile_count=rng.choice([None, 0, 3, 2**40 + rng.randint(0, 9)]),
        )
        for g in gpus
        for age in ages
    ]
    return payload


def by_database(session: Any) -> dict[Any, dict[Any, float | None]]:
    """Every slot and need of GROUP from the database scan, keyed (slot, need) → GPU → value."""
    ctx = load_context(session, now=NOW, health_rules=DEFAULT_RULES)
    got = scans.windows(ctx, "gpu", {s: sorted(n) for s, n in GROUP.items()})
    return {(s, n): dict(values) for s, needs in got.items() for n, values in needs.items()}


def by_memory(session: Any, recent: RecentGpuSamples | None) -> dict[Any, dict[Any, float | None]]:
    """The same from the samples in memory (``recent``, or a fresh one)."""
    ctx = load_context(session, now=NOW, health_rules=DEFAULT_RULES)
    ctx.recent_gpu = recent
    got = shared._recent_gpu_windows(ctx, GROUP)
    return {(s, n): dict(values) for s, needs in got.items() for n, values in needs.items()}


def same(a: dict[Any, dict[Any, float | None]], b: dict[Any, dict[Any, float | None]]) -> None:
    """Equal keys per (slot, need), values equal to 1e-9 relative (sums may add in another
    order), None for None."""
    assert a.keys() == b.keys()
    for part in a:
        assert a[part].keys() == b[part].keys(), part
        for key, value in a[part].items():
            other = b[part][key]
            if value is None or other is None:
                assert value is None and other is None, (part, key, value, other)
            else:
                assert math.isclose(value, other, rel_tol=1e-9), (part, key, value, other)


def test_windows_from_memory_equal_the_database_scan(db_url: str, session_of: Any) -> None:
    rng = random.Random(7)
    for n, hostname in enumerate(("node-a", "node-b", "node-c")):
        # node-c's newest sample is 20 s old: its windows end there, not at NOW.
        ages = sorted({rng.choice(range(0, 400, 5)) + 20 * (n == 2) for _ in range(40)})
        store_payload(db_url, random_batch(rng, hostname, ages), received_at=NOW)
    # A window edge exactly on a sample (15 s before the newest) is inside, as in SQL.
    store_payload(db_url, random_batch(rng, "node-a", [15.0, 30.0]), received_at=NOW)
    with session_of() as session:
        expected = by_database(session)
        assert any(len(v) == 9 for v in expected.values())
        same(by_memory(session, None), expected)


def test_the_feed_reader_reads_only_what_arrived_and_misses_nothing(
    db_url: str, session_of: Any
) -> None:
    if not db_url.startswith("postgresql"):
        pytest.skip("the arrival feed is Postgres's; SQLite reloads every time (tested above)")
    rng = random.Random(11)
    store_payload(db_url, random_batch(rng, "node-a", [60, 50, 40]), received_at=NOW)
    recent = RecentGpuSamples(consume_feed=True)
    with session_of() as session:
        by_memory(session, recent)
    assert recent.loads == 1
    # New samples; a late batch with samples older than those already read; a batch re-sent
    # whole (its rows are duplicates: nothing new goes in, nothing is fed).
    store_payload(db_url, random_batch(rng, "node-a", [10, 0]), received_at=NOW)
    store_payload(db_url, random_batch(rng, "node-a", [45, 35]), received_at=NOW)
    replay = random_batch(rng, "node-b", [5])
    store_payload(db_url, replay, received_at=NOW)
    store_payload(db_url, {**replay, "batch_id": "0" * 8 + replay["batch_id"][8:]}, received_at=NOW)
    with session_of() as session:
        fed = session.execute(
            select(arrivals.sample_arrival.c.owner_id, func.count()).group_by("owner_id")
        ).all()
        assert sorted(count for _, count in fed) == [1, 1, 1, 2, 2, 2]  # one per GPU and batch
        got = by_memory(session, recent)
        same(got, by_database(session))
        assert session.scalar(select(func.count()).select_from(arrivals.sample_arrival)) == 0
    assert recent.loads == 1
    assert recent.samples == 3 * 7 + 3


def test_a_take_rolled_back_is_taken_again_without_counting_twice(
    db_url: str, session_of: Any
) -> None:
    if not db_url.startswith("postgresql"):
        pytest.skip("the arrival feed is Postgres's")
    rng = random.Random(3)
    store_payload(db_url, random_batch(rng, "node-a", [30, 20]), received_at=NOW)
    recent = RecentGpuSamples(consume_feed=True)
    with session_of() as session:
        by_memory(session, recent)
    store_payload(db_url, random_batch(rng, "node-a", [10]), received_at=NOW)
    with pytest.raises(RuntimeError), session_of() as session:
        by_memory(session, recent)  # takes the feed …
        raise RuntimeError("the evaluation failed")  # … and the transaction rolls back
    with session_of() as session:
        assert session.scalar(select(func.count()).select_from(arrivals.sample_arrival)) == 3
        got = by_memory(session, recent)
        same(got, by_database(session))
    assert recent.loads == 1 and recent.samples == 9


def test_a_reader_with_new_metrics_or_a_wider_span_reloads(db_url: str, session_of: Any) -> None:
    rng = random.Random(5)
    store_payload(db_url, random_batch(rng, "node-a", [200, 100, 0]), received_at=NOW)
    recent = RecentGpuSamples(consume_feed=db_url.startswith("postgresql"))
    metric = {"temp_c": TARGETS["gpu"].metrics["temp_c"]}
    with session_of() as session:
        recent.refresh(session, metrics=metric, span_s=60)
        assert recent.samples == 3  # only the newest is within 60 s
        recent.refresh(session, metrics=metric, span_s=300)
        assert recent.samples == 9
        both = {**metric, "power_w": TARGETS["gpu"].metrics["power_w"]}
        recent.refresh(session, metrics=both, span_s=60)
        assert recent.loads == 3
        assert recent.samples == 3  # loaded again for the span asked


def test_the_ingest_feeds_one_row_per_gpu_and_batch_and_retention_bounds_it(
    db_url: str, session_of: Any
) -> None:
    rng = random.Random(1)
    store_payload(db_url, random_batch(rng, "node-a", [30, 20, 10]), received_at=NOW)
    with session_of() as session:
        rows = session.execute(select(arrivals.sample_arrival)).all()
        if not db_url.startswith("postgresql"):
            assert rows == []  # SQLite's reader reloads: nothing is fed
            return
        assert len(rows) == 3
        assert {(r.series, r.first_at, r.last_at) for r in rows} == {
            ("gpu_sample", NOW - timedelta(seconds=30), NOW - timedelta(seconds=10))
        }
        session.execute(
            insert(arrivals.sample_arrival).values(
                series="gpu_sample",
                owner_id=rows[0].owner_id,
                first_at=NOW,
                last_at=NOW,
                arrived_at=datetime.now(UTC) - timedelta(hours=2),
            )
        )
        assert arrivals.prune(session, now=datetime.now(UTC)) == 1
        RecentGpuSamples(consume_feed=True).release(session)
        assert session.scalar(select(func.count()).select_from(arrivals.sample_arrival)) == 0


def test_the_schedulers_timer_lane_keeps_its_samples_and_sees_each_new_batch(
    db_url: str, session_of: Any
) -> None:
    from app.alerts.scheduler import AlertEvaluator
    from tests.factories import add_rules, alert_states, wipe_alerts

    hot = {
        "name": "hot-gpu",
        "condition": {
            "kind": "threshold",
            "target": "gpu",
            "metric": "temp_c",
            "aggregation": "avg",
            "window": "30s",
            "op": ">",
            "threshold": 85,
        },
    }
    add_rules(db_url, hot)
    gpus = [gpu(0)]
    cool = batch("node-a", gpus=gpus, samples_per_gpu=0)
    cool["samples"] = [sample(gpus[0], NOW - timedelta(seconds=a), temp_c=60) for a in (20, 10)]
    store_payload(db_url, cool, received_at=NOW)
    engine = make_engine(db_url)
    evaluator = AlertEvaluator(engine, make_session_factory(engine), health_rules=DEFAULT_RULES)
    try:
        evaluator.run_once(now=NOW)
        assert alert_states(db_url) == {}
        heat = batch("node-a", gpus=gpus, samples_per_gpu=0)
        heat["samples"] = [
            sample(gpus[0], NOW + timedelta(seconds=a), temp_c=99) for a in (0, 10, 20)
        ]
        store_payload(db_url, heat, received_at=NOW + timedelta(seconds=20))
        evaluator.run_once(now=NOW + timedelta(seconds=20))
        # The 30-s window ending at the newest sample: 99 × 3 and the 60 taken 10 s before NOW.
        assert alert_states(db_url) == {("hot-gpu", "node-a/0"): ("firing", (3 * 99 + 60) / 4)}
        postgres = db_url.startswith("postgresql")
        assert evaluator.recent_gpu.loads == (1 if postgres else 2)  # SQLite reloads each tick
    finally:
        evaluator.close()
        engine.dispose()
        wipe_alerts(db_url)


def test_merging_in_any_order_equals_aggregating_every_sample_kept() -> None:
    """Live ticks (in front of the rows), late and repeated samples (rows sorted again), GPUs
    appearing later, samples past the span: windows equal a plain aggregate of the distinct
    samples within the span of each GPU's newest."""
    import numpy as np

    rng = random.Random(2)
    for _ in range(60):
        recent = RecentGpuSamples()
        recent._metrics, recent._span_us = ("m",), 120_000_000
        recent._values = np.full((1, 0, 0), np.nan)
        stored: dict[int, dict[int, float]] = {}
        clock = 0
        for _ in range(rng.randint(1, 12)):
            clock += rng.choice([5, 10, 10, 30]) * 1_000_000
            batch_rows = []
            for gpu_id in rng.sample(range(1, 9), rng.randint(1, 8)):
                ages = [0] if rng.random() < 0.7 else rng.sample(range(0, 200), 3)
                for age in ages:
                    at = clock - age * 1_000_000
                    value = math.nan if rng.random() < 0.1 else float(rng.randint(0, 99))
                    batch_rows.append((gpu_id, at, stored.get(gpu_id, {}).get(at, value)))
            if rng.random() < 0.2 and batch_rows:  # a repeat of a sample read before
                batch_rows.append(batch_rows[0])
            for gpu_id, at, value in batch_rows:
                stored.setdefault(gpu_id, {}).setdefault(at, value)
            ids, ats, vals = zip(*batch_rows, strict=True)
            recent._merge(np.array(ids), np.array(ats), np.array([vals], dtype=float))
        gpu_ids = sorted(stored)
        ends = [
            datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=max(stored[g]))
            for g in gpu_ids
        ]
        windows = [(w, [("m", a) for a in ("avg", "min", "max")]) for w in (10.0, 60.0, 120.0)]
        got = recent.windows(gpu_ids, gpu_ids, ends, windows)  # a node per GPU here
        for (window_s, _), result in zip(windows, got, strict=True):
            for i, gpu_id in enumerate(gpu_ids):
                newest = max(stored[gpu_id])
                inside = [v for t, v in stored[gpu_id].items() if t >= newest - window_s * 1e6]
                assert bool(result.present[i]) == bool(inside)
                values = [v for v in inside if not math.isnan(v)]
                expected = {
                    "avg": sum(values) / len(values) if values else math.nan,
                    "min": min(values, default=math.nan),
                    "max": max(values, default=math.nan),
                }
                for aggregation, want in expected.items():
                    value = float(result.values[("m", aggregation)][i])
                    assert (math.isnan(want) and math.isnan(value)) or math.isclose(value, want), (
                        window_s,
                        gpu_id,
                        aggregation,
                        value,
                        want,
                    )


def test_a_batch_committed_during_an_evaluation_moves_its_nodes_window_end(
    db_url: str, session_of: Any
) -> None:
    """Postgres reads each statement's own snapshot: the node's newest sample was read at the
    start of the evaluation, the batch stored since is read from the feed. The window ends at
    the newest sample read (the 99s are in, with the 60s of the 15 s before), never at the
    older end with the newer samples counted on top."""
    if not db_url.startswith("postgresql"):
        pytest.skip("SQLite: the evaluation holds the write lock, no batch commits meanwhile")
    g = gpu(0)

    def put(ages: list[int], temp_c: float) -> None:
        payload = batch("node-a", gpus=[g], samples_per_gpu=0)
        payload["samples"] = [sample(g, NOW + timedelta(seconds=a), temp_c=temp_c) for a in ages]
        store_payload(db_url, payload, received_at=NOW)

    put([-20, -15, -10, -5, 0], 60)
    group: Group = {("gpu", "window", 15.0): [("temp_c", "avg")]}
    recent = RecentGpuSamples(consume_feed=db_url.startswith("postgresql"))
    with session_of() as session:
        ctx = load_context(session, now=NOW, health_rules=DEFAULT_RULES)
        ctx.recent_gpu = recent
        shared._recent_gpu_windows(ctx, group)  # the previous tick
    with session_of() as session:
        ctx = load_context(session, now=NOW, health_rules=DEFAULT_RULES)
        ctx.recent_gpu = recent
        put([5, 10, 15], 99)  # committed after the evaluation read the node's newest sample
        got = shared._recent_gpu_windows(ctx, group)[("gpu", "window", 15.0)]
        assert list(got[("temp_c", "avg")].values()) == [(60 + 3 * 99) / 4]


def test_no_sample_held_gives_empty_windows(db_url: str) -> None:
    from app.alerts.evaluator import evaluate
    from tests.factories import add_rules, wipe_alerts

    assert RecentGpuSamples().windows([], [], [], [(15.0, [])])[0].present.tolist() == []
    recent = RecentGpuSamples()
    engine = make_engine(db_url)
    with session_scope(make_session_factory(engine)) as session:
        recent.refresh(session, metrics={"temp_c": TARGETS["gpu"].metrics["temp_c"]}, span_s=60)
    [empty] = recent.windows([1], [1], [NOW], [(15.0, [("temp_c", "avg")])])
    assert empty.present.tolist() == [False]
    assert math.isnan(empty.values[("temp_c", "avg")][0])
    add_rules(
        db_url,
        {
            "name": "hot",
            "condition": {
                "kind": "threshold",
                "target": "gpu",
                "metric": "temp_c",
                "aggregation": "avg",
                "window": "30s",
                "op": ">",
                "threshold": 85,
            },
        },
    )
    try:
        with session_scope(make_session_factory(engine)) as session:
            report = evaluate(session, now=NOW, health_rules=DEFAULT_RULES)
        engine.dispose()
        assert report.failed == {}
    finally:
        wipe_alerts(db_url)


def test_a_feed_reader_loads_whole_again_after_hours_forgetting_gone_gpus(
    db_url: str, session_of: Any
) -> None:
    if not db_url.startswith("postgresql"):
        pytest.skip("the arrival feed is Postgres's")
    from app.series import recent_gpu

    store_payload(db_url, random_batch(random.Random(4), "node-a", [10, 0]), received_at=NOW)
    recent = RecentGpuSamples(consume_feed=True)
    metric = {"temp_c": TARGETS["gpu"].metrics["temp_c"]}
    with session_of() as session:
        recent.refresh(session, metrics=metric, span_s=60)
        recent.refresh(session, metrics=metric, span_s=60)
        assert recent.loads == 1
        recent._loaded_at = (recent._loaded_at or 0) - recent_gpu.RELOAD_EVERY_S - 1
        recent.refresh(session, metrics=metric, span_s=60)
        assert recent.loads == 2


def test_huge_values_times_a_scale_compare_without_a_warning() -> None:
    import warnings

    import numpy as np

    from app.alerts.kinds.entity_values import EntityValues

    values = EntityValues([(1,), (2,), (3,)], np.array([1e308, -1e308, np.inf]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert values.breaching(">", 1e300, scale=3600.0) == [0, 2]


def test_gpu_last_from_memory_equals_the_primary_key_lookups(db_url: str, session_of: Any) -> None:
    """The scheduler's feed reader answers GPU ``last`` from memory
    (``shared._recent_gpu_last``) with what ``scans.gpu_latest`` reads by primary key: each
    GPU's newest sample within 10 min of its node's newest, values missing as None; a GPU
    lagging its node by 100 s is in, one lagging by 700 s is out."""
    if not db_url.startswith("postgresql"):
        pytest.skip("GPU last comes from memory only for the feed reader (Postgres)")
    rng = random.Random(5)
    for hostname in ("node-a", "node-b"):
        store_payload(db_url, random_batch(rng, hostname, [30, 20, 10]), received_at=NOW)
    gpus = [gpu(i, hostname="node-c") for i in range(3)]
    lagging = batch("node-c", gpus=gpus, samples_per_gpu=0)
    lagging["samples"] = [
        sample(g, NOW - timedelta(seconds=age), temp_c=40.0 + g["index"], power_w=None)
        for g, ages in zip(gpus, ([0, 10], [100, 110], [700, 710]), strict=True)
        for age in ages
    ]
    store_payload(db_url, lagging, received_at=NOW)
    needs = [("power_w", "last"), ("temp_c", "last"), ("thermal_throttled", "last")]
    with session_of() as session:
        ctx = load_context(session, now=NOW, health_rules=DEFAULT_RULES)
        ctx.recent_gpu = RecentGpuSamples(consume_feed=True)
        ctx.cache[shared._PLAN] = {
            ("gpu", "window", 600.0): {("temp_c", "avg")},
            ("gpu", "last", 0.0): set(needs),
        }
        assert shared._memory_for_last(ctx)
        ctx.cache[shared._PLAN].pop(("gpu", "window", 600.0))
        ctx.cache[shared._PLAN][("gpu", "window", 300.0)] = {("temp_c", "avg")}
        assert not shared._memory_for_last(ctx)  # a 5-min span misses GPUs 5–10 min behind
        ctx.cache[shared._PLAN][("gpu", "window", 600.0)] = {("temp_c", "avg")}
        from_memory = shared._recent_gpu_last(ctx, needs)
        from_table = shared._compute(ctx, ("gpu", "last", 0.0), needs)
        node_c = next(n.id for n in ctx.nodes.values() if n.hostname == "node-c")
    for need in needs:
        assert dict(from_memory[need]) == dict(from_table[need]), need
    temps = dict(from_memory[("temp_c", "last")])
    assert len(temps) == 3 + 3 + 2
    assert sorted(v for (_, node), v in temps.items() if node == node_c) == [40.0, 41.0]


def test_a_whole_load_reads_nodes_behind_or_ahead_of_the_fleet_like_the_database_scan(
    db_url: str, session_of: Any
) -> None:
    """On Postgres the whole fleet loads by one range scan of time from the fleet's median
    newest sample (``recent_gpu.RANGE_SLACK_S``); a node whose newest sample is 30 min behind
    (a late agent) is read by primary key instead, and one 90 s ahead is in the range: every
    window equals the database scan, on both backends."""
    rng = random.Random(11)
    for hostname, shift in (("node-a", 0), ("node-b", 0), ("node-c", 0), ("late", 1800)):
        ages = sorted({rng.choice(range(0, 400, 5)) + shift for _ in range(30)})
        store_payload(db_url, random_batch(rng, hostname, ages), received_at=NOW)
    ahead = random_batch(rng, "ahead", [0, 10, 20, 200])
    for s in ahead["samples"]:
        s["sampled_at"] = (
            datetime.fromisoformat(s["sampled_at"]) + timedelta(seconds=90)
        ).isoformat()
    store_payload(db_url, ahead, received_at=NOW + timedelta(seconds=90))
    with session_of() as session:
        expected = by_database(session)
        late = [v for (s, n), v in expected.items() if s[2] == 300.0 and n == ("temp_c", "max")]
        assert len(late[0]) == 5 * 3  # every GPU of the five nodes has a 5-min window
        same(by_memory(session, None), expected)
