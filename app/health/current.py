"""Health as stored, read: the fleet views and the health API read each node's stored answer
(:mod:`app.health.state`) instead of evaluating the fleet per request.

:func:`list_states` lists the nodes with their stored state in one statement; :func:`health_of`
turns them into answers, parsing a stored document only when its digest changed since this
process last read it, and applies staleness from ``last_seen_at`` (exact to the second, no
write needed). A node with no stored answer yet — and, on a small fleet, one whose answer is
behind its newest batch — is evaluated on read, so a small fleet reads its own writes.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any, cast

import orjson
from sqlalchemy import Text, func, or_, select
from sqlalchemy import cast as cast_
from sqlalchemy.orm import Session

from app.db import utcnow
from app.fleet import service as fleet_service
from app.fleet.models import Node, in_service
from app.fleet.service import NodeView
from app.health import service as health_service
from app.health.rules import HealthRules, State
from app.health.schemas import (
    ActionOut,
    ClusterHealthOut,
    GpuHealthOut,
    GroupHealthOut,
    HealthOut,
    NodeHealthOut,
    ReasonOut,
)
from app.health.state import CHUNK, READ_METRICS, STATE, summarize_view

#: At most this many nodes whose stored answer is behind their newest batch are evaluated on
#: read (more than that: the stored answers are served; the refresher is on its way).
READ_THROUGH_MAX = 32


def _reason(data: dict[str, Any]) -> ReasonOut:
    since = data.get("since")
    return ReasonOut.model_construct(
        state=State(data["state"]),
        code=data["code"],
        text=data["text"],
        since=datetime.fromisoformat(since) if since else None,
        evidence=data["evidence"],
        gpu_index=data.get("gpu_index"),
        action=_action(data.get("action")),
        test=bool(data.get("test", False)),
    )


def _action(data: dict[str, Any] | None) -> ActionOut | None:
    """A stored reason's action (None: none, or an answer stored before actions existed,
    until the refresher's recheck evaluates the node again)."""
    if not data:
        return None
    return ActionOut.model_construct(
        code=data["code"],
        title=data["title"],
        text=data["text"],
        source=data["source"],
        escalated_from=data.get("escalated_from"),
        occurrences=data.get("occurrences"),
    )


def _from_doc(doc: str | bytes, hostname: str, labels: dict[str, Any]) -> NodeHealthOut:
    data = orjson.loads(doc)
    gpus = [
        GpuHealthOut.model_construct(
            index=g["index"],
            uuid=g["uuid"],
            name=g["name"],
            state=State(g["state"]),
            reasons=[_reason(r) for r in g["reasons"]],
        )
        for g in data["gpus"]
    ]
    return NodeHealthOut.model_construct(
        hostname=hostname,
        state=State(data["state"]),
        cluster=str(labels.get("cluster") or health_service.UNLABELLED),
        group=health_service.group_of(labels)[1],
        reasons=[_reason(r) for r in data["reasons"]],
        gpus=gpus,
        gpu_counts=health_service.count_states([g.state for g in gpus]),
    )


@dataclass(slots=True)
class NodeState:
    """A node as the fleet views list it, from ``node`` and its stored health: ``state`` is
    the health shown now (staleness applied; None: not evaluated yet), ``digest`` identifies
    the stored answer (None: none, or not the answer shown), ``summary`` is
    :func:`summarize_view`'s (empty: none). ``labels_json`` is the labels as stored (what the
    document cache compares)."""

    node_id: int
    hostname: str
    labels: dict[str, Any]
    last_seen_at: datetime | None
    last_sample_at: datetime | None
    clock_skew_s: float | None
    freshness: fleet_service.Freshness
    state: State | None
    digest: str | None
    behind: bool
    summary: dict[str, Any]
    labels_json: str = "{}"
    summary_json: str = "{}"


