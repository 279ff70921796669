"""Reading what drift detection compares, fleet-wide in a constant number of statements: every
node's latest stored topology, its GPU inventory with the newest PCIe readings, the newest
NVLink states and the newest NIC port states.

Six statements whatever the fleet's size (documents, nodes, GPUs, their newest PCIe readings,
NVLinks, NIC ports), each a plain ``SELECT`` that runs on Postgres and SQLite: topology
documents by ``ix_topology_change_node_id_received_at``, PCIe readings by a primary-key lookup
per GPU (:func:`app.series.gpu_now.newest`), NVLink and NIC port states from their current
readings (:mod:`app.series.latest`).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from sqlalchemy import and_, case, func, select
from sqlalchemy.orm import Session

from app.fleet.models import Gpu, Node, in_service
from app.health.sql import before
from app.series import gpu_now, latest
from app.series.writes import LATEST_WINDOW_S
from app.topology.models import TopologyChange, TopologySnapshot
from app.topology.signature import GpuFacts, NodeSignature, build_signature

#: NVLink and NIC readings older than this before ``now`` say nothing about the node now.
READING_MAX_AGE_S = 900.0

_PCIE = ("pcie_link_gen", "pcie_link_gen_max", "pcie_link_width", "pcie_link_width_max")


def latest_documents(session: Session, *, now: datetime) -> dict[int, dict]:
    """Node id → its current topology document (the snapshot of its newest change received at
    or before ``now``), with the snapshot's ``partial`` flag. One statement."""
    newest = (
        select(TopologyChange.node_id, func.max(TopologyChange.received_at).label("at"))
        .where(TopologyChange.received_at <= now)
        .group_by(TopologyChange.node_id)
        .subquery()
    )
    rows = session.execute(
        select(TopologyChange.node_id, TopologySnapshot.partial, TopologySnapshot.document)
        .join(TopologySnapshot, TopologySnapshot.id == TopologyChange.snapshot_id)
        .join(
            newest,
            and_(
                TopologyChange.node_id == newest.c.node_id,
                TopologyChange.received_at == newest.c.at,
            ),
        )
        .order_by(TopologyChange.id)
    )
    documents: dict[int, dict] = {}
    for node_id, partial, stored in rows:
        document = dict(stored)
        document["partial"] = bool(partial or document.get("partial"))
        documents[node_id] = document
    return documents


def gpu_facts(session: Session, *, oldest: datetime) -> dict[int, list[GpuFacts]]:
    """Node id → its GPUs in index order, each with the PCIe readings (``pcie_link_gen``,
    ``…_max``, ``pcie_link_width``, ``…_max``) of its newest sample
    (:func:`app.series.gpu_now.newest`); None where that sample is older than ``oldest``,
    missing, or did not report the value. Two statements."""
    rows = session.execute(
        select(Gpu.id, Gpu.node_id, Gpu.index, Gpu.name, Gpu.state, Gpu.last_sample_at).order_by(
            Gpu.node_id, Gpu.index
        )
    )
    pcie_of = gpu_now.newest_by_gpu(session, _PCIE)
    facts: dict[int, list[GpuFacts]] = defaultdict(list)
    for gpu_id, node_id, index, name, state, latest_at in rows:
        pcie = pcie_of.get(gpu_id)
        fresh = pcie is not None and latest_at is not None and latest_at >= oldest
        gen, gen_max, width, width_max = (
            (pcie[n] for n in _PCIE) if pcie is not None and fresh else (None, None, None, None)
        )
        facts[node_id].append(GpuFacts(index, name, state, gen, gen_max, width, width_max))
    return facts


