"""A realistic small fleet for the browser tests and the README screenshot, put in through the
real ingest API (one token per node), plus two nodes made stale by moving their last batch back."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import update

from app.db import make_engine, make_session_factory, session_scope
from app.fleet.models import Node
from tests.factories import batch, create_token, gpu, iso, sample

CLUSTERS = ("a", "b")
TEAMS = ("llm", "vision", "infra", "speech")


def post_batch(base_url: str, token: str, payload: dict[str, Any]) -> dict[str, Any]:
    """POST one batch to the ingest API; raises on an error status; returns the answer."""
    response = httpx.post(
        f"{base_url}/api/v1/ingest",
        json=payload,
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    response.raise_for_status()
    result: dict[str, Any] = response.json()
    return result


def node_history(
    hostname: str,
    *,
    gpus: int = 8,
    minutes: int = 60,
    interval_s: int = 10,
    seed: int = 0,
    lost: int | None = None,
    no_util: bool = False,
    skew_s: float = 0.0,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One batch holding ``minutes`` of plausible H100 samples per GPU (a training job's sawtooth).
    ``lost`` marks that GPU index lost (NVML GPU_IS_LOST, every metric null from then on)."""
    rng = random.Random(seed)
    now = datetime.now(UTC)
    inventory = [
        gpu(
            i,
            hostname=hostname,
            state="lost" if i == lost else "ok",
            state_reason="NVML_ERROR_GPU_IS_LOST" if i == lost else None,
        )
        for i in range(gpus)
    ]
    samples = []
    steps = minutes * 60 // interval_s
    for g in inventory:
        base = rng.uniform(55, 92)
        for k in range(steps):
            at = now - timedelta(seconds=(steps - k) * interval_s)
            phase = math.sin(k / 17 + g["index"]) * 8
            util = max(0.0, min(100.0, base + phase + rng.uniform(-4, 4)))
            if g["state"] == "lost" and k > steps // 2:
                metrics = {name: None for name in ("util_gpu_pct", "mem_used_bytes", "power_w")}
                metrics.update(temp_c=None, sm_clock_mhz=None, pstate=None)
                samples.append(sample(g, at, **metrics, clocks_event_reasons=None))
                continue
            samples.append(
                sample(
                    g,
                    at,
                    util_gpu_pct=None if no_util else round(util, 1),
                    mem_used_bytes=int((40 + util / 3) * 2**30),
                    power_w=round(120 + util * 5.6 + rng.uniform(-10, 10), 1),
                    temp_c=round(38 + util * 0.45 + rng.uniform(-1, 1)),
                    sm_clock_mhz=1980 if util > 20 else 345,
                    clocks_event_reasons=0x4 if util > 90 else 0,
                )
            )
    events = []
    if lost is not None:
        events.append(
            {
                "occurred_at": iso(now - timedelta(minutes=minutes // 2)),
                "kind": "xid",
                "gpu_uuid": inventory[lost]["uuid"],
                "pci_bus_id": inventory[lost]["pci_bus_id"],
                "xid": 79,
                "message": f"NVRM: Xid (PCI:0000:{inventory[lost]['pci_bus_id'][9:16]}): 79, "
                "GPU has fallen off the bus.",
            }
        )
    return batch(
        hostname,
        gpus=inventory,
        samples=samples,
        events=events,
        labels=labels,
        sent_at=iso(now + timedelta(seconds=skew_s)),
    )


def make_stale(db_url: str, hostname: str, *, minutes: float) -> None:
    """Pretend the node's last batch arrived ``minutes`` ago (an agent that stopped); its newest
    sample is dated then too (the GPU rows keep their values)."""
    engine = make_engine(db_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            back = datetime.now(UTC) - timedelta(minutes=minutes)
            session.execute(
                update(Node)
                .where(Node.hostname == hostname)
                .values(last_seen_at=back, last_sample_at=back)
            )
    finally:
        engine.dispose()


def seed_fleet(db_url: str, base_url: str, *, nodes: int = 16, minutes: int = 60) -> list[str]:
    """``nodes`` nodes over two clusters: one with a lost GPU, two stale, one whose GPUs report
    no utilization, one with a skewed clock, one never seen. Returns the hostnames."""
    names = []
    for i in range(nodes - 1):
        cluster = CLUSTERS[i * len(CLUSTERS) // nodes]
        hostname = f"gpu-{cluster}-{i + 1:03d}"
        labels = {
            "cluster": cluster,
            "ib_pod": f"pod-{i // 4 + 1}",
            "rack": f"r{i // 2 + 1:02d}",
            "team": TEAMS[i % len(TEAMS)],
        }
        payload = node_history(
            hostname,
            minutes=minutes,
            seed=i,
            lost=3 if i == 2 else None,
            no_util=i == 9,
            skew_s=4.2 if i == 6 else 0.0,
            labels=labels,
        )
        post_batch(base_url, create_token(db_url, hostname), payload)
        names.append(hostname)
    for hostname in (names[4], names[11]):
        make_stale(db_url, hostname, minutes=14)
    spare = f"gpu-b-{nodes:03d}"
    create_token(db_url, spare)  # a node with a token whose agent never reported
    return [*names, spare]