def list_states(
    session: Session,
    *,
    stale_after_s: float,
    now: datetime,
    search: str | None = None,
    node_ids: Collection[int] | None = None,
) -> list[NodeState]:
    """Every node (hostname containing ``search``, any case; of ``node_ids`` when given), by
    hostname, with its stored health and summary: one statement, no document parsed but the
    small summaries."""
    stmt = (
        select(
            Node.id,
            Node.hostname,
            # As text, parsed with orjson: the driver's JSON parsing was a fifth of the time.
            cast_(Node.labels, Text),
            Node.last_seen_at,
            Node.last_sample_at,
            Node.clock_skew_s,
            STATE.c.state,
            STATE.c.digest,
            STATE.c.seen_at,
            STATE.c.summary,
        )
        .outerjoin(STATE, STATE.c.node_id == Node.id)
        .where(in_service())
        .order_by(Node.hostname)
    )
    if node_ids is not None:
        stmt = stmt.where(Node.id.in_(sorted(node_ids)))
    found = []
    needle = search.lower() if search else None
    seen_after = now - timedelta(seconds=stale_after_s)
    loads = orjson.loads
    rows = session.connection().execute(stmt)
    for (
        node_id,
        host,
        labels,
        seen,
        sampled,
        skew,
        state,
        digest,
        seen_at,
        summary,
    ) in rows:
        if needle and needle not in host.lower():
            continue
        # The rule of app.fleet.service.freshness, inline (1,000 calls per page).
        fresh: fleet_service.Freshness = (
            "never_seen" if seen is None else "fresh" if seen >= seen_after else "stale"
        )
        shown = None if state is None else State(state) if fresh == "fresh" else State.UNKNOWN
        found.append(
            NodeState(
                node_id,
                host,
                (loads(labels) or {}) if labels else {},
                seen,
                sampled,
                skew,
                fresh,
                shown,
                digest,
                seen_at != seen,
                loads(summary) if summary else {},
                labels or "{}",
                summary or "{}",
            )
        )
    return found


def count_stored_states(session: Session, *, stale_after_s: float, now: datetime) -> dict[str, int]:
    """Nodes in service per health state (``healthy``, ``degraded``, ``unhealthy``,
    ``unknown``, every one present) as stored, staleness applied (:func:`list_states`, one
    statement, no document parsed): what the overview counts once the refresher has caught up.
    A node the refresher has not evaluated yet (seconds after its first batch) is ``unknown``:
    it is never counted healthy before it was judged."""
    counts = dict.fromkeys((s.value for s in State), 0)
    for node in list_states(session, stale_after_s=stale_after_s, now=now):
        counts[(node.state or State.UNKNOWN).value] += 1
    return counts


class _DocCache:
    """Parsed stored answers by node id, per process: a document is read and parsed again only
    when its digest (or the node's hostname or labels, which the answer carries) changed; most
    nodes' answers change rarely."""

    def __init__(self) -> None:
        self._by_node: dict[int, tuple[tuple[str, str, str], NodeHealthOut]] = {}
        self._lock = threading.Lock()

    def clear(self) -> None:
        """Forget every parsed answer."""
        with self._lock:
            self._by_node.clear()

    def get(
        self, session: Session, nodes: list[NodeState]
    ) -> tuple[dict[int, NodeHealthOut], set[int]]:
        """The stored answers of ``nodes`` (those with a digest), by node id, and the ids of
        the nodes whose answer changed since they were listed (the newer one is returned, not
        cached: the caller must not file it under the listed digest either)."""
        keys = {n.node_id: (n.digest, n.hostname, n.labels_json) for n in nodes if n.digest}
        found: dict[int, NodeHealthOut] = {}
        with self._lock:
            for node_id, key in keys.items():
                hit = self._by_node.get(node_id)
                if hit is not None and hit[0] == key:
                    found[node_id] = hit[1]
        missing = [node_id for node_id in keys if node_id not in found]
        changed: set[int] = set()
        for start in range(0, len(missing), CHUNK):
            rows = session.execute(
                select(STATE.c.node_id, STATE.c.digest, STATE.c.doc, Node.hostname, Node.labels)
                .join(Node, Node.id == STATE.c.node_id)
                .where(STATE.c.node_id.in_(missing[start : start + CHUNK]))
            )
            for row in rows:
                health = _from_doc(row.doc, row.hostname, row.labels or {})
                found[row.node_id] = health
                key = keys[row.node_id]
                if row.digest == key[0]:
                    with self._lock:
                        self._by_node[row.node_id] = (cast(tuple[str, str, str], key), health)
                else:
                    changed.add(row.node_id)
        return found, changed


DOCS = _DocCache()


def _view_of(node: NodeState) -> NodeView:
    """The fields of a view that :func:`~app.health.service.apply_freshness` reads."""
    row = SimpleNamespace(
        id=node.node_id,
        hostname=node.hostname,
        labels=node.labels,
        last_seen_at=node.last_seen_at,
        last_sample_at=node.last_sample_at,
    )
    return NodeView(node=cast(Node, row), freshness=node.freshness, gpus=[])


