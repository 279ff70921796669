"""The overview's tile grid as plain data: nodes grouped cluster → IB pod → node, each GPU a
cell coloured by the chosen overlay, problem groups first. Pure functions of the node views and
their health (no database), so the page and the tests read the same numbers.

Values are the GPUs' latest samples (NVML, see :mod:`app.metrics.catalog`): utilization
``util_gpu_pct`` (nvmlDeviceGetUtilizationRates.gpu), memory used % ``mem_used_bytes /
gpu.mem_total_bytes`` (nvmlDeviceGetMemoryInfo_v2), ``temp_c`` (nvmlDeviceGetTemperature) and
power % ``power_w / power_limit_w`` (nvmlDeviceGetPowerUsage / nvmlDeviceGetEnforcedPowerLimit).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from typing import Any

from markupsafe import Markup, escape

from app.fleet.service import GpuView, NodeView
from app.health.rules import SEVERITY, State
from app.health.schemas import GpuHealthOut, NodeHealthOut, StateCounts
from app.health.service import UNGROUPED, UNLABELLED, count_states
from app.overview.service_marks import ServiceMark

#: Label keys tried, in order, for a node's group under each grouping of the grid: the IB pod
#: (else the rack), the rack, or the NVLink domain (else the rack: an NVL72 rack is one domain).
GROUP_LABELS = ("ib_pod", "pod", "rack")
GROUPINGS: dict[str, tuple[str, ...]] = {
    "pod": GROUP_LABELS,
    "rack": ("rack",),
    "nvlink_domain": ("nvlink_domain", "rack"),
}
#: Upper bounds of the value buckets 0–3 (bucket 4 is anything above), per numeric overlay.
BOUNDS: dict[str, tuple[float, ...]] = {
    "util": (20, 40, 60, 80),
    "mem": (20, 40, 60, 80),
    "temp": (50, 65, 75, 85),
    "power": (20, 40, 60, 80),
}
UNITS = {"util": "%", "mem": "%", "temp": "°C", "power": "%"}
GLYPHS = {State.UNHEALTHY: "✕", State.DEGRADED: "!", State.UNKNOWN: "N/A", State.HEALTHY: ""}
NA = "N/A"
#: Extra class of an unhealthy (``x``) or degraded (``w``) GPU's cell in a numeric overlay.
MARKS = {State.UNHEALTHY: " x", State.DEGRADED: " w"}


@dataclass(frozen=True)
class Cell:
    """One GPU: ``css`` is the colour class (``s-<state>`` for health, ``v0``–``v4`` for a
    value bucket, ``nv`` for no value; plus `` x``/`` w`` for an unhealthy/degraded GPU in a
    numeric overlay); ``glyph`` the text shown in the cell."""

    index: int
    css: str
    glyph: str
    title: str
    state: State


@dataclass
class NodeTile:
    """A node's tile: its health, a one-line summary for its link, and a cell per GPU;
    ``mark`` where it is out of service or in maintenance; ``html`` is its markup
    (:func:`render_tile`), made once per tile."""

    hostname: str
    state: State
    title: str
    cells: list[Cell]
    mark: ServiceMark | None = None

    @cached_property
    def html(self) -> Markup:
        """The tile's markup: a link to the node with a cell per GPU."""
        return render_tile(self)


def render_tile(tile: NodeTile) -> Markup:
    """``<a class="ov-node n-<state>" …>`` with the hostname and a ``<span class="c …">`` per
    GPU (state is never colour alone: the cell's glyph and title say it); a marked node's tile
    has the class ``svc-out`` or ``svc-maintenance`` and a badge (``Q``, ``R``, ``V``,
    ``RMA``, ``M``) whose title says since when and why."""
    cells = "".join(
        f'<span class="c {escape(c.css)}" title="{escape(c.title)}">{escape(c.glyph)}</span>'
        for c in tile.cells
    )
    host = escape(tile.hostname)
    mark, badge, title = tile.mark, "", tile.title
    extra = ""
    if mark is not None:
        extra = f" {mark.css}"
        title = f"{title} · {mark.title}"
        badge = (
            f'<span class="ov-svc" title="{escape(mark.title)}">{escape(mark.glyph)}'
            f'<span class="sr-only"> {escape(mark.title)}</span></span>'
        )
    return Markup(
        f'<a class="ov-node n-{escape(tile.state.value)}{extra}" href="/nodes/{host}" '
        f'title="{escape(title)}"><span class="ov-host">{host}{badge}</span>'
        f'<span class="ov-cells">{cells}</span></a>'
    )


