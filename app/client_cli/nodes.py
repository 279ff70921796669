"""``fleetwatch nodes``: the fleet's nodes with health, GPUs, last contact and lifecycle state,
from three requests whatever the fleet's size (``/nodes``, ``/health``, ``/lifecycle``)."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

import typer

from app.client_cli.options import (
    DEFAULT_SERVER,
    JsonOpt,
    ServerOpt,
    TimeoutOpt,
    TokenOpt,
    connect,
)
from app.client_cli.output import Column, age, print_json, print_table


class HealthState(StrEnum):
    """A node's health state, as ``GET /api/v1/health`` names it."""

    healthy = "healthy"
    degraded = "degraded"
    unhealthy = "unhealthy"
    unknown = "unknown"


def checked_labels(values: list[str] | None) -> list[str]:
    """``--label``: each ``KEY=VALUE`` with a key.

    Raises:
        typer.BadParameter: an entry without ``=`` or without a key.
    """
    for value in values or []:
        key, sep, _ = value.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"expected KEY=VALUE, e.g. cluster=a, got {value!r}")
    return list(values or [])


LabelOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--label",
        callback=checked_labels,
        help="KEY=VALUE: only nodes with this label value; repeatable (all must hold)",
    ),
]
#: The ``lifecycle`` of a node ``GET /api/v1/lifecycle`` does not list.
IN_SERVICE = {
    "state": "in_service",
    "since": None,
    "reason": None,
    "cause": None,
    "cause_ref": None,
}
COLUMNS = (
    Column("HOSTNAME", 40),
    Column("HEALTH", 9, coloured=True),
    Column("GPUS", 14),
    Column("LAST SEEN", 12),
    Column("LIFECYCLE", 11),
    Column("REASONS", 70),
)


def merge(
    nodes: list[dict[str, Any]], health: dict[str, Any], out: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Each ``GET /nodes`` entry with two keys added: ``health`` (its ``GET /health`` entry:
    state, cluster, group, reasons, gpu_counts; ``None`` if the node came after that read) and
    ``lifecycle`` (state, since, reason, cause, cause_ref; ``in_service`` with nulls when it
    is not out of service)."""
    by_host = {n["hostname"]: n for n in health.get("nodes", [])}
    out_by_host = {o["hostname"]: o for o in out}
    merged = []
    for node in nodes:
        state = by_host.get(node["hostname"])
        if state is not None:
            state = {k: v for k, v in state.items() if k not in ("hostname", "gpus")}
        lifecycle = out_by_host.get(node["hostname"])
        if lifecycle is not None:
            lifecycle = {k: v for k, v in lifecycle.items() if k != "hostname"}
        merged.append({**node, "health": state, "lifecycle": lifecycle or dict(IN_SERVICE)})
    return merged


def row(node: dict[str, Any], *, now: datetime) -> list[str]:
    """A node's table cells."""
    health = node["health"] or {}
    reasons = [r["text"] for r in health.get("reasons", [])]
    gpus = str(node["gpu_count"])
    if node.get("gpus_not_ok"):
        gpus += f" ({node['gpus_not_ok']} not ok)"
    shown = reasons[0] if reasons else "-"
    if len(reasons) > 1:
        shown = f"{shown} (+{len(reasons) - 1} more)"
    return [
        node["hostname"],
        health.get("state", "-"),
        gpus,
        age(node.get("last_seen_at"), now=now),
        node["lifecycle"]["state"],
        shown,
    ]


def nodes(
    state: Annotated[
        list[HealthState] | None,
        typer.Option("--state", help="only nodes in this health state; repeatable"),
    ] = None,
    label: LabelOpt = None,
    json_: JsonOpt = False,
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """Nodes with health, GPUs, last seen and lifecycle state.

    --json: each node of GET /api/v1/nodes with its "health" and "lifecycle" added. Exit 1
    when the server cannot be reached or refuses.
    """
    with connect(server, token, timeout) as api:
        listed = api.get("/nodes", label=label)
        health = api.get("/health", label=label)
        out = api.get("/lifecycle")
    merged = merge(listed, health, out)
    if state:
        wanted = {s.value for s in state}
        merged = [n for n in merged if (n["health"] or {}).get("state") in wanted]
    if json_:
        print_json(merged)
        return
    now = datetime.now(UTC)
    print_table(COLUMNS, [row(n, now=now) for n in merged], empty="no node matches")
