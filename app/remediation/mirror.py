"""Mirroring Kubernetes cordons and Slurm drains into each other, for nodes in both (Slurm on
Kubernetes, or one fleet shared by both), as CoreWeave's fleet management does: a node someone
cordoned in Kubernetes is drained in Slurm, and one someone drained in Slurm is cordoned in
Kubernetes, so neither scheduler starts work on a node the other's operators took out.

On when ``FLEETWATCH_MIRROR_CORDONS`` is true and both Slurm and Kubernetes are managed. Every
run (every ``MIRROR_INTERVAL_S``) reads every node of both once (``scontrol show node -o``,
``GET /api/v1/nodes``) and, for each Fleetwatch node in service with a name in both, logs at
most one action (run by the action worker, in the node's action log, actor
:data:`ACTOR`):

==============================================================  ===============================
seen                                                            logged
==============================================================  ===============================
cordoned in Kubernetes (not by Fleetwatch), not drained in Slurm  Slurm drain, reason
                                                                ``fleetwatch: mirrored
                                                                Kubernetes cordon``
uncordoned, Slurm drained by that mirror                        Slurm resume
drained in Slurm (not by Fleetwatch), not cordoned              Kubernetes cordon, annotation
                                                                ``fleetwatch.io/mirrored-slurm-
                                                                drain`` = Slurm's reason
resumed in Slurm, Kubernetes cordoned by that mirror            Kubernetes uncordon
==============================================================  ===============================

Fleetwatch's own quarantines act on both systems already, so nodes out of service, and nodes
with an action still pending or running, are left alone. A drain or cordon Fleetwatch did not
make is never undone: only a mirror's own drain or cordon is.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app import wakeups
from app.db import session_scope
from app.fleet.models import Node
from app.lifecycle import service as lifecycle
from app.remediation import commands, kubernetes, service, slurm

log = logging.getLogger(__name__)

ACTOR = "scheduler mirror"
MIRROR_INTERVAL_S = 30.0
#: The reason a mirrored Kubernetes cordon gives Slurm (after Slurm's ``fleetwatch: ``).
K8S_CORDON_REASON = "mirrored Kubernetes cordon"


@dataclass(frozen=True)
class Planned:
    """An action the mirror logs for a node."""

    node_id: int
    system: str
    verb: str
    target: str
    command: list[str]
    note: str


def plan(
    node_id: int,
    slurm_node: slurm.SlurmNode,
    kube_node: kubernetes.KubeNode,
    scontrol: str,
) -> Planned | None:
    """The one action (or none) that brings ``slurm_node`` and ``kube_node`` into line (see
    the module's table)."""
    ours = slurm.REASON_PREFIX.strip()
    mirrored = f"{slurm.REASON_PREFIX}{K8S_CORDON_REASON}"
    reason = slurm_node.reason or ""
    drained_by_others = slurm_node.drained and not reason.startswith(ours)
    k8s_mirror = kubernetes.MIRROR_ANNOTATION in kube_node.annotations
    cordoned_by_others = (
        kube_node.cordoned
        and kubernetes.REASON_ANNOTATION not in kube_node.annotations
        and not k8s_mirror
    )
    name, kname = slurm_node.name, kube_node.name
    if cordoned_by_others and not slurm_node.drained:
        return Planned(
            node_id,
            "slurm",
            "drain",
            name,
            slurm.drain_command(scontrol, name, f"{K8S_CORDON_REASON} of {kname}"),
            f"Kubernetes node {kname} is cordoned, Slurm node {name} is not drained",
        )
    if not kube_node.cordoned and slurm_node.drained and reason.startswith(mirrored):
        return Planned(
            node_id,
            "slurm",
            "resume",
            name,
            slurm.resume_command(scontrol, name),
            f"Kubernetes node {kname} was uncordoned: the mirrored drain is lifted",
        )
    if drained_by_others and not kube_node.cordoned:
        return Planned(
            node_id,
            "kubernetes",
            "cordon",
            kname,
            kubernetes.mirror_cordon_call(kname, reason or "drained in Slurm"),
            f"Slurm node {name} is drained ({reason or 'no reason'}), {kname} is not cordoned",
        )
    if k8s_mirror and kube_node.cordoned and not slurm_node.drained:
        return Planned(
            node_id,
            "kubernetes",
            "uncordon",
            kname,
            kubernetes.uncordon_call(kname, kubernetes.MIRROR_ANNOTATION),
            f"Slurm node {name} was resumed: the mirrored cordon is lifted",
        )
    return None


def run_once(factory: sessionmaker[Session], backends: service.Backends) -> list[Planned]:
    """One pass (see the module): read both systems, log the actions; returns them. Does
    nothing where Slurm or Kubernetes is not managed, or either cannot be read (logged)."""
    if backends.scontrol is None or backends.kubeconfig is None:
        return []
    shown = commands.run(slurm.show_all_command(backends.scontrol), timeout_s=backends.timeout_s)
    if not shown.ok:
        log.warning("scheduler mirror: Slurm's nodes could not be read: %s", shown.output)
        return []
    slurm_nodes = {n.name: n for n in slurm.parse_show_nodes(shown.stdout)}
    try:
        kube_nodes = {
            n.name: n
            for n in kubernetes.list_nodes(
                kubernetes.KubeTarget(backends.kubeconfig), timeout_s=backends.timeout_s
            )
        }
    except Exception as exc:  # the API unreachable, refused, a kubeconfig missing
        log.warning("scheduler mirror: Kubernetes' nodes could not be read: %s", exc)
        return []
    planned: list[Planned] = []
    with session_scope(factory) as session:
        busy = service.busy_nodes(session)
        out = lifecycle.out_of_service(session)
        nodes = session.scalars(select(Node).where(Node.retired_at.is_(None)))
        for node in nodes:
            if node.id in busy or node.id in out:
                continue
            s_node = slurm_nodes.get(service.slurm_name(node))
            k_node = kube_nodes.get(service.k8s_name(node))
            if s_node is None or k_node is None:
                continue
            found = plan(node.id, s_node, k_node, backends.scontrol)
            if found is None:
                continue
            service.log_action(
                session,
                node_id=found.node_id,
                system=found.system,
                verb=found.verb,
                target=found.target,
                command=found.command,
                actor=ACTOR,
                note=found.note,
            )
            planned.append(found)
            log.info(
                "scheduler mirror: %s %s %s: %s",
                *(found.system, found.verb),
                found.target,
                found.note,
            )
        if planned:
            wakeups.signal_on_commit(session, wakeups.ACTIONS_CHANNEL)
    return planned


def job(factory: sessionmaker[Session], backends: service.Backends) -> None:
    """Scheduler wrapper: errors are logged, never raised."""
    try:
        run_once(factory, backends)
    except Exception:
        log.exception("scheduler mirror failed")