@dataclass
class Group:
    """An IB pod (``kind`` = the label it came from), a rack, or ``ungrouped``, of a cluster;
    ``counts`` are over all its nodes, ``nodes`` the ones shown."""

    cluster: str
    kind: str
    name: str
    counts: StateCounts
    nodes: list[NodeTile] = field(default_factory=list)


@dataclass
class Cluster:
    """A cluster (``cluster`` label; ``labelled`` False: the nodes without one, named
    ``unlabelled``) with its groups, problems first; ``collapsed_groups`` all-healthy groups of
    ``collapsed_nodes`` nodes are summed up in one line instead (:func:`group_tiles`)."""

    name: str
    counts: StateCounts
    groups: list[Group] = field(default_factory=list)
    labelled: bool = True
    collapsed_groups: int = 0
    collapsed_nodes: int = 0


def group_of(labels: dict[str, Any], keys: tuple[str, ...] = GROUP_LABELS) -> tuple[str, str]:
    """(label key, value) of the node's group: the first of ``keys`` it has (by default
    ``ib_pod``, ``pod``, then ``rack``); else ``("none", "ungrouped")``."""
    for key in keys:
        if labels.get(key):
            return key, str(labels[key])
    return "none", UNGROUPED


def overlay_value(overlay: str, g: GpuView) -> float | None:
    """The GPU's number for a numeric overlay, or None where it is not known (no sample, a
    value the driver did not report, no memory total or power limit)."""
    latest = g.latest
    if overlay == "util":
        return _num(latest.get("util_gpu_pct"))
    if overlay == "temp":
        return _num(latest.get("temp_c"))
    if overlay == "mem":
        used, total = _num(latest.get("mem_used_bytes")), g.gpu.mem_total_bytes
        return used / total * 100 if used is not None and total else None
    if overlay == "power":
        power, limit = _num(latest.get("power_w")), _num(latest.get("power_limit_w"))
        return power / limit * 100 if power is not None and limit else None
    raise ValueError(f"not a numeric overlay: {overlay!r}")


def _num(value: Any) -> float | None:
    return None if value is None else float(value)


def bucket(overlay: str, value: float) -> int:
    """0–4: how many of the overlay's :data:`BOUNDS` the value reaches (``util`` 20 → 1)."""
    return sum(value >= bound for bound in BOUNDS[overlay])


def legend(overlay: str) -> list[tuple[str, str]]:
    """(css class, text) per colour of the overlay, for the legend under the switch."""
    if overlay == "health":
        return [
            ("s-healthy", "Healthy"),
            ("s-degraded", "! Degraded"),
            ("s-unhealthy", "✕ Unhealthy"),
            ("s-unknown", "N/A Unknown"),
        ]
    bounds, unit = BOUNDS[overlay], UNITS[overlay]
    edges = [f"< {bounds[0]:g} {unit}"]
    edges += [f"{lo:g}–{hi:g} {unit}" for lo, hi in itertools.pairwise(bounds)]
    edges.append(f"≥ {bounds[-1]:g} {unit}")
    return [(f"v{i}", text) for i, text in enumerate(edges)] + [("nv", "N/A not reported")]


