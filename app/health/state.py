"""Health kept current: each node's health is evaluated when its data changes (a new batch:
``node.last_seen_at`` moved) and stored in ``node_health_state``, so fleet views read one row
per node instead of evaluating the fleet per request.

:func:`refresh` evaluates the nodes that are due — never evaluated, a batch since, or last
evaluated more than ``recheck_after_s`` ago (event windows slide with the clock) — with the
same checks as :func:`app.health.service.evaluate_views`, in the same six evidence statements
for all of them, and writes only what changed (a changed answer gets a new fleet-wide
``version``). Staleness is not stored: :func:`app.health.current.health_of` applies it from
``last_seen_at`` when read, so a node turns Unknown on the second, with no sweeper write.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, cast

import orjson
from sqlalchemy import Integer, Table, bindparam, func, select, text, update
from sqlalchemy.orm import Session

from app.fleet import service as fleet_service
from app.fleet.models import Node, in_service
from app.fleet.service import NodeView
from app.health import checks
from app.health import service as health_service
from app.health.evidence import load_evidence
from app.health.held import hold_since
from app.health.models import NodeHealthState
from app.health.rules import HealthRules

STATE = cast(Table, NodeHealthState.__table__)
VERSION_SEQUENCE = "node_health_state_version_seq"
#: Nodes evaluated per pass of :func:`refresh` (evidence statements take their ids as one
#: array; a bounded pass keeps one refresh's transaction short on a 5,000-node fleet).
CHUNK = 1000


@dataclass(frozen=True)
class RefreshReport:
    """One :func:`refresh`: nodes evaluated, how many answers changed (new version), the
    newest version after it, and the seconds it took."""

    evaluated: int
    changed: int
    version: int
    duration_s: float
    #: The nodes whose answer changed (``changed`` of them).
    changed_ids: tuple[int, ...] = ()


#: Latest values read at each evaluation: what the checks read and what the summary shows.
SUMMARY_METRICS = ("util_gpu_pct", "temp_c")
READ_METRICS = tuple(dict.fromkeys((*checks.LATEST_METRICS_READ, *SUMMARY_METRICS)))


def summarize_view(view: NodeView) -> dict[str, Any]:
    """What the node table shows of a node's latest values: ``gpus`` (in its inventory),
    ``not_ok`` (GPUs whose state is not ``ok``), ``mean_util_gpu_pct`` (over GPUs reporting
    it), ``hottest`` (``[index, temp_c]`` of the hottest GPU) and ``models`` (distinct GPU
    names); None where nothing reports."""
    hottest = view.hottest
    return {
        "gpus": view.gpu_count,
        "not_ok": view.lost_gpu_count,
        "mean_util_gpu_pct": view.mean_util_gpu_pct,
        "hottest": [hottest.gpu.index, hottest.latest["temp_c"]] if hottest else None,
        "models": sorted({g.gpu.name for g in view.gpus if g.gpu.name}),
    }


def _digest(doc: bytes) -> str:
    return hashlib.blake2b(doc, digest_size=16).hexdigest()


def _next_versions(session: Session, count: int) -> list[int]:
    """``count`` new versions, increasing: from the sequence on Postgres (safe with several
    writers), after the largest stored one on SQLite (one process writes)."""
    if count == 0:
        return []
    if session.get_bind().dialect.name == "postgresql":
        rows = session.execute(
            text(f"SELECT nextval('{VERSION_SEQUENCE}') FROM generate_series(1, :n)"), {"n": count}
        )
        return sorted(int(r[0]) for r in rows)
    top = session.scalar(select(func.coalesce(func.max(STATE.c.version), 0)))
    return list(range(int(top or 0) + 1, int(top or 0) + 1 + count))


def due_nodes(session: Session, *, now: datetime, recheck_after_s: float) -> list[int]:
    """Ids of the nodes :func:`refresh` evaluates now (see the module docstring), in id order."""
    recheck = now - timedelta(seconds=recheck_after_s)
    stored = {
        row.node_id: row
        for row in session.execute(select(STATE.c.node_id, STATE.c.seen_at, STATE.c.evaluated_at))
    }
    due = []
    for node_id, last_seen_at in session.execute(
        select(Node.id, Node.last_seen_at).where(in_service()).order_by(Node.id)
    ):
        row = stored.get(node_id)
        if row is None or row.seen_at != last_seen_at or row.evaluated_at <= recheck:
            due.append(node_id)
    return due


def refresh(
    session: Session,
    *,
    rules: HealthRules,
    now: datetime,
    recheck_after_s: float = 60.0,
    node_ids: list[int] | None = None,
) -> RefreshReport:
    """Evaluate the due nodes (or exactly ``node_ids``) and store their answers; flushes,
    the caller commits. Several processes may call it: the version sequence keeps versions
    unique, and the last writer's answer (the same data gives the same answer) stays."""
    began = time.monotonic()
    ids = (
        node_ids
        if node_ids is not None
        else due_nodes(session, now=now, recheck_after_s=recheck_after_s)
    )
    evaluated = 0
    changed: list[int] = []
    for start in range(0, len(ids), CHUNK):
        n, c = _refresh_chunk(session, ids[start : start + CHUNK], rules=rules, now=now)
        evaluated += n
        changed += c
    version = session.scalar(select(func.coalesce(func.max(STATE.c.version), 0)))
    return RefreshReport(
        evaluated, len(changed), int(version or 0), time.monotonic() - began, tuple(changed)
    )


