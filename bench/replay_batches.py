"""The real agent's batches for one simulated node, made once and replayed with fresh times,
ids and values (what ``bench/load_replay.py`` sends).

:func:`agent_templates` runs the real agent code without a server (:class:`agents.agent.Agent`
over :class:`~agents.simulated.collector.SimulatedCollector` and
:class:`~agents.simulated.host.SimulatedHostSource`, as :class:`agents.simfleet.SimFleet` builds
them) at simulated times and cuts its batches as the agent loop does at the given cadence: the
first batch (topology, NVLinks, host sections), then one host-interval cycle of batches (the
last of which carries the NVLinks and host sections again). :func:`rebuild` makes the batch to
send from one of them: a new ``batch_id``, every ``*_at`` time shifted to the round it stands
for, and the GPU gauges moved a little (energy counted on from the power drawn), so neither the
server's deduplication nor gzip sees the same batch twice.
"""

from __future__ import annotations

import math
import random
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from agents.agent import Agent, AgentConfig
from agents.fleetspec import FleetNode
from agents.payload import Payload, format_timestamp
from agents.simfleet import HOST_ROUNDS
from agents.simulated.collector import SimulatedCollector
from agents.simulated.host import SimulatedHostSource

#: Percent gauges moved by up to ± this many points (kept within 0-100).
PCT_STEP = 5
#: Byte-rate gauges scaled by up to ± this fraction.
RATE_STEP = 0.05
_PCT = ("util_gpu_pct", "util_mem_pct")
_RATES = (
    "pcie_tx_bytes_per_s",
    "pcie_rx_bytes_per_s",
    "nvlink_tx_bytes_per_s",
    "nvlink_rx_bytes_per_s",
)


def rounds_per_batch(interval_s: float, batch_interval_s: float) -> int:
    """Sampling rounds in one batch of the agent loop: it cuts a batch at the first tick at
    which ``batch_interval_s`` less half a round has passed since the previous cut
    (:meth:`agents.agent.Agent.batch_due`), so at the defaults, 10-s rounds and 20-s batches, a
    batch holds 2 rounds and one is sent every 20 s."""
    slack = 0.5 * min(interval_s, batch_interval_s)
    return max(1, math.ceil((batch_interval_s - slack) / interval_s - 1e-9))


@dataclass(frozen=True)
class Template:
    """One batch as the agent cut it: its payload with every ``*_at`` time a ``datetime``
    (``sent_at`` unset), the time of its first round, and its sample count."""

    payload: Payload
    first_at: datetime
    samples: int


def agent_templates(
    node: FleetNode, start: datetime, *, interval_s: float, batch_interval_s: float, work: Path
) -> list[Template]:
    """The batches the real agent of ``node`` cuts when its rounds are taken at ``start``,
    ``start + interval_s`` …: the first, then ``ceil(host interval / batch period)`` more.

    ``work`` holds the agent's (unused) spool directory.
    """
    collector = SimulatedCollector(node.hostname, node.gpu_count)
    host = SimulatedHostSource(collector)
    config = AgentConfig(
        hostname=node.hostname,
        spool_dir=work / node.hostname,
        labels=dict(node.labels),
        interval_s=interval_s,
        batch_interval_s=batch_interval_s,
        host_interval_s=min(60.0, HOST_ROUNDS * interval_s),
    )
    agent = Agent(config, collector, host_sources=[host])
    rounds = rounds_per_batch(interval_s, batch_interval_s)
    cycle = max(1, math.ceil(config.host_interval_s / (rounds * interval_s) - 1e-9))
    templates = []
    tick = 0
    for _ in range(1 + cycle):
        first_at = start + timedelta(seconds=tick * interval_s)
        for _ in range(rounds):
            agent.collect(start + timedelta(seconds=tick * interval_s))
            tick += 1
        payload = agent.take_payload()
        if payload is None:
            raise RuntimeError(f"{node.hostname}: the simulated agent cut an empty batch")
        templates.append(Template(_parsed(payload), first_at, len(payload["samples"])))
    collector.close()
    return templates


def rebuild(
    template: Template,
    first_at: datetime,
    rng: random.Random,
    energy_j: dict[str, float],
    interval_s: float,
) -> Payload:
    """The batch to send for ``template`` whose first round is at ``first_at``: a new
    ``batch_id``, ``sent_at`` unset, every time shifted by ``first_at - template.first_at``,
    GPU gauges moved (percent by ±:data:`PCT_STEP` points, byte rates by ±:data:`RATE_STEP`,
    power within its limit, one more degree or one less) and ``energy_j`` counted on per GPU in
    ``energy_j`` (uuid → joules, updated) from the power drawn over ``interval_s``."""
    shift = first_at - template.first_at
    payload: Payload = {}
    for key, value in template.payload.items():
        if key == "samples":
            payload[key] = [_moved(s, shift, rng, energy_j, interval_s) for s in value]
        else:
            payload[key] = _shifted(value, shift)
    payload["batch_id"] = str(uuid.uuid4())
    payload["sent_at"] = None
    return payload


def _moved(
    sample: Mapping[str, Any],
    shift: timedelta,
    rng: random.Random,
    energy_j: dict[str, float],
    interval_s: float,
) -> dict[str, Any]:
    out = dict(sample)
    out["sampled_at"] = format_timestamp(sample["sampled_at"] + shift)
    for key in _PCT:
        if isinstance(out.get(key), int):
            out[key] = min(100, max(0, out[key] + rng.randint(-PCT_STEP, PCT_STEP)))
    for key in _RATES:
        if isinstance(out.get(key), int | float):
            out[key] = max(0, int(out[key] * (1 + rng.uniform(-RATE_STEP, RATE_STEP))))
    for key in ("temp_c", "mem_temp_c"):
        if isinstance(out.get(key), int):
            out[key] += rng.randint(-1, 1)
    power, limit = out.get("power_w"), out.get("power_limit_w")
    if isinstance(power, int | float):
        power = max(0.0, power * (1 + rng.uniform(-RATE_STEP, RATE_STEP)))
        if isinstance(limit, int | float):
            power = min(power, float(limit))
        out["power_w"] = round(power, 2)
    if isinstance(out.get("energy_j"), int | float) and isinstance(power, int | float):
        gpu = out["gpu_uuid"]
        energy_j[gpu] = energy_j.get(gpu, float(out["energy_j"])) + power * interval_s
        out["energy_j"] = round(energy_j[gpu], 3)
    return out


def _parsed(value: Any, key: str = "") -> Any:
    """``value`` with every ``*_at`` text (RFC 3339) made a ``datetime``."""
    if isinstance(value, dict):
        return {k: _parsed(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_parsed(v) for v in value]
    if key.endswith("_at") and isinstance(value, str):
        return datetime.fromisoformat(value)
    return value


def _shifted(value: Any, shift: timedelta) -> Any:
    """A copy of ``value`` (parsed by :func:`_parsed`) with its times moved by ``shift`` and
    written back as RFC 3339 text."""
    if isinstance(value, dict):
        return {k: _shifted(v, shift) for k, v in value.items()}
    if isinstance(value, list):
        return [_shifted(v, shift) for v in value]
    if isinstance(value, datetime):
        return format_timestamp(value + shift)
    return value
