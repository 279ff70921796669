"""Queries over the fleet inventory: nodes, their GPUs and their latest values."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, cast

from sqlalchemy import Text, func, select
from sqlalchemy import cast as cast_
from sqlalchemy.orm import Session, subqueryload

from app.db import json_loads, utcnow
from app.errors import NotFound
from app.fleet.models import Gpu, Node, in_service
from app.metrics.catalog import METRIC_NAMES
from app.series import gpu_now

HOSTNAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$")
Freshness = Literal["fresh", "stale", "never_seen"]


def get_node_by_hostname(session: Session, *, hostname: str) -> Node:
    """The node named ``hostname``.

    Raises:
        NotFound: no such node.
    """
    node = session.scalars(select(Node).where(Node.hostname == hostname)).one_or_none()
    if node is None:
        raise NotFound(f"no node named {hostname!r}")
    return node


def _dns_form_hint(hostname: str) -> str:
    """For a name with non-ASCII letters, a hint naming its DNS form (IDNA, RFC 3490), which
    the agent sends with ``--hostname``; else ``""``."""
    if hostname.isascii():
        return ""
    try:
        dns = hostname.encode("idna").decode("ascii")
    except UnicodeError:
        return ""
    return (
        f" (use its DNS form {dns!r}, as the agent's --hostname)" if HOSTNAME_RE.match(dns) else ""
    )


def hostnames(session: Session, node_ids: list[int]) -> dict[int, str]:
    """Hostname of each of ``node_ids`` that exists."""
    if not node_ids:
        return {}
    rows = session.execute(select(Node.id, Node.hostname).where(Node.id.in_(set(node_ids))))
    return {node_id: hostname for node_id, hostname in rows}


def node_ids_matching(session: Session, *, hostname_contains: str) -> list[int]:
    """Ids of the nodes whose hostname contains ``hostname_contains`` (case-insensitive)."""
    query = select(Node.id).where(Node.hostname.icontains(hostname_contains, autoescape=True))
    return list(session.scalars(query))


def get_or_create_node(session: Session, *, hostname: str) -> Node:
    """The node named ``hostname``, created (never seen, no labels) if it does not exist.

    Raises:
        ValueError: ``hostname`` is not a valid hostname (RFC 1123 characters, ≤ 253).
    """
    if not HOSTNAME_RE.match(hostname):
        raise ValueError(
            f"not a valid hostname: {hostname!r}: expected at most 253 ASCII letters, digits, "
            "'.', '_' and '-', starting and ending with a letter or digit (an internationalised "
            f"name in its punycode form, xn--…, as DNS holds it){_dns_form_hint(hostname)}"
        )
    node = session.scalars(select(Node).where(Node.hostname == hostname)).one_or_none()
    if node is None:
        node = Node(hostname=hostname, labels={}, created_at=utcnow())
        session.add(node)
        session.flush()
    return node


def freshness(node: Node, *, now: datetime, stale_after_s: float) -> Freshness:
    """``fresh`` if a batch arrived within ``stale_after_s`` seconds (server time), ``stale`` if
    one arrived earlier, ``never_seen`` if none ever did."""
    if node.last_seen_at is None:
        return "never_seen"
    age = (now - node.last_seen_at).total_seconds()
    return "fresh" if age <= stale_after_s else "stale"


@dataclass
class GpuView:
    """A GPU with its newest stored sample (``latest`` maps metric name → value or None)."""

    gpu: Gpu
    latest_at: datetime | None
    latest: dict[str, Any] = field(default_factory=dict)


@dataclass
class NodeView:
    """A node with everything the fleet list and node page show about it now."""

    node: Node
    freshness: Freshness
    gpus: list[GpuView]

    @property
    def gpu_count(self) -> int:
        """GPUs in the node's stored inventory."""
        return len(self.gpus)

    @property
    def mean_util_gpu_pct(self) -> float | None:
        """Mean of the GPUs' latest ``util_gpu_pct`` over those that report it; None if none."""
        values = [
            g.latest["util_gpu_pct"] for g in self.gpus if g.latest.get("util_gpu_pct") is not None
        ]
        return sum(values) / len(values) if values else None

    @property
    def hottest(self) -> GpuView | None:
        """The GPU with the highest latest ``temp_c`` (None if no GPU reports a temperature)."""
        hot = [g for g in self.gpus if g.latest.get("temp_c") is not None]
        return max(hot, key=lambda g: g.latest["temp_c"]) if hot else None

    @property
    def max_temp_c(self) -> float | None:
        """The hottest GPU's latest temperature in °C."""
        hottest = self.hottest
        return hottest.latest["temp_c"] if hottest else None

    @property
    def lost_gpu_count(self) -> int:
        """GPUs whose last reported state is not ``ok``."""
        return sum(1 for g in self.gpus if g.gpu.state != "ok")

    def age_s(self, now: datetime) -> float | None:
        """Seconds since the newest stored sample (agent's clock), or None."""
        if self.node.last_sample_at is None:
            return None
        return max(0.0, (now - self.node.last_sample_at).total_seconds())


