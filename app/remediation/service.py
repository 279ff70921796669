"""The action log: which scheduler actions a lifecycle transition asks for, written as
``pending`` rows for :mod:`app.remediation.worker` to run, and the log read back.

Fleetwatch manages Slurm when ``FLEETWATCH_SLURM_SCONTROL`` names ``scontrol``; a node's Slurm
name is its ``slurm_node`` label, else its hostname up to the first dot (Slurm's ``NodeName``
is usually the short hostname). It manages Kubernetes when ``FLEETWATCH_KUBECONFIG`` is set
(a kubeconfig file or ``in-cluster``); a node's Kubernetes name is its ``k8s_node`` label, else
its hostname. Leaving service: Slurm drain, Kubernetes cordon then drain (evictions); entering
it: Slurm resume, Kubernetes uncordon. Entering ``remediating``: the site's remediation hook
where ``FLEETWATCH_REMEDIATION_HOOK`` sets one (:mod:`app.remediation.hook`).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from app.config import Settings
from app.db import utcnow
from app.errors import Conflict, NotFound
from app.fleet.models import Node
from app.remediation import hook, kubernetes, slurm
from app.remediation.models import NodeAction

#: The label naming a node's Slurm ``NodeName`` where it differs from its short hostname.
SLURM_NODE_LABEL = "slurm_node"
#: The label naming a node's Kubernetes node name where it differs from its hostname.
K8S_NODE_LABEL = "k8s_node"

PENDING = "pending"
RUNNING = "running"
SUCCEEDED = "succeeded"
SKIPPED = "skipped"
FAILED = "failed"
DRY_RUN = "dry_run"
SUPERSEDED = "superseded"


@dataclass(frozen=True)
class Backends:
    """The outside systems actions go to.

    Attributes:
        scontrol: path of Slurm's ``scontrol``; ``None``: Slurm is not managed.
        timeout_s: longest wait for one command.
    """

    scontrol: str | None = None
    timeout_s: float = 30.0
    kubeconfig: str | None = None
    #: The remediation hook's words (:mod:`app.remediation.hook`); ``None``: no hook.
    hook: tuple[str, ...] | None = None

    @classmethod
    def of(cls, settings: Settings) -> Backends:
        """From ``FLEETWATCH_SLURM_SCONTROL``, ``FLEETWATCH_KUBECONFIG``,
        ``FLEETWATCH_REMEDIATION_HOOK`` and ``FLEETWATCH_ACTION_TIMEOUT_S``."""
        return cls(
            scontrol=settings.slurm_scontrol,
            timeout_s=settings.action_timeout_s,
            kubeconfig=settings.kubeconfig,
            hook=hook.parse(settings.remediation_hook) if settings.remediation_hook else None,
        )

    @property
    def names(self) -> list[str]:
        """The schedulers managed (``slurm``, ``kubernetes``; ``[]``: none)."""
        return [n for n, on in (("slurm", self.scontrol), ("kubernetes", self.kubeconfig)) if on]

    @property
    def acted_on(self) -> list[str]:
        """Every system a transition may act on, for pages and answers: the schedulers, and
        ``hook`` where a remediation hook is set."""
        return self.names + (["hook"] if self.hook else [])


def k8s_name(node: Node) -> str:
    """``node``'s Kubernetes node name: its ``k8s_node`` label, else its hostname in lower
    case (Kubernetes names nodes by the lower-cased hostname)."""
    named = (node.labels or {}).get(K8S_NODE_LABEL)
    if isinstance(named, str) and named.strip():
        return named.strip()
    return node.hostname.lower()


def slurm_name(node: Node) -> str:
    """``node``'s Slurm ``NodeName``: its ``slurm_node`` label, else its short hostname."""
    return _slurm_name(node.hostname, node.labels)


def _slurm_name(hostname: str, labels: dict[str, Any] | None) -> str:
    named = (labels or {}).get(SLURM_NODE_LABEL)
    if isinstance(named, str) and named.strip():
        return named.strip()
    return hostname.split(".", 1)[0]


