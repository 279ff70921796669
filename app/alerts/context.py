"""What one evaluation reads once and every rule shares: the fleet inventory (nodes and GPUs,
without samples), scope resolution, and the lazily computed fleet health and drift."""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import json
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.alerts.spec import Scope
from app.fleet.models import Gpu, Node, in_service
from app.fleet.value_quality import unsupported_metrics
from app.health.rules import HealthRules
from app.health.schemas import NodeHealthOut
from app.series.recent_gpu import RecentGpuSamples


@dataclass(frozen=True)
class NodeInfo:
    """A node's identity, labels, receive times (server clock) and the GPU count its agent says
    it has."""

    id: int
    hostname: str
    labels: dict[str, str]
    created_at: datetime
    last_seen_at: datetime | None
    last_sample_at: datetime | None
    clock_skew_s: float | None
    expected_gpu_count: int | None = None


@dataclass(frozen=True)
class GpuInfo:
    """A GPU's identity and last reported state (``ok``, ``lost``, ``unknown_error``,
    ``missing``)."""

    id: int
    node_id: int
    index: int
    uuid: str
    name: str | None
    state: str
    last_seen_at: datetime


class Observation(NamedTuple):
    """One entity's reading for a rule: ``value`` (None: none) and ``met`` — True/False, or
    None for no data (decided by the rule's ``no_data``). A named tuple: an evaluation at
    1,000 nodes makes ~20,000 of them: 0.2 µs each to build, a frozen dataclass 0.7 µs."""

    labels: dict[str, str]
    identity: tuple[str, ...]
    value: float | None
    met: bool | None
    entity: str
    #: The entity's suggested repair as one sentence (``{suggested_action}`` in templates;
    #: :func:`app.health.actions.sentence`), "" for none.
    action: str = ""


