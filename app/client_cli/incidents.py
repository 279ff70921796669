"""``fleetwatch incidents``: a node's related fault events, newest first
(``GET /api/v1/incidents``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

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

COLUMNS = (
    Column("ID", 8),
    Column("NODE", 40),
    Column("STATE", 9, coloured=True),
    Column("STATUS", 6, coloured=True),
    Column("OPENED", 10),
    Column("LAST EVENT", 10),
    Column("EVENTS", 6),
    Column("GPUS", 16),
    Column("XIDS", 16),
    Column("ACTION", 70),
)


def incidents(
    node: Annotated[str | None, typer.Option("--node", help="one node's (hostname)")] = None,
    open_: Annotated[bool, typer.Option("--open", help="only incidents still open")] = False,
    limit: Annotated[int, typer.Option("--limit", min=1, max=5000)] = 200,
    json_: JsonOpt = False,
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """Incidents (a node's related fault events), newest first.

    --json: GET /api/v1/incidents as it is. Exit 1 when the server cannot be reached or
    refuses.
    """
    with connect(server, token, timeout) as api:
        rows = api.get("/incidents", node=node, status="open" if open_ else None, limit=limit)
    if json_:
        print_json(rows)
        return
    now = datetime.now(UTC)
    cells = [
        [
            i["id"],
            i["hostname"],
            i["state"],
            "open" if i["open"] else "closed",
            age(i["opened_at"], now=now),
            age(i["last_event_at"], now=now),
            i["event_count"],
            ",".join(str(g) for g in i["gpu_indexes"]) or "-",
            ",".join(str(x) for x in i["xids"]) or "-",
            ("[test] " if i.get("test") else "") + i["action_text"],
        ]
        for i in rows
    ]
    print_table(COLUMNS, cells, empty="no incident" + (" open" if open_ else ""))
