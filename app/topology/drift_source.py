"""Reading what drift detection compares: every node's latest stored topology, GPU inventory with
its newest PCIe readings, newest NVLink states and newest NIC port states."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session

from app.fleet import service as fleet_service
from app.nics.models import NicPortSample
from app.nvlinks import service as nvlink_service
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
    gpus = [g.gpu for v in views for g in v.gpus]
    index_of = {g.id: g.index for g in gpus}
    nvlinks: dict[int, dict[int, int]] = defaultdict(dict)
    node_of = {g.id: g.node_id for g in gpus}
    for link in nvlink_service.list_latest_links(session, gpus=gpus):
        if link.sampled_at < oldest:
            continue
        per_gpu = nvlinks[node_of[link.gpu_id]]
        index = index_of[link.gpu_id]
        per_gpu[index] = per_gpu.get(index, 0) + (link.state == "up")
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