@dataclass
class EvalContext:
    """Per-evaluation shared state. ``fresh_node_ids``: nodes with a batch received within
    ``stale_after_s``; sample-based kinds only look at those (a stale node is the ``absence``
    kind's business, so a dead node does not also make a no-data storm)."""

    session: Session
    now: datetime
    health_rules: HealthRules
    nodes: dict[int, NodeInfo]
    gpus: dict[int, GpuInfo]
    fresh_node_ids: set[int]
    #: The nodes a node-scoped evaluation (a wake-up for the nodes whose batches changed) was
    #: loaded for; None: the whole fleet. ``nodes`` and ``gpus`` then hold only those, and an
    #: empty scope means them, not every node.
    only_nodes: frozenset[int] | None = None
    cache: dict[str, Any] = field(default_factory=dict)
    #: Every GPU's recent samples kept between evaluations (the scheduler's, reading the
    #: arrival feed); None: a fresh one is loaded when a rule needs it.
    recent_gpu: RecentGpuSamples | None = None
    _scopes: dict[str, set[int] | None] = field(default_factory=dict)
    _scope_keys: dict[int, tuple[Scope, str]] = field(default_factory=dict)
    _gpu_scopes: dict[str, set[int] | None] = field(default_factory=dict)
    _health: dict[str, NodeHealthOut] | None = None
    _drift: list[Any] | None = None

    @property
    def stale_after_s(self) -> float:
        """The freshness window of a node, seconds."""
        return self.health_rules.stale_after_s

    def _key(self, scope: Scope) -> str:
        """``scope`` as its JSON, dumped once per scope object and evaluation (dumping it per
        GPU and rule took seconds at 8,000 GPUs × 500 rules)."""
        entry = self._scope_keys.get(id(scope))
        if entry is None or entry[0] is not scope:
            entry = (scope, scope.model_dump_json())
            self._scope_keys[id(scope)] = entry
        return entry[1]

    def scoped_nodes(self, scope: Scope) -> set[int] | None:
        """Node ids within ``scope`` (None: every node of the fleet), cached per distinct
        scope; in a node-scoped evaluation never None (at most the nodes loaded)."""
        if not scope.labels and not scope.nodes:
            return None if self.only_nodes is None else set(self.nodes)
        key = self._key(scope)
        if key not in self._scopes:
            patterns = [re.compile(fnmatch.translate(p), re.IGNORECASE) for p in scope.nodes]
            self._scopes[key] = {
                n.id
                for n in self.nodes.values()
                if all(n.labels.get(k) == v for k, v in scope.labels.items())
                and (not patterns or any(p.match(n.hostname) for p in patterns))
            }
        return self._scopes[key]

    def unsupported(self, gpu_id: int, metric: str) -> bool:
        """Whether GPU ``gpu_id`` does not support ``metric`` (its driver said
        ``NOT_SUPPORTED``): a property of the card, never "no data"
        (:mod:`app.fleet.value_quality`). One statement per evaluation, on first use."""
        if "unsupported" not in self.cache:
            rows = self.session.execute(
                select(Gpu.id, Gpu.unavailable).where(
                    Gpu.unavailable.is_not(None),
                    Gpu.node_id.in_(select(Node.id).where(in_service())),
                )
            )
            self.cache["unsupported"] = {
                gid: found for gid, why in rows if (found := unsupported_metrics(why))
            }
        by_gpu: dict[int, frozenset[str]] = self.cache["unsupported"]
        return metric in by_gpu.get(gpu_id, ())

    def scoped_gpus(self, scope: Scope) -> set[int] | None:
        """Ids of the GPUs within ``scope`` (their node and model; None: every GPU), cached
        per distinct scope."""
        if not scope.labels and not scope.nodes and not scope.gpu_models:
            return None
        key = self._key(scope)
        if key not in self._gpu_scopes:
            nodes = self.scoped_nodes(scope)
            self._gpu_scopes[key] = {
                g.id
                for g in self.gpus.values()
                if (nodes is None or g.node_id in nodes)
                and (
                    not scope.gpu_models
                    or any(fnmatch.fnmatchcase(g.name or "", p) for p in scope.gpu_models)
                )
            }
        return self._gpu_scopes[key]

    def node_in(self, scope: Scope, node_id: int) -> bool:
        """Whether ``node_id`` is a loaded node within ``scope`` (a node the evaluation did
        not load — retired, or outside a node-scoped evaluation — is not: SQL scans over the
        sample tables see its rows too)."""
        if node_id not in self.nodes:
            return False
        ids = self.scoped_nodes(scope)
        return ids is None or node_id in ids

    def gpu_in(self, scope: Scope, gpu_id: int) -> bool:
        """Whether GPU ``gpu_id`` is within ``scope`` (its node and its model)."""
        if gpu_id not in self.gpus:
            return False
        ids = self.scoped_gpus(scope)
        return ids is None or gpu_id in ids

    def health(self) -> dict[str, NodeHealthOut]:
        """Fleet health by hostname, read once per evaluation from the stored health
        (``app.health.current``: the same answers as evaluating the fleet, which took ~8 s of
        each evaluation at 1,000 nodes)."""
        if self._health is None:
            from app.health import current as health_current

            nodes = health_current.list_states(
                self.session,
                stale_after_s=self.stale_after_s,
                now=self.now,
                node_ids=self.only_nodes,
            )
            unsettled = None
            if self.only_nodes is not None:
                unsettled = health_current.unsettled_count(self.session)
            self._health, _ = health_current.health_of(
                self.session,
                nodes=nodes,
                rules=self.health_rules,
                now=self.now,
                fleet_unsettled=unsettled,
            )
        return self._health

    def drift(self) -> list[Any]:
        """Fleet drift findings (``app.topology.drift.find_drift``), once per evaluation."""
        if self._drift is None:
            from app.topology.drift import find_drift

            self._drift = find_drift(self.session, now=self.now)
        return self._drift

    def node_labels(self, node_id: int) -> dict[str, str]:
        """``hostname`` and the node's labels."""
        node = self.nodes[node_id]
        return {**{k: str(v) for k, v in node.labels.items()}, "hostname": node.hostname}

    def gpu_labels(self, gpu_id: int) -> dict[str, str]:
        """The node's labels plus ``gpu_index``, ``gpu_uuid`` and ``gpu_model``."""
        gpu = self.gpus[gpu_id]
        return self.gpu_labels_on(gpu, gpu.node_id)

    def gpu_labels_on(self, gpu: GpuInfo, node_id: int) -> dict[str, str]:
        """:meth:`gpu_labels` of ``gpu`` as a GPU of node ``node_id`` (an event's node, which
        the GPU may have left since)."""
        return {
            **self.node_labels(node_id),
            "gpu_index": str(gpu.index),
            "gpu_uuid": gpu.uuid,
            "gpu_model": gpu.name or "",
        }

    def gpu_anywhere(self, gpu_id: int) -> GpuInfo | None:
        """GPU ``gpu_id``: loaded, or (a node-scoped evaluation, the GPU on a node not loaded)
        read by id once; None when it is gone."""
        gpu = self.gpus.get(gpu_id)
        if gpu is None and self.only_nodes is not None:
            elsewhere: dict[int, GpuInfo | None] = self.cache.setdefault("gpus_elsewhere", {})
            if gpu_id not in elsewhere:
                row = self.session.execute(_GPU_QUERY.where(Gpu.id == gpu_id)).first()
                elsewhere[gpu_id] = None if row is None else GpuInfo(*row)
            gpu = elsewhere[gpu_id]
        return gpu

    def gpu_entity(self, gpu_id: int) -> str:
        """``node-a GPU 3``."""
        gpu = self.gpus[gpu_id]
        return f"{self.nodes[gpu.node_id].hostname} GPU {gpu.index}"