def _latest_by_gpu(session: Session, gpus: list[Gpu]) -> dict[int, dict[str, Any]]:
    """Newest sample of each GPU, by primary-key lookup on ``(gpu_id, gpu.last_sample_at)``."""
    result: dict[int, dict[str, Any]] = {}
    ids = [g.id for g in gpus if g.last_sample_at is not None]
    for start in range(0, len(ids), 500):
        result |= gpu_now.newest_by_gpu(session, METRIC_NAMES, gpu_ids=ids[start : start + 500])
    return result


def _latest_of_nodes(session: Session, node_ids: list[int] | None) -> dict[int, dict[str, Any]]:
    """Newest sample of every GPU (of the nodes ``node_ids``; None: all), in one statement:
    the join on ``gpu.last_sample_at`` is a primary-key lookup per GPU."""
    return gpu_now.newest_by_gpu(session, METRIC_NAMES, node_ids=node_ids)


def list_nodes(
    session: Session,
    *,
    stale_after_s: float,
    labels: dict[str, str] | None = None,
    search: str | None = None,
    now: datetime | None = None,
    retired: bool = False,
) -> list[NodeView]:
    """Every node in service (filtered by exact label values and a hostname substring; retired
    nodes left out, or only they with ``retired``), sorted by hostname, with freshness, GPUs and
    latest values: three statements whatever the fleet size. The GPUs' JSON documents
    (processes, MIG instances, unavailable) are deferred (loaded on access)."""
    now = now or utcnow()
    # subqueryload: one statement for any number of nodes (selectinload sends 500 ids a time).
    # Deferred, not raiseload: other code in the same session (alert evaluation) may load these
    # GPUs again and read them.
    gpus = subqueryload(Node.gpus).defer(Gpu.processes).defer(Gpu.mig_instances)
    gpus = gpus.defer(Gpu.unavailable).defer(Gpu.implausible).defer(Gpu.implausible_inventory)
    serving = Node.retired_at.is_not(None) if retired else in_service()
    stmt = select(Node).options(gpus).where(serving).order_by(Node.hostname)
    if search:
        # lower() on both sides: LIKE is case-sensitive on Postgres and not on SQLite.
        stmt = stmt.where(func.lower(Node.hostname).contains(search.lower(), autoescape=True))
    nodes = list(session.scalars(stmt))
    if labels:
        nodes = [n for n in nodes if all(n.labels.get(k) == v for k, v in labels.items())]
    narrowed = bool(search or labels)
    latest = _latest_of_nodes(session, [n.id for n in nodes] if narrowed else None)
    return [
        NodeView(
            node=n,
            freshness=freshness(n, now=now, stale_after_s=stale_after_s),
            gpus=[GpuView(g, g.last_sample_at, latest.get(g.id, {})) for g in n.gpus],
        )
        for n in nodes
    ]


#: The columns :func:`list_node_rows` reads: what the fleet lists, the overview and the health
#: checks show (not the JSON documents, nor first-seen times, PCI address, MIG mode).
NODE_ROW_COLUMNS = (
    Node.id,
    Node.hostname,
    Node.labels,
    Node.agent_version,
    Node.driver_version,
    Node.cuda_version,
    Node.last_seen_at,
    Node.last_sample_at,
    Node.clock_skew_s,
    Node.expected_gpu_count,
    Node.collection_errors,
)
GPU_ROW_COLUMNS = (
    Gpu.id,
    Gpu.node_id,
    Gpu.uuid,
    Gpu.index,
    Gpu.name,
    Gpu.mem_total_bytes,
    Gpu.state,
    Gpu.state_reason,
    Gpu.last_seen_at,
    Gpu.last_sample_at,
)


