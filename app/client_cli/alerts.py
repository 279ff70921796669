"""``fleetwatch alerts`` (``GET /api/v1/alerts``) and ``fleetwatch ack ALERT_ID``
(``POST /api/v1/alerts/{id}/ack``)."""

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
from app.client_cli.output import Column, age, echo, print_json, print_table


class AlertState(StrEnum):
    """An alert state the API lists by."""

    firing = "firing"
    pending = "pending"
    resolved = "resolved"


class Severity(StrEnum):
    """A rule's severity."""

    critical = "critical"
    warning = "warning"
    info = "info"


COLUMNS = (
    Column("ID", 8),
    Column("STATE", 8, coloured=True),
    Column("SEVERITY", 8, coloured=True),
    Column("RULE", 32),
    Column("ENTITY", 40),
    Column("SINCE", 10),
    Column("MARKS", 26),
    Column("SUMMARY", 80),
)


def entity(labels: dict[str, Any]) -> str:
    """What an alert is about, from its labels: ``gpu-07 GPU 3``, ``gpu-07 /scratch`` …"""
    parts = [str(labels.get("hostname") or "-")]
    if labels.get("gpu_index") not in (None, ""):
        parts.append(f"GPU {labels['gpu_index']}")
    parts += [str(labels[k]) for k in ("device", "mountpoint", "port") if labels.get(k)]
    return " ".join(parts)


def marks(alert: dict[str, Any]) -> str:
    """``silenced``, ``acked``, ``inhibited`` as they apply, comma-separated."""
    words = [w for w in ("silenced", "acked") if alert.get(w)]
    if alert.get("inhibited_by"):
        words.append("inhibited by " + ",".join(str(i) for i in alert["inhibited_by"]))
    return ",".join(words)


def alerts(
    state: Annotated[
        list[AlertState] | None,
        typer.Option("--state", help="repeatable; default firing and pending"),
    ] = None,
    severity: Annotated[Severity | None, typer.Option("--severity")] = None,
    rule: Annotated[str | None, typer.Option("--rule", help="one rule's alerts")] = None,
    team: Annotated[str | None, typer.Option("--team", help="the rules' owner team")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=5000)] = 500,
    json_: JsonOpt = False,
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """Firing and pending alerts (or --state), most recently evaluated first.

    --json: GET /api/v1/alerts as it is. Exit 1 when the server cannot be reached or refuses.
    """
    with connect(server, token, timeout) as api:
        rows = api.get(
            "/alerts",
            state=[s.value for s in state or []],
            severity=severity.value if severity else None,
            rule=rule,
            owner_team=team,
            limit=limit,
        )
    if json_:
        print_json(rows)
        return
    now = datetime.now(UTC)
    cells = [
        [
            a["id"],
            a["state"],
            a["severity"],
            a["rule"],
            entity(a.get("labels") or {}),
            age(a.get("active_since") or a.get("resolved_at"), now=now, never="-"),
            marks(a),
            a["summary"],
        ]
        for a in rows
    ]
    print_table(COLUMNS, cells, empty="no alert matches")


def ack(
    alert_id: Annotated[int, typer.Argument(min=1, help="the alert's id (fleetwatch alerts)")],
    by: Annotated[str | None, typer.Option("--by", help="who acks (default: user@host)")] = None,
    note: Annotated[str, typer.Option("--note", help="what is being done")] = "",
    json_: JsonOpt = False,
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """Acknowledge a pending or firing alert (held until it resolves).

    --json: the ack as POST /api/v1/alerts/{id}/ack answers. Exit 1 for an unknown or
    resolved alert, or when the server cannot be reached.
    """
    from app.lifecycle.cli import _default_actor

    owner = by if by is not None else _default_actor()
    with connect(server, token, timeout) as api:
        done = api.post(f"/alerts/{alert_id}/ack", {"owner": owner, "note": note})
    if json_:
        print_json(done)
        return
    echo(f"acknowledged alert {alert_id} as {done['owner']}" + (f": {note}" if note else ""))
