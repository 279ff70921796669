"""The fleet-wide statements of the sample-based kinds (``app.series.rule_scans`` through
``shared.values``) on Postgres and SQLite: every window of a target in one scan, a GPU's newest
sample by ``gpu.last_sample_at``, and a counter's rise from the window's oldest sample. Exact
values per GPU, including which GPUs are left out of a window and which have no data."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app.alerts.context import load_context
from app.alerts.kinds import shared
from app.alerts.spec import RuleSpec
from app.db import make_engine, make_session_factory, session_scope
from app.health.rules import DEFAULT_RULES
from tests.factories import batch, gpu, sample, store_payload, wipe_alerts

NOW = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)


@pytest.fixture
def url(db_url: str) -> Iterator[str]:
    """``db_url`` with the alert tables wiped after the test."""
    yield db_url
    wipe_alerts(db_url)


def store(url: str, ages: dict[int, dict[int, dict[str, Any]]]) -> None:
    """One batch of node-a received at NOW: per GPU index, per sample age (seconds before NOW),
    the metrics of that sample."""
    gpus = [gpu(i) for i in sorted(ages)]
    payload = batch("node-a", gpus=gpus, samples_per_gpu=0)
    payload["samples"] = [
        sample(g, NOW - timedelta(seconds=age), **metrics)
        for g in gpus
        for age, metrics in sorted(ages[g["index"]].items())
    ]
    store_payload(url, payload, received_at=NOW)


def values_of(url: str, *conditions: dict[str, Any]) -> list[dict[int, float | None]]:
    """``shared.values`` of each condition (all planned first, as one evaluation does), keyed by
    GPU index."""
    specs = [
        RuleSpec.model_validate({"name": f"r{i}", "condition": c}) for i, c in enumerate(conditions)
    ]
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            ctx = load_context(session, now=NOW, health_rules=DEFAULT_RULES)
            shared.plan(ctx, specs)
            out = []
            for spec in specs:
                got = shared.values(ctx, spec.condition)  # type: ignore[arg-type]
                out.append({ctx.gpus[key[0]].index: v for key, v in got.items()})
            return out
    finally:
        engine.dispose()


def threshold(metric: str, aggregation: str, window: str = "1m") -> dict[str, Any]:
    """A GPU threshold condition (the comparison plays no part in the values)."""
    return {
        "kind": "threshold",
        "target": "gpu",
        "metric": metric,
        "aggregation": aggregation,
        "window": window,
        "op": ">",
        "threshold": 0,
    }


def test_windows_of_one_scan_each_see_only_their_own_rows(url: str) -> None:
    store(
        url,
        {
            0: {0: {"temp_c": 50}, 10: {"temp_c": 60}, 20: {"temp_c": 70}, 290: {"temp_c": 90}},
            1: {20: {"temp_c": 40}, 30: {"temp_c": 44}},  # nothing in the last 15 s
            2: {0: {"temp_c": None}, 10: {"temp_c": None}},  # rows, but no value
        },
    )
    got = values_of(
        url,
        threshold("temp_c", "avg", "15s"),
        threshold("temp_c", "max", "15s"),
        threshold("temp_c", "avg", "30s"),
        threshold("temp_c", "min", "30s"),
        threshold("temp_c", "max", "5m"),
        threshold("temp_c", "avg", "5m"),
    )
    assert got == [
        {0: 55.0, 2: None},
        {0: 60.0, 2: None},
        {0: 60.0, 1: 42.0, 2: None},
        {0: 50.0, 1: 40.0, 2: None},
        {0: 90.0, 1: 44.0, 2: None},
        {0: 67.5, 1: 42.0, 2: None},
    ]


def test_last_is_each_gpus_newest_sample_even_when_its_value_is_missing(url: str) -> None:
    store(
        url,
        {
            0: {0: {"power_w": 300}, 10: {"power_w": 500}},
            1: {0: {"power_w": None}, 10: {"power_w": 500}},  # newest has no reading
            2: {30: {"power_w": 410}, 40: {"power_w": 420}},  # newest 30 s old
            3: {700: {"power_w": 650}},  # older than the 10 min the newest row is looked for in
        },
    )
    assert values_of(url, threshold("power_w", "last")) == [{0: 300.0, 1: None, 2: 410.0}]


def test_rate_runs_from_the_oldest_sample_inside_the_window_to_the_newest(url: str) -> None:
    count = "ecc_corrected_volatile_count"
    store(
        url,
        {
            # +60 over the last 30 min (120/h); the 70-min-old 0 is outside the 1 h window.
            0: {0: {count: 160}, 900: {count: 130}, 1800: {count: 100}, 4200: {count: 0}},
            1: {0: {count: 5}},  # one sample: no rate
            2: {0: {count: 3}, 1200: {count: 9}},  # a reset
            3: {0: {count: None}, 600: {count: 4}},  # newest has no value
        },
    )
    cond = {"kind": "rate", "metric": count, "window": "1h", "per": "h", "op": ">", "threshold": 0}
    [per_s] = values_of(url, cond)
    assert per_s == {0: 60 / 1800, 1: None, 2: None, 3: None}


def test_breaching_entities_by_binary_search_equal_comparing_every_value() -> None:
    import math
    import random
    from types import SimpleNamespace

    from app.alerts.kinds import compare
    from app.alerts.kinds.threshold import breaching

    rng = random.Random(5)
    for _ in range(2000):
        ctx: Any = SimpleNamespace(cache={})
        values: dict[Any, float | None] = {}
        for i in range(rng.randint(0, 30)):
            r = rng.random()
            pick = rng.choice([0.0, 1.0, 2.0, 0.5, -1.0, rng.uniform(-5, 5)])
            values[(i,)] = None if r < 0.15 else (math.nan if r < 0.2 else pick)
        op = rng.choice([">", ">=", "<", "<=", "==", "!="])
        limit = rng.choice([0.0, 1.0, 0.5, -1.0, rng.uniform(-5, 5), 3600.0])
        scale = rng.choice([1.0, 60.0, 3600.0])
        no_data = rng.random() < 0.5
        expected = [
            key
            for key, v in values.items()
            if (met := compare(None if v is None else v * scale, op, limit))
            or (met is None and no_data)
        ]
        got = breaching(ctx, values, op, limit, scale=scale, with_no_data=no_data)
        assert got == expected, (values, op, limit, scale, no_data)