def nodes_by_slurm_name(session: Session, *, names: Collection[str]) -> dict[str, Node]:
    """The Fleetwatch node of each Slurm ``NodeName`` in ``names`` that one maps to
    (:func:`slurm_name`; retired nodes too: their history). Where two nodes map to one name,
    the one not retired and seen last wins. Their GPUs are loaded with them.

    Reads every node's name and labels (a label can map any node to a name, so no index
    finds them): a few milliseconds at thousands of nodes.
    """
    wanted = set(names)
    if not wanted:
        return {}
    found: dict[str, int] = {}
    rows = session.execute(
        select(Node.id, Node.hostname, Node.labels, Node.retired_at, Node.last_seen_at)
    ).all()
    oldest = datetime.min.replace(tzinfo=UTC)
    # The preferred node comes last and overwrites the others.
    for row in sorted(rows, key=lambda r: (r.retired_at is None, r.last_seen_at or oldest)):
        name = _slurm_name(row.hostname, row.labels)
        if name in wanted:
            found[name] = row.id
    nodes = session.scalars(
        select(Node).where(Node.id.in_(sorted(found.values()))).options(selectinload(Node.gpus))
    )
    by_id = {node.id: node for node in nodes}
    return {name: by_id[node_id] for name, node_id in found.items()}


def enqueue(
    session: Session,
    *,
    node: Node,
    transition_id: int | None,
    leaving_service: bool,
    entering_service: bool,
    reason: str,
    actor: str,
    backends: Backends,
    dry_run: bool = False,
    entering_remediation: bool = False,
) -> list[NodeAction]:
    """Log the actions a transition asks for (flushes): drain where the node leaves service,
    resume where it enters it, in every managed system, and the remediation hook where it
    enters ``remediating`` (``entering_remediation``). ``dry_run``: logged as ``dry_run``,
    never run.

    The node's actions still pending from earlier transitions are ``superseded`` first: the
    node's state moved on, so a drain that waits for its retry must not land after the resume
    asked since (or a resume after a new quarantine). A node whose ``slurm_node`` or
    ``k8s_node`` label is not one node name (``ALL``, a host list) gets a ``failed`` action
    saying so instead of a command that could reach other nodes.
    """
    now = utcnow()
    superseded = session.scalars(
        select(NodeAction).where(NodeAction.node_id == node.id, NodeAction.status == PENDING)
    ).all()
    for old in superseded:
        old.status = SUPERSEDED
        old.finished_at = now
        old.next_attempt_at = None
        old.output = (old.output + "\n" if old.output else "") + (
            "superseded: the node's state changed again before it ran"
        )
    planned: list[tuple[str, str, str, list[str], str | None]] = []
    if backends.scontrol is not None:
        name = slurm_name(node)
        refused = None if slurm.valid_node_name(name) else f"label {SLURM_NODE_LABEL}"
        if leaving_service:
            command = slurm.drain_command(backends.scontrol, name, reason)
            planned.append(("slurm", "drain", name, command, refused))
        elif entering_service:
            command = slurm.resume_command(backends.scontrol, name)
            planned.append(("slurm", "resume", name, command, refused))
    if backends.kubeconfig is not None:
        name = k8s_name(node)
        refused = None if kubernetes.valid_node_name(name) else f"label {K8S_NODE_LABEL}"
        if leaving_service:
            planned.append(
                ("kubernetes", "cordon", name, kubernetes.cordon_call(name, reason), refused)
            )
            planned.append(("kubernetes", "drain", name, kubernetes.drain_call(name), refused))
        elif entering_service:
            planned.append(
                ("kubernetes", "uncordon", name, kubernetes.uncordon_call(name), refused)
            )
    if backends.hook is not None and entering_remediation:
        words = hook.command(
            backends.hook,
            hostname=node.hostname,
            slurm_node=slurm_name(node),
            k8s_node=k8s_name(node),
            reason=reason,
            actor=actor,
        )
        planned.append(("hook", "remediate", node.hostname, words, None))
    actions = []
    for system, verb, target, command, refused in planned:
        action = NodeAction(
            node_id=node.id,
            transition_id=transition_id,
            system=system,
            verb=verb,
            target=target[:255],
            command=command,
            status=DRY_RUN if dry_run else PENDING,
            attempts=0,
            requested_at=now,
            next_attempt_at=None if dry_run else now,
            finished_at=now if dry_run else None,
            output="dry run: not run" if dry_run else "",
            actor=actor,
        )
        if refused is not None:
            action.status, action.next_attempt_at, action.finished_at = FAILED, None, now
            action.output = (
                f"not run: {refused} gives {target[:80]!r}, not one {system} node name "
                "(a host list or ALL would reach other nodes); fix the agent's label"
            )
        actions.append(action)
    session.add_all(actions)
    session.flush()
    return actions