def unsettled_count(session: Session) -> int:
    """How many nodes of the fleet have no stored answer or one behind their newest batch (what
    :func:`health_of` counts on a whole-fleet listing), in one statement."""
    behind = or_(STATE.c.digest.is_(None), STATE.c.seen_at.is_distinct_from(Node.last_seen_at))
    stmt = (
        select(func.count())
        .select_from(Node)
        .outerjoin(STATE, STATE.c.node_id == Node.id)
        .where(behind, in_service())
    )
    return int(session.scalar(stmt) or 0)


def health_of(
    session: Session,
    *,
    nodes: list[NodeState],
    rules: HealthRules,
    now: datetime,
    fleet_unsettled: int | None = None,
) -> tuple[dict[str, NodeHealthOut], list[NodeState]]:
    """The health of ``nodes`` (from :func:`list_states`) by hostname, as
    :func:`app.health.service.evaluate_views` answers it as of the last refresh, and ``nodes``
    again with each node's state set to it (the objects are updated in place; a node whose
    answer is not the stored one it was listed with — evaluated now, or changed since listed
    — gets ``digest`` None, and one evaluated now its summary). Stored answers come from the
    process cache. A node with no stored answer yet, and up to :data:`READ_THROUGH_MAX` nodes
    whose newest batch is newer than their answer, are evaluated now (a small fleet reads its
    own writes). ``fleet_unsettled``: when ``nodes`` are part of the fleet, the fleet's count
    of such nodes (:func:`unsettled_count`), so that the part gets the answers the whole
    fleet's listing would (a node-scoped alert evaluation and a fleet-wide one agree)."""
    own = [n for n in nodes if n.digest is None]
    behind = [n for n in nodes if n.digest is not None and n.behind]
    unsettled = len(own) + len(behind) if fleet_unsettled is None else fleet_unsettled
    if unsettled <= READ_THROUGH_MAX:
        own += behind
    own_ids = {n.node_id for n in own}
    stored, changed = DOCS.get(session, [n for n in nodes if n.node_id not in own_ids])
    health: dict[str, NodeHealthOut] = {}
    summaries: dict[int, dict[str, Any]] = {}
    if own:
        views = fleet_service.list_node_rows(
            session,
            stale_after_s=rules.stale_after_s,
            now=now,
            ids=sorted(own_ids),
            metrics=READ_METRICS,
        )
        health.update(health_service.evaluate_views(session, views=views, rules=rules, now=now))
        summaries = {v.node.id: summarize_view(v) for v in views}
    for n in nodes:
        if n.node_id in stored:
            health[n.hostname] = health_service.apply_freshness(
                stored[n.node_id], view=_view_of(n), rules=rules
            )
    updated = []
    for n in nodes:
        answer = health.get(n.hostname)
        if answer is None:  # its stored answer went away since listed (node deleted)
            continue
        n.state = answer.state
        if n.node_id in changed:
            n.digest = None  # the answer shown is newer than the listed digest
        if n.node_id in own_ids:
            n.summary, n.digest = summaries.get(n.node_id, n.summary), None
            n.summary_json = orjson.dumps(n.summary).decode()
        updated.append(n)
    return health, updated


def list_health(
    session: Session,
    *,
    rules: HealthRules,
    labels: dict[str, str] | None = None,
    now: datetime | None = None,
) -> HealthOut:
    """The fleet's health (nodes filtered by exact label values): node counts fleet-wide, per
    cluster and per group, and each node with its reasons (GPUs left out)."""
    now = now or utcnow()
    nodes = list_states(session, stale_after_s=rules.stale_after_s, now=now)
    if labels:
        nodes = [n for n in nodes if all(n.labels.get(k) == v for k, v in labels.items())]
    health, nodes = health_of(session, nodes=nodes, rules=rules, now=now)
    answers = [health[n.hostname] for n in nodes]
    clusters: dict[str, list[State]] = defaultdict(list)
    groups: dict[tuple[str, str, str], list[State]] = defaultdict(list)
    for n, h in zip(nodes, answers, strict=True):
        clusters[h.cluster].append(h.state)
        groups[(h.cluster, *health_service.group_of(n.labels))].append(h.state)
    count = health_service.count_states
    return HealthOut.model_construct(
        evaluated_at=now,
        counts=count([h.state for h in answers]),
        clusters=[
            ClusterHealthOut.model_construct(name=name, counts=count(states))
            for name, states in sorted(clusters.items())
        ],
        groups=[
            GroupHealthOut.model_construct(cluster=c, kind=kind, name=name, counts=count(states))
            for (c, kind, name), states in sorted(groups.items())
        ],
        nodes=[h.model_copy(update={"gpus": []}) for h in answers],
    )
