"""Events marked on the node-page charts: Xid errors, lost GPUs, throttling, topology changes and
the viewer's DST changes, as vertical lines with hover text.

:func:`list_chart_marks` reads the node's events (``node_event``, as the agent reported them) and
topology changes (``topology_change``) in the chart range; :func:`dst_marks` adds the moments the
viewer's zone changes its UTC offset. :func:`mark_shapes` and :func:`mark_trace` turn them into
Plotly layout shapes and one hoverable marker trace; both are pure.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.events.models import NodeEvent
from app.timebounds import offset_segments
from app.topology.models import TopologyChange
from app.viewer_time import fmt_local, offset_text

MAX_MARKS = 200  # per chart; the newest are kept, a busy node would otherwise hide its lines


@dataclass(frozen=True)
class MarkStyle:
    """How a kind of mark is drawn: colour, dash, and a marker symbol (state by shape too)."""

    label: str
    color: str
    dash: str
    symbol: str


STYLES: dict[str, MarkStyle] = {
    "xid": MarkStyle("Xid", "#d62728", "solid", "x"),
    "gpu_lost": MarkStyle("GPU lost", "#d62728", "dash", "diamond"),
    "throttling": MarkStyle("Throttling", "#e6a700", "dot", "triangle-down"),
    "topology": MarkStyle("Topology change", "#1f77b4", "dashdot", "square"),
    "dst": MarkStyle("UTC offset change", "#7f7f7f", "longdash", "circle-open"),
    "other": MarkStyle("Event", "#9467bd", "dot", "circle"),
}
LOST_KINDS = frozenset({"gpu_lost", "gpu_fallen_off_bus", "fallen_off_bus"})


@dataclass(frozen=True)
class ChartMark:
    """One marked moment: ``at`` (UTC), ``style`` (a key of :data:`STYLES`) and ``text``, the
    hover line without the time."""

    at: datetime
    style: str
    text: str


def event_style(kind: str) -> str:
    """The :data:`STYLES` key of a ``node_event.kind``: ``xid``, ``gpu_lost`` (and fallen off
    the bus), ``throttling`` (any kind naming throttle, slowdown or clock event reasons)."""
    name = kind.lower()
    if name == "xid":
        return "xid"
    if name in LOST_KINDS or "lost" in name:
        return "gpu_lost"
    if any(word in name for word in ("throttl", "slowdown", "clock")):
        return "throttling"
    return "other"


def event_mark(event: NodeEvent, gpu_index_by_id: dict[int, int]) -> ChartMark:
    """A ``node_event`` row as a mark: ``Xid 79 · GPU 3: GPU has fallen off the bus``."""
    style = event_style(event.kind)
    head = f"Xid {event.xid}" if event.xid is not None else STYLES[style].label
    if style == "other":
        head = event.kind
    if event.gpu_id in gpu_index_by_id:
        head += f" · GPU {gpu_index_by_id[event.gpu_id]}"
    elif event.pci_bus_id:
        head += f" · {event.pci_bus_id}"
    message = (event.message or "").strip()
    return ChartMark(event.occurred_at, style, f"{head}: {message[:160]}" if message else head)


def dst_marks(start: datetime, end: datetime, zone: tzinfo) -> list[ChartMark]:
    """The moments in ``(start, end]`` when ``zone`` changes its UTC offset, as marks reading
    ``UTC offset change: UTC+01:00 → UTC+02:00``."""
    segments = offset_segments(start, end, zone)
    return [
        ChartMark(
            at,
            "dst",
            f"UTC offset change: {offset_text(at, _fixed(before))} → {offset_text(at, zone)}",
        )
        for (_, before), (at, _) in itertools.pairwise(segments)
    ]


def _fixed(offset_s: int) -> tzinfo:
    return timezone(timedelta(seconds=offset_s))


def list_chart_marks(
    session: Session,
    *,
    node_id: int,
    start: datetime,
    end: datetime,
    gpu_index_by_id: dict[int, int],
    zone: tzinfo = UTC,
) -> list[ChartMark]:
    """The node's events and topology changes in ``[start, end]`` plus the DST changes of
    ``zone``, oldest first (at most :data:`MAX_MARKS` events, the newest)."""
    events = session.scalars(
        select(NodeEvent)
        .where(
            NodeEvent.node_id == node_id,
            NodeEvent.occurred_at >= start,
            NodeEvent.occurred_at <= end,
        )
        .order_by(NodeEvent.occurred_at.desc(), NodeEvent.id.desc())
        .limit(MAX_MARKS)
    )
    marks = [event_mark(e, gpu_index_by_id) for e in events]
    changes = session.scalars(
        select(TopologyChange)
        .where(
            TopologyChange.node_id == node_id,
            TopologyChange.collected_at >= start,
            TopologyChange.collected_at <= end,
        )
        .order_by(TopologyChange.collected_at.desc())
        .limit(MAX_MARKS)
    )
    marks += [
        ChartMark(c.collected_at, "topology", "Topology change (nvidia-smi topo -m)")
        for c in changes
    ]
    marks += dst_marks(start, end, zone)
    return sorted(marks, key=lambda m: m.at)


def mark_shapes(
    marks: Iterable[ChartMark], to_x: Callable[[datetime], str]
) -> list[dict[str, Any]]:
    """One vertical line per mark across the plot (``yref: paper``), x from ``to_x`` (the
    chart's time writer, so lines sit in the viewer's zone)."""
    return [
        {
            "type": "line",
            "xref": "x",
            "yref": "paper",
            "x0": to_x(m.at),
            "x1": to_x(m.at),
            "y0": 0,
            "y1": 1,
            "line": {"color": STYLES[m.style].color, "width": 1, "dash": STYLES[m.style].dash},
            "layer": "below",
        }
        for m in marks
    ]


def mark_trace(
    marks: list[ChartMark], to_x: Callable[[datetime], str], zone: tzinfo
) -> dict[str, Any]:
    """The hoverable part of the marks: a marker at the top of each line (on a hidden 0–1
    axis ``y2``), hover text ``<time in zone> · <text>``; one legend entry, ``Events``."""
    return {
        "type": "scatter",
        "mode": "markers",
        "uid": "events",
        "name": "Events",
        "x": [to_x(m.at) for m in marks],
        "y": [1.0] * len(marks),
        "yaxis": "y2",
        "text": [f"{fmt_local(m.at, zone)} · {m.text}" for m in marks],
        "hovertemplate": "%{text}<extra></extra>",
        "marker": {
            "size": 9,
            "color": [STYLES[m.style].color for m in marks],
            "symbol": [STYLES[m.style].symbol for m in marks],
        },
        "cliponaxis": False,
    }
