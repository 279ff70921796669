"""Small factories for tests: tokens, GPUs and ingest payloads (schema version 1)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from app.auth import service as auth_service
from app.db import make_engine, make_session_factory, session_scope


def create_token(url: str, hostname: str) -> str:
    """Create a node token for ``hostname`` in the database at ``url``; returns the token."""
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            _, token = auth_service.create_token(session, hostname=hostname)
        return token
    finally:
        engine.dispose()


def gpu(index: int, *, hostname: str = "node-a", **overrides: Any) -> dict[str, Any]:
    """An H100-like GPU inventory entry with a UUID derived from hostname and index."""
    entry = {
        "uuid": f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{hostname}/{index}')}",
        "index": index,
        "name": "NVIDIA H100 80GB HBM3",
        "pci_bus_id": f"00000000:{0x18 + index * 0x10:02X}:00.0",
        "mem_total_bytes": 85520809984,
        "mig_mode": "disabled",
        "state": "ok",
        "state_reason": None,
    }
    entry.update(overrides)
    return entry


def sample(gpu_entry: dict[str, Any], at: datetime, **metrics: Any) -> dict[str, Any]:
    """A sample of ``gpu_entry`` at ``at`` with plausible defaults, overridden by ``metrics``."""
    values: dict[str, Any] = {
        "util_gpu_pct": 50,
        "util_mem_pct": 20,
        "mem_used_bytes": 40 * 2**30,
        "mem_free_bytes": 39 * 2**30,
        "power_w": 350.5,
        "power_limit_w": 700,
        "temp_c": 55,
        "sm_clock_mhz": 1755,
        "pstate": 0,
        "clocks_event_reasons": 0,
    }
    values.update(metrics)
    return {"gpu_uuid": gpu_entry["uuid"], "sampled_at": iso(at), **values}


def xid_batch(hostname: str, at: datetime, *, temp_c: float = 60, xid: int = 79) -> dict[str, Any]:
    """One GPU of ``hostname`` sampled at ``at`` (``temp_c``) with an Xid ``xid`` on it."""
    g = gpu(0, hostname=hostname)
    payload = batch(hostname, gpus=[g], samples_per_gpu=0)
    payload["samples"] = [sample(g, at, temp_c=temp_c)]
    payload["events"] = [
        {
            "kind": "xid",
            "occurred_at": iso(at),
            "gpu_uuid": g["uuid"],
            "xid": xid,
            "message": f"NVRM: Xid (PCI:0000:18:00): {xid}, GPU has fallen off the bus.",
        }
    ]
    return payload


def wait_until(predicate: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    """Poll ``predicate`` until it holds or ``timeout_s`` passed; return its last value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def iso(at: datetime) -> str:
    """RFC 3339 with ``Z``."""
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def batch(
    hostname: str = "node-a",
    *,
    gpus: int | list[dict[str, Any]] = 2,
    samples_per_gpu: int = 3,
    start: datetime | None = None,
    interval_s: float = 5.0,
    events: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """A complete, valid ingest payload; ``overrides`` replace top-level keys."""
    gpu_list = [gpu(i, hostname=hostname) for i in range(gpus)] if isinstance(gpus, int) else gpus
    start = start or datetime.now(UTC) - timedelta(seconds=samples_per_gpu * interval_s)
    payload: dict[str, Any] = {
        "schema_version": 1,
        "batch_id": str(uuid.uuid4()),
        "sent_at": iso(datetime.now(UTC)),
        "node": {
            "hostname": hostname,
            "labels": labels if labels is not None else {"cluster": "test", "rack": "r01"},
            "agent_version": "0.1.0",
            "driver_version": "570.133.20",
            "cuda_version": "12.8",
        },
        "gpus": gpu_list,
        "samples": [
            sample(g, start + timedelta(seconds=i * interval_s))
            for g in gpu_list
            for i in range(samples_per_gpu)
        ],
        "events": events or [],
    }
    payload.update(overrides)
    return payload


# --- alerts (issue 5) -----------------------------------------------------------------------


def store_payload(
    url: str, payload: dict[str, Any], *, received_at: datetime, keep_sent_at: bool = False
) -> dict[str, Any]:
    """Store ``payload`` through the ingest service as if received at ``received_at`` (the node
    and its token created on first use), so alert tests control the server's clock; returns
    the ingest answer. The batch is sent when received (``sent_at`` = ``received_at``: the
    agent's clock is right, else the node's skew is judged, app.health.checks.clock), unless
    ``keep_sent_at`` keeps the payload's own ``sent_at`` (a skewed clock on purpose)."""
    if not keep_sent_at:
        payload = {**payload, "sent_at": iso(received_at)}
    from app.fleet import service as fleet_service
    from app.ingest import service as ingest_service
    from app.ingest.schemas import IngestBatchIn

    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            node = fleet_service.get_or_create_node(session, hostname=payload["node"]["hostname"])
            return dict(
                ingest_service.store_batch(
                    session,
                    node=node,
                    batch=IngestBatchIn.model_validate(payload),
                    received_at=received_at,
                    future_tolerance_s=300.0,
                    retention_days=30.0,
                )
            )
    finally:
        engine.dispose()


def wipe_alerts(url: str) -> None:
    """Delete every alerting row (``tests.dbs.wipe`` leaves these tables alone)."""
    from sqlalchemy import delete

    from app.alerts.models import AlertInhibitRule, AlertRule, AlertSilence, Runbook

    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            # instances, events, acks cascade
            for model in (AlertRule, AlertSilence, Runbook, AlertInhibitRule):
                session.execute(delete(model))
    finally:
        engine.dispose()


def add_rules(url: str, *docs: dict[str, Any]) -> None:
    """Create alert rules from their documents (``RuleSpec`` JSON)."""
    from app.alerts import store
    from app.alerts.spec import RuleSpec

    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            for doc in docs:
                store.create_rule(session, spec=RuleSpec.model_validate(doc))
    finally:
        engine.dispose()


def evaluate_at(url: str, now: datetime) -> Any:
    """One alert evaluation at ``now`` (default health rules); returns its report and fails
    the test if a rule failed."""
    from app.alerts.evaluator import evaluate
    from app.health.rules import DEFAULT_RULES

    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            report = evaluate(session, now=now, health_rules=DEFAULT_RULES)
        assert report.failed == {}, report.failed
        return report
    finally:
        engine.dispose()


def alert_states(url: str) -> dict[tuple[str, str], tuple[str, float | None]]:
    """(rule, entity) → (state, value) of every alert instance; the entity is
    ``hostname[/gpu_index][/device…]`` from the instance labels."""
    from sqlalchemy import select

    from app.alerts.models import AlertInstance, AlertRule

    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            rows = session.execute(select(AlertRule.name, AlertInstance).join(AlertRule))
            out = {}
            for name, inst in rows:
                parts = [inst.labels.get(k) for k in ("hostname", "gpu_index", "device")]
                parts += [inst.labels.get("mountpoint"), inst.labels.get("port")]
                out[(name, "/".join(str(p) for p in parts if p is not None))] = (
                    inst.state,
                    inst.value,
                )
            return out
    finally:
        engine.dispose()
