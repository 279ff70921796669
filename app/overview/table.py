"""The overview's table view (the fleet list): its triage order and summary counts."""

from __future__ import annotations

from app.fleet.service import NodeView


def health_rank(view: NodeView) -> int:
    """0 for a node with a GPU not ok, 1 stale, 2 never seen, 3 healthy: the triage order."""
    if view.lost_gpu_count:
        return 0
    return {"stale": 1, "never_seen": 2}.get(view.freshness, 3)


def fleet_counts(views: list[NodeView]) -> dict[str, int]:
    """Totals for the summary tiles: nodes by freshness, GPUs and GPUs not ok."""
    return {
        "nodes": len(views),
        "fresh": sum(v.freshness == "fresh" for v in views),
        "stale": sum(v.freshness == "stale" for v in views),
        "never_seen": sum(v.freshness == "never_seen" for v in views),
        "gpus": sum(v.gpu_count for v in views),
        "gpus_not_ok": sum(v.lost_gpu_count for v in views),
    }
