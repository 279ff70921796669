"""The scheduler's whole-fleet evaluation on Postgres reads its SQL-only aggregates (GPU and
host rates, host windows, host ``last``) ahead on a second connection
(``app.alerts.kinds.prefetch``): the values are those read on the evaluator's own connection,
a failed read is read again there, and no read outlives the evaluation."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app.alerts.context import load_context
from app.alerts.evaluator import evaluate
from app.alerts.kinds import prefetch, shared
from app.alerts.spec import RuleSpec
from app.db import session_scope
from app.health.rules import DEFAULT_RULES
from app.series import rule_scans
from app.series.recent_gpu import RecentGpuSamples
from tests.app.section_factories import disk, nfs_mount, nic_port
from tests.dbs import session_factory, wipe
from tests.factories import (
    add_rules,
    alert_states,
    batch,
    gpu,
    sample,
    store_payload,
    wipe_alerts,
)

NOW = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=2)
RULES = [
    {"kind": "threshold", "target": "gpu", "metric": "temp_c", "aggregation": "avg",
     "window": "5m", "op": ">", "threshold": 80},
    {"kind": "rate", "target": "gpu", "metric": "ecc_corrected_volatile_count", "window": "1h",
     "per": "h", "op": ">", "threshold": 10},
    {"kind": "threshold", "target": "disk", "metric": "avg_wait_s", "aggregation": "avg",
     "window": "5m", "op": ">", "threshold": 0.05},
    {"kind": "threshold", "target": "disk", "metric": "busy_pct", "aggregation": "max",
     "window": "10m", "op": ">", "threshold": 90},
    {"kind": "threshold", "target": "nfs", "metric": "avg_rtt_s", "aggregation": "avg",
     "window": "5m", "op": ">", "threshold": 0.01},
    {"kind": "threshold", "target": "nic", "metric": "port_active", "op": "==",
     "threshold": 0},
]  # fmt: skip


@pytest.fixture
def url(postgres_url: str) -> Iterator[str]:
    """Three nodes of two GPUs with ECC counters rising, a slow disk, a slow NFS mount and a
    port down among them, over the last 10 minutes."""
    for n, hostname in enumerate(("node-a", "node-b", "node-c")):
        gpus = [gpu(i, hostname=hostname) for i in range(2)]
        payload = batch(hostname, gpus=gpus, samples_per_gpu=0)
        ages = range(600, -1, -30)
        payload["samples"] = [
            sample(
                g,
                NOW - timedelta(seconds=age),
                temp_c=70.0 + 10 * n + g["index"],
                ecc_corrected_volatile_count=(600 - age) * (n + g["index"]),
            )
            for g in gpus
            for age in ages
        ]
        at = [NOW - timedelta(seconds=age) for age in range(600, -1, -60)]
        payload["disks"] = [disk(t, avg_wait_s=0.01 * (n + 1) * (i % 3)) for i, t in enumerate(at)]
        payload["nfs_mounts"] = [nfs_mount(t, avg_rtt_s=0.005 * n) for t in at]
        payload["nic_ports"] = [nic_port(NOW, state="DOWN" if n == 1 else "ACTIVE")]
        store_payload(postgres_url, payload, received_at=NOW)
    yield postgres_url
    wipe_alerts(postgres_url)
    wipe(postgres_url)


@pytest.fixture
def factory(url: str) -> Iterator[Any]:
    """Sessions on the seeded database."""
    with session_factory(url) as sessions:
        yield sessions


def specs() -> list[RuleSpec]:
    return [RuleSpec.model_validate({"name": f"r{i}", "condition": c}) for i, c in enumerate(RULES)]


def aggregates(session: Any, *, ahead: bool) -> dict[str, dict[Any, float | None]]:
    """Every rule's aggregate per entity, read as the scheduler's timer lane does, with or
    without the read-ahead."""
    ctx = load_context(session, now=NOW, health_rules=DEFAULT_RULES)
    ctx.recent_gpu = RecentGpuSamples(consume_feed=True)
    rules = specs()
    shared.plan(ctx, rules)
    if ahead:
        shared.read_ahead(ctx, "16MB")
        assert ctx.cache[shared._AHEAD].slots == {
            ("gpu", "rate", 3600.0),
            ("disk", "window", 300.0),
            ("disk", "window", 600.0),
            ("nfs", "window", 300.0),
            ("nic", "last", 0.0),
        }  # the GPU window comes from memory, not SQL
    try:
        got = {s.name: dict(shared.values(ctx, s.condition)) for s in rules}  # type: ignore[arg-type]
        if ahead:
            assert ctx.cache[shared._AHEAD].untaken == 0  # each rule took its read
        return got
    finally:
        shared.finish(ctx)


def test_values_read_ahead_equal_those_read_in_the_evaluators_transaction(factory: Any) -> None:
    with session_scope(factory) as session:
        expected = aggregates(session, ahead=False)
    with session_scope(factory) as session:
        got = aggregates(session, ahead=True)
    assert got == expected
    # Every kind of slot has entities and real values (a check on empty data would pass).
    assert all(len(v) >= 3 for v in expected.values()), expected
    rates = sorted(v for v in expected["r1"].values() if v is not None)
    assert rates[0] == 0.0 and rates[-1] == pytest.approx(3.0)  # per second: (n + index)
    assert sorted(expected["r5"].values()) == [0.0, 1.0, 1.0]  # port_active: node-b's is down


def test_a_failed_read_ahead_is_read_again_on_the_evaluators_connection(
    factory: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    main = threading.get_ident()
    real = rule_scans.gpu_rates

    def fails_elsewhere(ctx: Any, window_s: float, metrics: list[str]) -> list[Any]:
        if threading.get_ident() != main:
            raise RuntimeError("connection lost")
        return real(ctx, window_s, metrics)

    with session_scope(factory) as session:
        expected = aggregates(session, ahead=False)
    monkeypatch.setattr(rule_scans, "gpu_rates", fails_elsewhere)
    with (
        caplog.at_level(logging.WARNING, logger=prefetch.__name__),
        session_scope(factory) as session,
    ):
        got = aggregates(session, ahead=True)
    assert got == expected
    assert "reading [('gpu', 'rate', 3600.0)] ahead failed" in caplog.text


def test_an_evaluation_fires_and_leaves_no_read_running(url: str, factory: Any) -> None:
    add_rules(url, *({"name": f"r{i}", "condition": c} for i, c in enumerate(RULES)))
    with session_scope(factory) as session:
        report = evaluate(
            session, now=NOW, health_rules=DEFAULT_RULES,
            recent_gpu=RecentGpuSamples(consume_feed=True),
        )  # fmt: skip
    assert not report.failed and report.transitions > 0
    assert not [t for t in threading.enumerate() if t.name.startswith("alert-read-ahead")]
    states = alert_states(url)
    assert {key for key, (state, _) in states.items() if state in ("pending", "firing")} >= {
        ("r1", "node-c/1"),  # ECC rising 3 per second, 10,800 per hour
        ("r5", "node-b/mlx5_0/1"),
    }, states