def log_action(
    session: Session,
    *,
    node_id: int,
    system: str,
    verb: str,
    target: str,
    command: list[str],
    actor: str,
    note: str = "",
) -> NodeAction:
    """One ``pending`` action outside any lifecycle transition (the scheduler mirror's), with
    ``note`` as its output until it runs (flushes)."""
    now = utcnow()
    action = NodeAction(
        node_id=node_id,
        transition_id=None,
        system=system,
        verb=verb,
        target=target[:255],
        command=command,
        status=PENDING,
        attempts=0,
        requested_at=now,
        next_attempt_at=now,
        output=note,
        actor=actor[:128],
    )
    session.add(action)
    session.flush()
    return action


def busy_nodes(session: Session) -> set[int]:
    """Ids of the nodes with an action pending or running."""
    rows = session.scalars(
        select(NodeAction.node_id).where(NodeAction.status.in_((PENDING, RUNNING))).distinct()
    )
    return set(rows)


def actions_of(session: Session, node_id: int, *, limit: int = 50) -> list[NodeAction]:
    """The node's logged actions, newest first."""
    return list(
        session.scalars(
            select(NodeAction)
            .where(NodeAction.node_id == node_id)
            .order_by(NodeAction.id.desc())
            .limit(limit)
        )
    )


def retry(session: Session, *, action_id: int, actor: str, backends: Backends) -> NodeAction:
    """Log a failed action again as a new ``pending`` one (flushes), its command built with
    the current settings (a Slurm command with today's ``scontrol`` path); the failed one stays
    in the log.

    Raises:
        NotFound: no such action.
        Conflict: it did not fail, the node has a newer action of that system since (its
            state moved on), or its system is not managed by these settings.
    """
    old = session.get(NodeAction, action_id)
    if old is None:
        raise NotFound(f"no action {action_id}")
    if old.status != FAILED:
        raise Conflict(f"action {action_id} is {old.status}: only a failed action is retried")
    newer = session.scalar(
        select(NodeAction.id).where(
            NodeAction.node_id == old.node_id,
            NodeAction.system == old.system,
            NodeAction.id > old.id,
        )
    )
    if newer is not None:
        raise Conflict(f"action {newer} of the node came after it: retry that one if it failed")
    command = list(old.command)
    if old.system == "slurm":
        if backends.scontrol is None:
            raise Conflict("slurm is not managed by these settings (FLEETWATCH_SLURM_SCONTROL)")
        command[0] = backends.scontrol
        if not slurm.valid_node_name(old.target):
            raise Conflict(f"{old.target!r} is not one Slurm node name: fix the node's label")
    elif old.system == "kubernetes" and backends.kubeconfig is None:
        raise Conflict("kubernetes is not managed by these settings (FLEETWATCH_KUBECONFIG)")
    elif old.system == "hook" and backends.hook is None:
        raise Conflict("no remediation hook in these settings (FLEETWATCH_REMEDIATION_HOOK)")
    now = utcnow()
    action = NodeAction(
        node_id=old.node_id,
        transition_id=old.transition_id,
        system=old.system,
        verb=old.verb,
        target=old.target,
        command=command,
        status=PENDING,
        attempts=0,
        requested_at=now,
        next_attempt_at=now,
        output=f"retry of action {old.id}",
        actor=actor[:128],
    )
    session.add(action)
    session.flush()
    return action