def _refresh_chunk(
    session: Session, ids: list[int], *, rules: HealthRules, now: datetime
) -> tuple[int, list[int]]:
    views = fleet_service.list_node_rows(
        session,
        stale_after_s=rules.stale_after_s,
        now=now,
        ids=ids,
        metrics=READ_METRICS,
    )
    # Evaluated as if fresh: staleness is applied when read (apply_freshness).
    views = [replace(v, freshness="fresh") if v.freshness == "stale" else v for v in views]
    evidence = load_evidence(session, views=views, rules=rules, now=now)
    stored = {
        row.node_id: row
        for row in session.execute(
            select(STATE.c.node_id, STATE.c.digest, STATE.c.state, STATE.c.since).where(
                STATE.c.node_id.in_(ids)
            )
        )
    }
    inserts: list[dict[str, Any]] = []
    changes: list[dict[str, Any]] = []
    touches: list[dict[str, Any]] = []
    answers = [(view, health_service.evaluate_fresh(view, rules, evidence)) for view in views]
    hold_since(session, answers, evidence)
    for view, health in answers:
        doc = orjson.dumps(health.model_dump(mode="json"))
        digest = _digest(doc)
        row = stored.get(view.node.id)
        values: dict[str, Any] = {
            "b_node_id": view.node.id,
            "seen_at": view.node.last_seen_at,
            "evaluated_at": now,
            "summary": orjson.dumps(summarize_view(view)).decode(),
        }
        if row is not None and row.digest == digest:
            touches.append(values)
            continue
        values.update(state=health.state.value, digest=digest, doc=doc.decode())
        if row is None:
            inserts.append({**values, "since": now})
        else:
            since = row.since if row.state == health.state.value else now
            changes.append({**values, "since": since})
    versions = iter(_next_versions(session, len(inserts) + len(changes)))
    if inserts:
        session.execute(
            STATE.insert(), [_by_column(i) | {"version": next(versions)} for i in inserts]
        )
    # Keyed by a bound parameter named apart from the column (an UPDATE … SET may not reuse it).
    by_node = update(STATE).where(STATE.c.node_id == bindparam("b_node_id", type_=Integer))
    if changes:
        session.execute(by_node, [c | {"version": next(versions)} for c in changes])
    if touches:
        session.execute(by_node, touches)
    return len(views), [i["b_node_id"] for i in inserts] + [c["b_node_id"] for c in changes]


def _by_column(values: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in values.items() if k != "b_node_id"}
    return out | {"node_id": values["b_node_id"]}