#: The columns of :class:`GpuInfo`, in its order.
_GPU_QUERY = select(Gpu.id, Gpu.node_id, Gpu.index, Gpu.uuid, Gpu.name, Gpu.state, Gpu.last_seen_at)


def load_context(
    session: Session,
    *,
    now: datetime,
    health_rules: HealthRules,
    node_ids: Collection[int] | None = None,
) -> EvalContext:
    """Read the inventory (two queries) for one evaluation at ``now``: of the whole fleet, or
    of ``node_ids`` only (a node-scoped evaluation, see :attr:`EvalContext.only_nodes`)."""
    node_query = select(
        Node.id,
        Node.hostname,
        Node.labels,
        Node.created_at,
        Node.last_seen_at,
        Node.last_sample_at,
        Node.clock_skew_s,
        Node.expected_gpu_count,
    ).where(in_service())
    # A retired node's GPUs are left out with it: its alerts resolve as entities gone.
    gpu_query = _GPU_QUERY.where(Gpu.node_id.in_(select(Node.id).where(in_service())))
    only = None if node_ids is None else frozenset(node_ids)
    if only is not None:
        node_query = node_query.where(Node.id.in_(sorted(only)))
        gpu_query = gpu_query.where(Gpu.node_id.in_(sorted(only)))
    nodes = {
        n.id: NodeInfo(
            n.id,
            n.hostname,
            dict(n.labels or {}),
            n.created_at,
            n.last_seen_at,
            n.last_sample_at,
            n.clock_skew_s,
            n.expected_gpu_count,
        )
        for n in session.execute(node_query)
    }
    gpus = {row[0]: GpuInfo(*row) for row in session.execute(gpu_query)}
    cutoff = now - timedelta(seconds=health_rules.stale_after_s)
    fresh = {
        n.id for n in nodes.values() if n.last_seen_at is not None and n.last_seen_at >= cutoff
    }
    return EvalContext(session, now, health_rules, nodes, gpus, fresh, only)


@functools.lru_cache(maxsize=1 << 18)
def fingerprint(rule_name: str, identity: tuple[str, ...]) -> str:
    """A stable 16-hex-digit id of (rule, entity): SHA-256 of the rule name and the entity's
    identity (hostname, GPU UUID, device …), independent of values and label order. Kept for
    the 262,144 most recent pairs (a fleet's firing instances are the same every tick)."""
    raw = json.dumps([rule_name, *identity], separators=(",", ":"))
    return hashlib.sha256(raw.encode()).hexdigest()[:16]