def _value_text(overlay: str, g: GpuView, value: float | None) -> str:
    if value is None:
        if overlay == "power" and g.latest.get("power_w") is not None:
            return f"{float(g.latest['power_w']):.0f} W, limit not reported"
        return NA
    if overlay == "power":
        return f"{value:.0f} % of limit ({float(g.latest['power_w']):.0f} W)"
    return f"{value:.0f} {UNITS[overlay]}"


def make_cell(overlay: str, g: GpuView, h: GpuHealthOut | None) -> Cell:
    """The cell of GPU ``g`` under ``overlay``; ``h`` its health (None: counted Unknown).
    The title reads ``GPU 3 · NVIDIA H100 80GB HBM3 · 45 % · Unhealthy: reason; reason``."""
    state = h.state if h else State.UNKNOWN
    parts = [f"GPU {g.gpu.index}", g.gpu.name or "unknown model"]
    if overlay == "health":
        css, glyph = f"s-{state.value}", GLYPHS[state]
    else:
        value = overlay_value(overlay, g)
        parts.append(_value_text(overlay, g, value))
        css = "nv" if value is None else f"v{bucket(overlay, value)}"
        glyph = GLYPHS[state] if state in (State.UNHEALTHY, State.DEGRADED) else ""
        css += MARKS.get(state, "")
        if value is None and not glyph:
            glyph = NA
    status = state.value.capitalize()
    if h and h.reasons:
        status += ": " + "; ".join(r.text for r in h.reasons)
    parts.append(status)
    return Cell(index=g.gpu.index, css=css, glyph=glyph, title=" · ".join(parts), state=state)


def make_tile(overlay: str, view: NodeView, health: NodeHealthOut) -> NodeTile:
    """The node's tile: a cell per GPU in index order, the title ``host · Degraded · 1 of 8
    GPUs degraded · reason; reason``."""
    by_index = {gh.index: gh for gh in health.gpus}
    cells = [make_cell(overlay, g, by_index.get(g.gpu.index)) for g in view.gpus]
    parts = [view.node.hostname, health.state.value.capitalize()]
    bad = [c for c in cells if c.state is not State.HEALTHY]
    if bad and health.state is not State.UNKNOWN:
        parts.append(f"{len(bad)} of {len(cells)} GPUs not healthy")
    if health.reasons:
        parts.append("; ".join(dict.fromkeys(r.text for r in health.reasons)))
    return NodeTile(view.node.hostname, health.state, " · ".join(parts), cells)


def _severity_key(counts: StateCounts, name: str) -> tuple[int, int, int, int, str]:
    return (-SEVERITY[counts.worst], -counts.unhealthy, -counts.unknown, -counts.degraded, name)


@dataclass(frozen=True)
class GridEntry:
    """A node to place in the grid: its labels and health state, and how to make its tile
    (called only for the nodes shown)."""

    hostname: str
    labels: dict[str, Any]
    state: State
    tile: Callable[[], NodeTile]
    mark: ServiceMark | None = None

    def made(self) -> NodeTile:
        """The tile, with its service mark (a cached tile is copied, not changed)."""
        tile = self.tile()
        return tile if self.mark is None else replace(tile, mark=self.mark)


def build_grid(
    views: list[NodeView],
    health: dict[str, NodeHealthOut],
    *,
    overlay: str = "health",
    problems_only: bool = False,
    grouping: str = "pod",
    marks: dict[str, ServiceMark] | None = None,
) -> list[Cluster]:
    """Clusters → groups → node tiles of ``views`` (health by hostname, service ``marks`` by
    hostname); see :func:`group_tiles`."""
    marks = marks or {}
    entries = [
        GridEntry(
            hostname=v.node.hostname,
            labels=v.node.labels or {},
            state=health[v.node.hostname].state,
            tile=partial(make_tile, overlay, v, health[v.node.hostname]),
            mark=marks.get(v.node.hostname),
        )
        for v in views
    ]
    return group_tiles(entries, problems_only=problems_only, grouping=grouping)


