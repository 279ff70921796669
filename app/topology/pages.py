"""``/nodes/{hostname}/topology``: the node's topology drawn as a graph (inline SVG built on the
server from :mod:`app.topology.graph`) above the ``nvidia-smi topo -m`` matrix and its legend."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from app.db import SessionDep
from app.fleet import service as fleet_service
from app.nvlinks import service as nvlink_service
from app.topology import service as topology_service
from app.topology.graph import NvlinkState, TopologyGraph, build_graph
from app.topology.matrix import LEGEND, build_matrix
from app.web import render

router = APIRouter(include_in_schema=False)

TOPOLOGY_CHANGES = 5

#: What each kind of edge means, for the edge's tooltip (nvidia-smi's legend, NV# for NVLinks).
EDGE_MEANING: dict[str, str] = {code: text for code, text in LEGEND}


def edge_meaning(code: str) -> str:
    """nvidia-smi's legend text for ``code`` (``NV18`` → the ``NV#`` text); empty if unknown."""
    if code.startswith("NV"):
        return EDGE_MEANING["NV#"].replace("#", code[2:])
    return EDGE_MEANING.get(code, "")


def describe(graph: TopologyGraph) -> str:
    """One sentence for the drawing's ``<desc>``: what is drawn and what is wrong."""
    parts = [
        f"{graph.count('gpu')} GPU(s)",
        f"{graph.count('nic')} NIC(s)",
        f"{graph.count('cpu')} CPU/NUMA node(s)",
        f"{graph.count('pcie_switch')} PCIe switch node(s)",
    ]
    text = ", ".join(parts)
    if graph.count("nvswitch"):
        text += "; GPUs connected through an NVSwitch fabric"
    down = [e for e in graph.edges if e.state == "down"]
    if down:
        text += "; NVLink down on " + ", ".join(
            f"{graph.name(e.a)}–{graph.name(e.b)}" for e in down
        )
    return text + "."


def readable(document: Any) -> dict[str, Any]:
    """The devices (dicts with a string id) and links (dicts with string ends and type) of a
    stored document, so that a damaged one still gives a matrix of what it has."""
    doc = document if isinstance(document, dict) else {}
    devices = doc.get("devices")
    links = doc.get("links")
    devices = devices if isinstance(devices, list) else []
    links = links if isinstance(links, list) else []
    return {
        "devices": [d for d in devices if isinstance(d, dict) and isinstance(d.get("id"), str)],
        "links": [
            link
            for link in links
            if isinstance(link, dict)
            and all(isinstance(link.get(k), str) for k in ("a", "b", "type"))
        ],
    }


@router.get("/nodes/{hostname}/topology", response_class=HTMLResponse)
def topology_page(request: Request, session: SessionDep, hostname: str) -> HTMLResponse:
    """The node's current topology as a graph and a matrix; a "no topology reported" state
    before the first report; a warning and what can be drawn for a partial one. 404 page for
    an unknown node."""
    node = fleet_service.get_node_by_hostname(session, hostname=hostname)
    history = topology_service.get_history(session, node_id=node.id, limit=TOPOLOGY_CHANGES)
    context: dict[str, Any] = {
        "view": {"node": node},
        "topology": history,
        "topology_legend": LEGEND,
        "topology_page": True,
        "matrix": None,
        "graph": None,
    }
    if history.latest is not None:
        document = history.latest.snapshot.document
        gpus = list(node.gpus)
        index = {g.id: g.index for g in gpus}
        states = [
            NvlinkState(
                gpu_index=index[s.gpu_id],
                link=s.link,
                state=s.state,
                remote_device_type=s.remote_device_type,
                remote_pci_bus_id=s.remote_pci_bus_id,
            )
            for s in nvlink_service.list_latest_links(session, gpus=gpus)
        ]
        graph = build_graph(document, states, known_gpu_indexes=[g.index for g in gpus])
        context.update(
            graph=graph,
            graph_desc=describe(graph),
            edge_meaning=edge_meaning,
            matrix=build_matrix(readable(document)),
        )
    return render(request, "topology/node_page.html", context)
