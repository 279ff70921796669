"""The overview's table view (the fleet list): its rows, triage order and summary counts."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from types import SimpleNamespace
from typing import Any, Protocol

from app.health.current import NodeState


class ListedNode(Protocol):
    """What the table reads of a node (a :class:`~app.fleet.service.NodeView` or a
    :class:`StateRow`)."""

    @property
    def freshness(self) -> str: ...

    @property
    def gpu_count(self) -> int: ...

    @property
    def lost_gpu_count(self) -> int: ...


@dataclass(frozen=True)
class StateRow:
    """A table row from the stored state (:class:`~app.health.state.NodeState`), with the
    attributes the table template reads of a :class:`~app.fleet.service.NodeView`."""

    node: NodeState

    @property
    def freshness(self) -> str:
        """``fresh``, ``stale`` or ``never_seen``."""
        return self.node.freshness

    @property
    def gpu_count(self) -> int:
        """GPUs in the node's inventory at its last evaluation."""
        return int(self.node.summary.get("gpus") or 0)

    @property
    def lost_gpu_count(self) -> int:
        """GPUs whose state was not ``ok`` at the last evaluation."""
        return int(self.node.summary.get("not_ok") or 0)

    @property
    def mean_util_gpu_pct(self) -> float | None:
        """Mean latest ``util_gpu_pct`` over the GPUs reporting it."""
        value = self.node.summary.get("mean_util_gpu_pct")
        return None if value is None else float(value)

    @property
    def hottest(self) -> Any:
        """The hottest GPU as ``.gpu.index`` and ``.latest["temp_c"]``, or None."""
        hot = self.node.summary.get("hottest")
        if not hot:
            return None
        return SimpleNamespace(gpu=SimpleNamespace(index=hot[0]), latest={"temp_c": hot[1]})

    def age_s(self, now: datetime) -> float | None:
        """Seconds since the newest stored sample (agent's clock), or None."""
        if self.node.last_sample_at is None:
            return None
        return max(0.0, (now - self.node.last_sample_at).total_seconds())


def health_rank(view: ListedNode) -> int:
    """0 for a node with a GPU not ok, 1 stale, 2 never seen, 3 healthy: the triage order."""
    if view.lost_gpu_count:
        return 0
    return {"stale": 1, "never_seen": 2}.get(view.freshness, 3)


def fleet_counts(views: list[Any]) -> dict[str, int]:
    """Totals for the summary tiles: nodes by freshness, GPUs and GPUs not ok."""
    return {
        "nodes": len(views),
        "fresh": sum(v.freshness == "fresh" for v in views),
        "stale": sum(v.freshness == "stale" for v in views),
        "never_seen": sum(v.freshness == "never_seen" for v in views),
        "gpus": sum(v.gpu_count for v in views),
        "gpus_not_ok": sum(v.lost_gpu_count for v in views),
    }