def group_tiles(
    entries: list[GridEntry],
    *,
    problems_only: bool = False,
    grouping: str = "pod",
    collapse_healthy: bool = False,
) -> list[Cluster]:
    """Clusters → groups → node tiles. Clusters and groups are ordered worst first (then more
    unhealthy, unknown, degraded nodes, then by name); nodes within a group worst first, then by
    hostname. With ``problems_only`` only nodes that are not Healthy are kept, and groups or
    clusters left empty are dropped; counts stay over all nodes. With ``collapse_healthy`` the
    labelled groups whose nodes are all Healthy make no tiles and are counted in their
    cluster's ``collapsed_groups`` (a 5,000-node grid draws its problems and one line, not
    40,000 green cells and 1,250 pod headers). ``grouping`` is a key of :data:`GROUPINGS`."""
    members: dict[tuple[str, bool], dict[tuple[str, str], list[GridEntry]]] = {}
    for e in entries:
        labels = e.labels
        key = (str(labels["cluster"]), True) if labels.get("cluster") else (UNLABELLED, False)
        placed = group_of(labels, GROUPINGS[grouping])
        members.setdefault(key, {}).setdefault(placed, []).append(e)
    # One group left (its link followed): its tiles, however many.
    collapse_healthy = collapse_healthy and sum(len(g) for g in members.values()) > 1
    clusters: list[Cluster] = []
    for (cluster_name, labelled), groups in members.items():
        states = [e.state for es in groups.values() for e in es]
        cluster = Cluster(name=cluster_name, counts=count_states(states), labelled=labelled)
        for (kind, name), es in groups.items():
            group = Group(
                cluster=cluster_name,
                kind=kind,
                name=name,
                counts=count_states([e.state for e in es]),
            )
            if collapse_healthy and kind != "none" and group.counts.worst == State.HEALTHY:
                if not problems_only:
                    cluster.collapsed_groups += 1
                    cluster.collapsed_nodes += group.counts.total
                continue
            shown = [e for e in es if not problems_only or e.state != State.HEALTHY]
            shown.sort(key=lambda e: (-SEVERITY[e.state], e.hostname))
            group.nodes = [e.made() for e in shown]
            if group.nodes or not problems_only:
                cluster.groups.append(group)
        cluster.groups.sort(key=lambda g: _severity_key(g.counts, g.name))
        if cluster.groups or cluster.collapsed_groups:
            clusters.append(cluster)
    clusters.sort(key=lambda c: _severity_key(c.counts, c.name))
    return clusters


def select_nodes(
    views: list[NodeView],
    health: dict[str, NodeHealthOut],
    *,
    state: str | None = None,
    model: str | None = None,
) -> list[NodeView]:
    """The views whose node is in health ``state`` and has a GPU named exactly ``model``
    (each None: no condition), in their order."""
    return [
        v
        for v in views
        if (state is None or health[v.node.hostname].state == state)
        and (model is None or any(g.gpu.name == model for g in v.gpus))
    ]


def filter_options(views: list[NodeView], keys: tuple[str, ...]) -> dict[str, list[str]]:
    """The choices of the filter form: sorted distinct values of each label in ``keys``, and
    under ``"model"`` the GPU models seen."""
    options: dict[str, set[str]] = {key: set() for key in (*keys, "model")}
    for v in views:
        labels = v.node.labels or {}
        for key in keys:
            if labels.get(key):
                options[key].add(str(labels[key]))
        options["model"].update(g.gpu.name for g in v.gpus if g.gpu.name)
    return {key: sorted(values) for key, values in options.items()}


def state_filter_options(
    nodes: list[Any], keys: tuple[str, ...], *, models: list[str]
) -> dict[str, list[str]]:
    """:func:`filter_options` from nodes with ``labels`` (dicts) and the fleet's GPU models."""
    options: dict[str, set[str]] = {key: set() for key in keys}
    for n in nodes:
        for key in keys:
            if n.labels.get(key):
                options[key].add(str(n.labels[key]))
    return {**{key: sorted(values) for key, values in options.items()}, "model": sorted(models)}
