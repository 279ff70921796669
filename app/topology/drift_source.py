"""Reading what drift detection compares: every node's latest stored topology, GPU inventory with
its newest PCIe readings, newest NVLink states and newest NIC port states."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session

from app.fleet import service as fleet_service
from app.fleet.models import Gpu
from app.nics.models import NicPortSample
from app.nvlinks.models import NvlinkSample
from app.timeseries import latest_per_key
from app.topology.models import TopologyChange
from app.topology.signature import GpuFacts, NodeSignature, build_signature

#: NVLink and NIC readings older than this before ``now`` say nothing about the node now.
READING_MAX_AGE_S = 900.0


def latest_documents(session: Session, *, now: datetime) -> dict[int, dict]:
    """Node id → its current topology document (the snapshot of its newest change received at
    or before ``now``), with the snapshot's ``partial`` flag."""
    newest = (
        select(TopologyChange.node_id, func.max(TopologyChange.received_at).label("at"))
        .where(TopologyChange.received_at <= now)
        .group_by(TopologyChange.node_id)
        .subquery()
    )
    changes = session.scalars(
        select(TopologyChange)
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
    for change in changes:
        document = dict(change.snapshot.document)
        document["partial"] = bool(change.snapshot.partial or document.get("partial"))
        documents[change.node_id] = document
    return documents


def nvlinks_up(
    session: Session, *, gpus_by_node: dict[int, list[Gpu]], oldest: datetime
) -> dict[int, dict[int, int]]:
    """Node id → GPU index → NVLinks whose state is ``up`` in the node's newest NVLink reading
    (at or after ``oldest``). A GPU that did not report at that time is left out. Two queries
    per node: a per-link lookup would be one per GPU."""
    found: dict[int, dict[int, int]] = {}
    for node_id, gpus in gpus_by_node.items():
        index = {g.id: g.index for g in gpus}
        if not index:
            continue
        newest = session.scalar(
            select(func.max(NvlinkSample.sampled_at)).where(
                NvlinkSample.gpu_id.in_(index), NvlinkSample.sampled_at >= oldest
            )
        )
        if newest is None:
            continue
        rows = session.execute(
            select(NvlinkSample.gpu_id, NvlinkSample.state).where(
                NvlinkSample.gpu_id.in_(index), NvlinkSample.sampled_at == newest
            )
        )
        per_gpu: dict[int, int] = {}
        for gpu_id, state in rows:
            per_gpu[index[gpu_id]] = per_gpu.get(index[gpu_id], 0) + (state == "up")
        found[node_id] = per_gpu
    return found


def load_signatures(session: Session, *, now: datetime) -> dict[str, NodeSignature]:
    """Hostname → :class:`NodeSignature` of every node that has stored a topology by ``now``.

    PCIe values are each GPU's newest ``gpu_sample`` (``pcie_link_gen``, ``…_max``,
    ``pcie_link_width``, ``…_max``); NVLinks count the newest ``nvlink_sample`` rows with state
    ``up``; NIC states are the newest ``nic_port_sample.state`` per port. Readings older than
    :data:`READING_MAX_AGE_S` before ``now`` are left out."""
    documents = latest_documents(session, now=now)
    views = [
        v
        for v in fleet_service.list_nodes(session, stale_after_s=READING_MAX_AGE_S, now=now)
        if v.node.id in documents
    ]
    oldest = now - timedelta(seconds=READING_MAX_AGE_S)
    nvlinks = nvlinks_up(
        session, gpus_by_node={v.node.id: [g.gpu for g in v.gpus] for v in views}, oldest=oldest
    )
    ports: dict[int, dict[str, list[str | None]]] = defaultdict(lambda: defaultdict(list))
    for port in latest_per_key(
        session,
        NicPortSample,
        owner=NicPortSample.node_id,
        owner_ids=[v.node.id for v in views],
        keys=[NicPortSample.device, NicPortSample.port],
    ):
        if port.sampled_at >= oldest:
            ports[port.node_id][port.device].append(port.state)
    signatures = {}
    for view in views:
        facts = []
        for g in view.gpus:
            fresh = g.latest_at is not None and g.latest_at >= oldest
            value = g.latest if fresh else {}
            facts.append(
                GpuFacts(
                    index=g.gpu.index,
                    name=g.gpu.name,
                    state=g.gpu.state,
                    pcie_gen=value.get("pcie_link_gen"),
                    pcie_gen_max=value.get("pcie_link_gen_max"),
                    pcie_width=value.get("pcie_link_width"),
                    pcie_width_max=value.get("pcie_link_width_max"),
                )
            )
        node = view.node
        signatures[node.hostname] = build_signature(
            node.hostname,
            labels=node.labels or {},
            document=documents[node.id],
            gpus=facts,
            nvlinks_up=nvlinks.get(node.id, {}),
            nic_port_states=ports.get(node.id, {}),
        )
    return signatures