def list_node_rows(
    session: Session,
    *,
    stale_after_s: float,
    now: datetime,
    search: str | None = None,
    labels: dict[str, str] | None = None,
    metrics: Sequence[str] = METRIC_NAMES,
    ids: Sequence[int] | None = None,
) -> list[NodeView]:
    """Every node in service (hostname containing ``search`` in any case, exact ``labels``
    values, id in ``ids`` when given), sorted by hostname, with freshness, GPUs (by index) and
    their latest ``metrics``: three statements whatever the fleet size, reading plain rows
    instead of ORM objects (several times faster for thousands of GPUs).

    ``view.node`` and ``view.gpu`` are read-only SQLAlchemy rows with the columns of
    :data:`NODE_ROW_COLUMNS` / :data:`GPU_ROW_COLUMNS` as attributes (no relationships, no JSON
    documents but ``labels``): for lists and health, not for code that changes a node."""
    stmt = select(*NODE_ROW_COLUMNS).where(in_service()).order_by(Node.hostname)
    if ids is not None:
        stmt = stmt.where(Node.id.in_(list(ids)))
    rows = list(session.execute(stmt))
    if search:
        needle = search.lower()
        rows = [n for n in rows if needle in n.hostname.lower()]
    if labels:
        rows = [n for n in rows if all((n.labels or {}).get(k) == v for k, v in labels.items())]
    narrowed = bool(search or labels) or ids is not None
    ids = [n.id for n in rows]
    gpu_stmt = select(*GPU_ROW_COLUMNS).order_by(Gpu.node_id, Gpu.index)
    if narrowed:
        gpu_stmt = gpu_stmt.where(Gpu.node_id.in_(ids))
    gpus: dict[int, list[Any]] = {}
    for g in session.execute(gpu_stmt):
        gpus.setdefault(g.node_id, []).append(g)
    latest = gpu_now.newest_by_gpu(session, metrics, node_ids=ids if narrowed else None)
    return [
        NodeView(
            node=cast(Node, n),
            freshness=freshness(cast(Node, n), now=now, stale_after_s=stale_after_s),
            gpus=[
                GpuView(cast(Gpu, g), g.last_sample_at, latest.get(g.id, {}))
                for g in gpus.get(n.id, ())
            ],
        )
        for n in rows
    ]


def never_listed(expected: int | None, listed: int) -> int:
    """How many of the ``expected`` GPUs of a node (its agent's ``expected_gpu_count``) have
    no row at all, ``listed`` being its GPU rows, missing ones included: GPUs the driver never
    enumerated (lost before the agent started). 0 when the agent did not say."""
    return 0 if expected is None else max(0, expected - listed)


def get_node_view(
    session: Session, *, hostname: str, stale_after_s: float, now: datetime | None = None
) -> NodeView:
    """One node with its GPUs and their latest values.

    Raises:
        NotFound: no such node.
    """
    now = now or utcnow()
    node = get_node_by_hostname(session, hostname=hostname)
    latest = _latest_by_gpu(session, list(node.gpus))
    return NodeView(
        node=node,
        freshness=freshness(node, now=now, stale_after_s=stale_after_s),
        gpus=[GpuView(g, g.last_sample_at, latest.get(g.id, {})) for g in node.gpus],
    )


#: The inventory columns :func:`list_fresh_gpu_rows` reads beside the newest sample's metrics.
FRESH_GPU_COLUMNS = (
    Node.hostname.label("hostname"),
    # As text, parsed once per node (:func:`list_fresh_gpu_rows`), not once per GPU.
    cast_(Node.labels, Text).label("labels"),
    Node.driver_version.label("driver_version"),
    Gpu.index.label("gpu_index"),
    Gpu.uuid.label("uuid"),
    Gpu.name.label("model_name"),
    Gpu.pci_bus_id.label("pci_bus_id"),
    Gpu.mem_total_bytes.label("mem_total_bytes"),
)


def list_fresh_gpu_rows(
    session: Session, *, metrics: Sequence[str], stale_after_s: float, now: datetime
) -> list[dict[str, Any]]:
    """Every GPU of a node in service whose newest sample the server received (its clock)
    within ``stale_after_s`` of ``now``, by hostname and GPU index, in one statement (the
    newest sample is a primary-key lookup per GPU: :func:`app.series.gpu_now.newest`).

    Each row (a dict) maps ``gpu_id``, each name of ``metrics`` (the sample's value, None: not
    available), and the columns of :data:`FRESH_GPU_COLUMNS`: the node's ``hostname``,
    ``labels`` (a dict shared by the node's rows) and ``driver_version``, the GPU's
    ``gpu_index``, ``uuid``, ``model_name``, ``pci_bus_id`` and ``mem_total_bytes``
    (bytes)."""
    since = now - timedelta(seconds=stale_after_s)
    stmt = (
        gpu_now.newest(metrics, received_since=since)
        .add_columns(*FRESH_GPU_COLUMNS)
        .join(Node, Node.id == Gpu.node_id)
        .where(in_service())
        .order_by(Node.hostname, Gpu.index)
    )
    parsed: dict[str | None, dict[str, Any]] = {}
    found = []
    for row in session.execute(stmt).mappings():
        if row["gpu_id"] is None:  # its newest sample is older: not fresh
            continue
        item = dict(row)
        text = item["labels"]
        if text not in parsed:
            parsed[text] = (json_loads(text) or {}) if text else {}
        item["labels"] = parsed[text]
        found.append(item)
    return found


def gpu_models(session: Session) -> list[str]:
    """The distinct GPU model names of the fleet's inventory (nodes in service), sorted."""
    names = select(Gpu.name).join(Node, Node.id == Gpu.node_id).where(in_service()).distinct()
    return sorted(name for name in session.scalars(names) if name is not None)
