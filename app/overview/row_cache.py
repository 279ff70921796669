"""Node table rows kept per server process: the start of a row (hostname and service mark,
health, labels, freshness, GPUs, utilization, hottest GPU) is rendered again only when what it
shows changed — the node's stored answer, freshness, labels, summary, service mark, or the
page's filters (its label links) —
so a 1,000-row table renders the rows that changed plus two cells per row. The key is made of
stored data, so several processes show the same rows."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from markupsafe import Markup

from app.health.schemas import NodeHealthOut
from app.overview.filters import OverviewFilters
from app.overview.service_marks import ServiceMark
from app.overview.table import StateRow
from app.web import templates

Key = tuple[Any, ...]


class RowCache:
    """Row starts by node id with the key they were rendered for."""

    def __init__(self) -> None:
        self._rows: dict[int, tuple[Key, Markup]] = {}
        self._lock = threading.Lock()

    def head(
        self,
        row: StateRow,
        health: NodeHealthOut,
        filters: OverviewFilters,
        labels: tuple[str, ...],
        mark: ServiceMark | None = None,
    ) -> Markup:
        """The row's start (``fleet/_node_row.html``'s ``head``; ``mark`` the node's service
        mark), cached unless its answer was evaluated on this request (``digest`` None)."""
        node = row.node
        key = (
            node.digest,
            node.freshness,
            node.hostname,
            node.labels_json,
            node.summary_json,
            filters.query(page=None),  # the row's links, which leave the page
            labels,
            mark,
        )
        with self._lock:
            hit = self._rows.get(node.node_id)
        if hit is not None and hit[0] == key and node.digest is not None:
            return hit[1]
        made = Markup(_macro()(row, health, filters, labels, mark))
        if node.digest is not None:
            with self._lock:
                self._rows[node.node_id] = (key, made)
        return made

    def bound(
        self,
        filters: OverviewFilters,
        labels: tuple[str, ...],
        marks: dict[str, ServiceMark] | None = None,
    ) -> Callable[[StateRow, NodeHealthOut], Markup]:
        """``head`` for one page's filters, label columns and service marks (by hostname): the
        template's ``row_head``."""
        marks = marks or {}
        return lambda row, health: self.head(
            row, health, filters, labels, marks.get(row.node.hostname)
        )


def _macro() -> Any:
    return templates.env.get_template("fleet/_node_row.html").module.head  # type: ignore[attr-defined]


ROWS = RowCache()