def nvlinks_up(session: Session, *, oldest: datetime) -> dict[int, dict[int, int]]:
    """Node id → GPU index → NVLinks whose state is ``up``, from the newest reading of each
    link (at or after ``oldest``). The agent sends every link each ``--nvlink-interval`` and a
    link alone when it changes (:mod:`agents.nvlink_thinner`), so a node's newest rows may be
    one link's: each link's own newest row counts, as the node page reads them. A GPU whose
    newest reading is more than :data:`~app.series.writes.LATEST_WINDOW_S` older than its node's
    newest (its links no longer reported: lost, removed) is left out, and so is a node with no
    reading since ``oldest``.

    One statement over the links' current readings (:func:`app.series.latest.current_of`)."""
    owners = select(Gpu.id.label("id")).subquery("owners")
    link = latest.NVLINK.table.c
    newest = (
        latest.current_of(
            latest.NVLINK,
            owners=owners,
            columns=["gpu_id", "sampled_at", "state"],
            window_start=lambda at: before(at, LATEST_WINDOW_S),
        )
        .where(link.sampled_at >= oldest)
        .subquery("newest_links")
    )
    up = func.sum(case((newest.c.state == "up", 1), else_=0))
    rows = session.execute(
        select(Gpu.node_id, Gpu.index, func.max(newest.c.sampled_at), up)
        .join(newest, newest.c.gpu_id == Gpu.id)
        .group_by(Gpu.node_id, Gpu.index)
    ).all()
    node_newest: dict[int, datetime] = {}
    for node_id, _, gpu_newest, _ in rows:
        node_newest[node_id] = max(gpu_newest, node_newest.get(node_id, gpu_newest))
    window = timedelta(seconds=LATEST_WINDOW_S)
    found: dict[int, dict[int, int]] = defaultdict(dict)
    for node_id, index, gpu_newest, links_up in rows:
        if gpu_newest >= node_newest[node_id] - window:
            found[node_id][index] = int(links_up)
    return found


def nic_port_states(
    session: Session, *, oldest: datetime
) -> dict[int, dict[str, list[str | None]]]:
    """Node id → NIC device → ``state`` of each of its ports' current readings, for
    ports reported at or after ``oldest`` and within :data:`app.series.writes.LATEST_WINDOW_S` of
    the node's newest port reading (older ports are gone, as on the node page). One statement;
    the window is applied here, since a port reported since ``oldest`` makes the node's newest
    reading one of these rows."""
    columns = ["node_id", "device", "sampled_at", "state"]
    rows = [
        (r.node_id, r.device, r.sampled_at, r.state)
        for r in latest.read(session, latest.NIC, since=oldest, columns=columns)
    ]
    node_newest: dict[int, datetime] = {}
    for node_id, _, sampled_at, _ in rows:
        node_newest[node_id] = max(sampled_at, node_newest.get(node_id, sampled_at))
    window = timedelta(seconds=LATEST_WINDOW_S)
    found: dict[int, dict[str, list[str | None]]] = defaultdict(lambda: defaultdict(list))
    for node_id, device, sampled_at, state in rows:
        if sampled_at >= node_newest[node_id] - window:
            found[node_id][device].append(state)
    return found


def load_signatures(session: Session, *, now: datetime) -> dict[str, NodeSignature]:
    """Hostname → :class:`NodeSignature` of every node that has stored a topology by ``now``,
    in hostname order; five SQL statements however many nodes there are.

    PCIe values are each GPU's newest sample (``pcie_link_gen``, ``…_max``,
    ``pcie_link_width``, ``…_max``); NVLinks count the current link readings with state
    ``up``; NIC states are each port's current ``state``. Readings older than
    :data:`READING_MAX_AGE_S` before ``now`` are left out."""
    documents = latest_documents(session, now=now)
    if not documents:
        return {}
    oldest = now - timedelta(seconds=READING_MAX_AGE_S)
    nodes = session.execute(
        select(Node.id, Node.hostname, Node.labels).where(in_service()).order_by(Node.hostname)
    ).all()
    gpus = gpu_facts(session, oldest=oldest)
    nvlinks = nvlinks_up(session, oldest=oldest)
    ports = nic_port_states(session, oldest=oldest)
    return {
        hostname: build_signature(
            hostname,
            labels=labels or {},
            document=documents[node_id],
            gpus=gpus.get(node_id, []),
            nvlinks_up=nvlinks.get(node_id, {}),
            nic_port_states=ports.get(node_id, {}),
        )
        for node_id, hostname, labels in nodes
        if node_id in documents
    }
