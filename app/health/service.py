"""Health evaluation: each node's and GPU's state with its reasons, computed at read time from
the stored telemetry (no table of its own), and the group and cluster rollups."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime

from sqlalchemy.orm import Session

from app.db import utcnow
from app.fleet import service as fleet_service
from app.fleet.service import NodeView
from app.health import actions, checks, reasons
from app.health.evidence import Evidence, load_evidence
from app.health.held import hold_since
from app.health.rules import HealthRules, State, worst
from app.health.schemas import (
    ActionOut,
    GpuHealthOut,
    NodeHealthOut,
    ReasonOut,
    StateCounts,
)

UNGROUPED = "ungrouped"
UNLABELLED = "unlabelled"


def count_states(states: list[State]) -> StateCounts:
    """How many of ``states`` are in each state, and the worst."""
    n = Counter(states)
    # model_construct: the values are ours (a State's counts), validating them again for each
    # of thousands of GPUs and nodes was a tenth of the overview's time.
    return StateCounts.model_construct(
        healthy=n[State.HEALTHY],
        degraded=n[State.DEGRADED],
        unhealthy=n[State.UNHEALTHY],
        unknown=n[State.UNKNOWN],
        worst=worst(states),
    )


def group_of(labels: dict[str, str]) -> tuple[str, str]:
    """(kind, name) of a node's group: its ``ib_pod`` label, else ``rack``, else ungrouped."""
    for kind in ("ib_pod", "rack"):
        if labels.get(kind):
            return kind, str(labels[kind])
    return "none", UNGROUPED


def _stale_reason(view: NodeView, rules: HealthRules) -> ReasonOut:
    node = view.node
    if view.freshness == "never_seen":
        text = "no telemetry ever received"
    else:
        text = f"no telemetry received for more than {rules.stale_after_s:g} s"
    return ReasonOut(
        state=State.UNKNOWN,
        code=reasons.STALE,
        text=text,
        since=node.last_seen_at,
        evidence=f"/nodes/{node.hostname}",
        action=actions.suggest(reasons.STALE),
    )


def _action(
    code: str, gpu_id: int | None, view: NodeView, rules: HealthRules, evidence: Evidence
) -> ActionOut:
    """The suggested repair of reason ``code`` of GPU ``gpu_id`` (None: the node's own), with
    the finding's bursts on that GPU over the escalation window and, for Xid 154, the newest
    event's message (the driver's recovery action)."""
    times = evidence.history.get((gpu_id, code), ()) if gpu_id is not None else ()
    message = None
    if code == reasons.xid_code(154):
        # The newest message the driver's recovery action can be read from (events are oldest
        # first); a later unreadable line does not undo a reboot it asked for.
        for event in evidence.events.get(view.node.id, ()):
            readable = message is None or actions.recovery_action(event.message) is not None
            if event.xid == 154 and event.gpu_id == gpu_id and readable:
                message = event.message
    # The view's GPU may be a row of the fleet read without every column (no PCI address).
    gpu = next((g.gpu for g in view.gpus if g.gpu.id == gpu_id), None)
    return actions.suggest(
        code,
        occurrences=actions.bursts(times, rules.burst_quiet_s, rules.burst_max_s),
        escalate_after=rules.escalate_after,
        window_s=rules.escalation_window_s,
        message=message,
        gpu=(
            actions.gpu_words(gpu.index, gpu.uuid, getattr(gpu, "pci_bus_id", None))
            if gpu is not None
            else None
        ),
    )


def evaluate_node(
    session: Session,
    *,
    view: NodeView,
    rules: HealthRules,
    now: datetime,
    evidence: Evidence | None = None,
) -> NodeHealthOut:
    """The health of one node and its GPUs. A stale or never-seen node and its GPUs are
    Unknown, whatever their last known reasons (which are still listed). ``evidence`` is what
    a fleet-wide evaluation loaded for all its nodes; without it, this node's is loaded (six
    statements)."""
    if evidence is None:
        evidence = load_evidence(session, views=[view], rules=rules, now=now)
    fresh = evaluate_fresh(view, rules, evidence)
    hold_since(session, [(view, fresh)], evidence)
    return apply_freshness(fresh, view=view, rules=rules)


