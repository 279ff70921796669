"""What a rule can look at: per target (``gpu``, ``node``, ``disk``, ``mount``, ``nfs``,
``nic``) the time-series table, the columns naming an entity within its node, and each metric
as a SQL expression over that table (stored columns, plus a few derived 0/1 signals).

Derived GPU signals: ``thermal_throttled`` / ``power_throttled`` are 1 when any thermal
(0x20 SW thermal, 0x40 HW thermal, 0x8 HW slowdown) / power (0x4 SW power cap, 0x80 HW power
brake) bit of ``clocks_event_reasons`` is set (NVML "Clocks Event Reasons");
``pcie_width_downtrained`` is 1 when ``pcie_link_width < pcie_link_width_max``;
``gpu_lost`` is 1 when ``gpu.state`` is ``lost``/``unknown_error`` (NVML ``GPU_IS_LOST``),
always the current state. Node metrics are current values from the inventory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Float, Table, case, cast, func
from sqlalchemy.sql.elements import ColumnElement

from app.health.rules import POWER_BITS, THERMAL_BITS
from app.metrics.catalog import METRICS
from app.series.tables import DiskSample, MountSample, NfsSample, NicPortSample, gpu_sample

Expr = Callable[[Any], ColumnElement[Any]]


def _col(name: str) -> Expr:
    return lambda t: cast(t.c[name], Float)


def _flag(test: Callable[[Any], ColumnElement[bool]], source: str) -> Expr:
    return lambda t: case((t.c[source].is_(None), None), (test(t), 1.0), else_=0.0)


@dataclass(frozen=True)
class Target:
    """A sample table and its metrics. ``keys`` name the entity within its owner (a disk's
    ``device``); ``owner`` is ``gpu_id`` or ``node_id``."""

    table: Table
    owner: str
    keys: tuple[str, ...]
    metrics: dict[str, Expr]
    counters: frozenset[str] = field(default_factory=frozenset)


_GPU_COUNTERS = frozenset(
    m.name for m in METRICS if m.name.endswith("_count") and "pending" not in m.name
) | {"energy_j"}

TARGETS: dict[str, Target] = {
    "gpu": Target(
        gpu_sample,
        "gpu_id",
        (),
        {
            **{m.name: _col(m.name) for m in METRICS},
            "thermal_throttled": _flag(
                lambda t: t.c.clocks_event_reasons.op("&")(THERMAL_BITS) != 0,
                "clocks_event_reasons",
            ),
            "power_throttled": _flag(
                lambda t: t.c.clocks_event_reasons.op("&")(POWER_BITS) != 0,
                "clocks_event_reasons",
            ),
            "pcie_width_downtrained": lambda t: case(
                (t.c.pcie_link_width.is_(None) | t.c.pcie_link_width_max.is_(None), None),
                (t.c.pcie_link_width < t.c.pcie_link_width_max, 1.0),
                else_=0.0,
            ),
        },
        _GPU_COUNTERS,
    ),
    "disk": Target(
        DiskSample.__table__,  # type: ignore[arg-type]
        "node_id",
        ("device",),
        {
            n: _col(n)
            for n in (
                "read_bytes_per_s",
                "write_bytes_per_s",
                "read_iops",
                "write_iops",
                "busy_pct",
                "avg_wait_s",
            )
        },
    ),
    "mount": Target(
        MountSample.__table__,  # type: ignore[arg-type]
        "node_id",
        ("mountpoint",),
        {
            "used_bytes": _col("used_bytes"),
            "total_bytes": _col("total_bytes"),
            "used_pct": lambda t: case(
                (t.c.total_bytes > 0, 100.0 * cast(t.c.used_bytes, Float) / t.c.total_bytes),
                else_=None,
            ),
        },
    ),
    "nfs": Target(
        NfsSample.__table__,  # type: ignore[arg-type]
        "node_id",
        ("mountpoint",),
        {
            n: _col(n)
            for n in (
                "read_bytes",
                "write_bytes",
                "ops",
                "retransmits",
                "read_bytes_per_s",
                "write_bytes_per_s",
                "ops_per_s",
                "retransmits_per_s",
                "avg_rtt_s",
            )
        },
        frozenset({"read_bytes", "write_bytes", "ops", "retransmits"}),
    ),
    "nic": Target(
        NicPortSample.__table__,  # type: ignore[arg-type]
        "node_id",
        ("device", "port"),
        {
            **{
                n: _col(n)
                for n in (
                    "rate_gbps",
                    "tx_bytes_per_s",
                    "rx_bytes_per_s",
                    "symbol_error_count",
                    "link_downed_count",
                    "link_error_recovery_count",
                    "port_rcv_errors_count",
                    "port_xmit_discards_count",
                )
            },
            "port_active": lambda t: case(
                (t.c.state.is_(None), None), (func.upper(t.c.state) == "ACTIVE", 1.0), else_=0.0
            ),
        },
        frozenset(
            {
                "symbol_error_count",
                "link_downed_count",
                "link_error_recovery_count",
                "port_rcv_errors_count",
                "port_xmit_discards_count",
            }
        ),
    ),
}

#: Node metrics (current inventory values, ``last`` only): GPUs of the inventory absent from the
#: latest batch, GPUs lost, and the latest batch's clock skew.
NODE_METRICS = ("gpu_missing_count", "gpu_lost_count", "clock_skew_s")
#: GPU metrics read from ``gpu`` rather than samples (current state only).
GPU_STATE_METRICS = ("gpu_lost",)

ALL_TARGET_METRICS: dict[str, frozenset[str]] = {
    **{name: frozenset(t.metrics) for name, t in TARGETS.items()},
    "node": frozenset(NODE_METRICS),
    "gpu_stored": frozenset(m.name for m in METRICS),
}
ALL_TARGET_METRICS = {
    **ALL_TARGET_METRICS,
    "gpu": ALL_TARGET_METRICS["gpu"] | frozenset(GPU_STATE_METRICS),
}
COUNTER_TARGET_METRICS: dict[str, frozenset[str]] = {
    name: t.counters for name, t in TARGETS.items() if t.counters
}