def evaluate_fresh(view: NodeView, rules: HealthRules, evidence: Evidence) -> NodeHealthOut:
    """The node's health as if its data were fresh (the checks' reasons only; a never-seen node
    has none and is Healthy here): what :mod:`app.health.state` stores, before
    :func:`apply_freshness`. No statement is run."""
    found: dict[int | None, list[ReasonOut]] = defaultdict(list)
    if view.freshness != "never_seen":
        node_id = view.node.id
        # A check with no evidence for this node finds nothing: skipped (most nodes of a
        # large fleet), which keeps a 1,000-node evaluation in Python cheap.
        by_event, first_lost = (
            checks.events(view, rules, evidence) if node_id in evidence.events else ({}, {})
        )
        parts = [
            checks.inventory(
                view, events_first_lost=first_lost, unresponsive_after_s=rules.stale_after_s
            ),
            by_event,
        ]
        parts.append(checks.latest_values(view))
        parts.append(checks.clock(view, rules))
        if evidence.throttle:
            parts.append(checks.throttling(view, rules, evidence))
        if evidence.links_down or evidence.links_gone:
            parts.append(checks.links(view, evidence))
        if (
            node_id in evidence.ports_down
            or node_id in evidence.ports_flapping
            or node_id in evidence.ports_gone
        ):
            parts.append(checks.ports(view, rules, evidence))
        if node_id in evidence.slow_disks or node_id in evidence.slow_nfs:
            parts.append(checks.storage(view, rules, evidence))
        for part in parts:
            for key, reasons in part.items():
                found[key].extend(reasons)
    gpus = []
    for g in view.gpus:
        reasons = found.get(g.gpu.id, [])
        for reason in reasons:
            reason.gpu_index = g.gpu.index
            reason.action = _action(reason.code, g.gpu.id, view, rules, evidence)
        gpus.append(
            GpuHealthOut.model_construct(
                index=g.gpu.index,
                uuid=g.gpu.uuid,
                name=g.gpu.name,
                state=worst([r.state for r in reasons]),
                reasons=reasons,
            )
        )
    for reason in found.get(None, []):
        reason.action = _action(reason.code, None, view, rules, evidence)
    reasons = list(found.get(None, [])) + [r for gh in gpus for r in gh.reasons]
    labels = view.node.labels or {}
    return NodeHealthOut.model_construct(
        hostname=view.node.hostname,
        state=worst([r.state for r in reasons]),
        cluster=str(labels.get("cluster") or UNLABELLED),
        group=group_of(labels)[1],
        reasons=reasons,
        gpus=gpus,
        gpu_counts=count_states([gh.state for gh in gpus]),
    )


def apply_freshness(fresh: NodeHealthOut, *, view: NodeView, rules: HealthRules) -> NodeHealthOut:
    """``fresh`` (from :func:`evaluate_fresh`) as of the view's freshness: unchanged for a fresh
    node; else the node and each GPU Unknown, their reasons kept, the stale reason first. A new
    object: ``fresh`` is not modified."""
    if view.freshness == "fresh":
        return fresh
    gpus = [gh.model_copy(update={"state": State.UNKNOWN}) for gh in fresh.gpus]
    return fresh.model_copy(
        update={
            "state": State.UNKNOWN,
            "reasons": [_stale_reason(view, rules), *fresh.reasons],
            "gpus": gpus,
            "gpu_counts": count_states([gh.state for gh in gpus]),
        }
    )


def evaluate_views(
    session: Session, *, views: list[NodeView], rules: HealthRules, now: datetime
) -> dict[str, NodeHealthOut]:
    """Health of each of ``views``, by hostname: six statements for the whole fleet
    (:func:`~app.health.evidence.load_evidence`), whatever its size or freshness, and one for
    the stored ``since`` of reasons read off the newest values (:mod:`app.health.held`)."""
    evidence = load_evidence(session, views=views, rules=rules, now=now)
    fresh = [(v, evaluate_fresh(v, rules, evidence)) for v in views]
    hold_since(session, fresh, evidence)
    return {v.node.hostname: apply_freshness(answer, view=v, rules=rules) for v, answer in fresh}


def get_node_health(
    session: Session, *, hostname: str, rules: HealthRules, now: datetime | None = None
) -> NodeHealthOut:
    """One node's health with its GPUs.

    Raises:
        NotFound: no such node.
    """
    now = now or utcnow()
    view = fleet_service.get_node_view(
        session, hostname=hostname, stale_after_s=rules.stale_after_s, now=now
    )
    return evaluate_node(session, view=view, rules=rules, now=now)
