"""Health-overlay tiles kept per server process, by node: a tile is made again only when the
node's stored health answer (its digest), freshness or hostname changed, so a 1,000-node
overview builds the few tiles that changed instead of 8,000 cells. Consistent across processes:
the key is the stored answer in Postgres, not anything this process holds."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import cast

from app.fleet.models import Gpu, Node
from app.fleet.service import GpuView, NodeView
from app.health.current import NodeState
from app.health.schemas import NodeHealthOut
from app.overview.tiles import NodeTile, make_tile

Key = tuple[str, str, str]


def health_tile(node: NodeState, health: NodeHealthOut) -> NodeTile:
    """The node's tile under the health overlay, from its health alone: the GPUs are those of
    the answer (built from the node's inventory, in index order), as :func:`make_tile` makes
    them from a view."""
    gpus = [
        GpuView(gpu=cast(Gpu, SimpleNamespace(index=g.index, name=g.name)), latest_at=None)
        for g in health.gpus
    ]
    view = NodeView(
        node=cast(Node, SimpleNamespace(hostname=node.hostname)),
        freshness=node.freshness,
        gpus=gpus,
    )
    return make_tile("health", view, health)


class TileCache:
    """Tiles by node id with the key they were made for."""

    def __init__(self) -> None:
        self._tiles: dict[int, tuple[Key, NodeTile]] = {}
        self._lock = threading.Lock()

    def tile(self, node: NodeState, health: NodeHealthOut) -> NodeTile:
        """The node's health tile, made now unless cached for the same stored answer. A node
        whose answer was evaluated on this request (``digest`` None) is not cached."""
        if node.digest is None:
            return health_tile(node, health)
        key = (node.digest, node.freshness, node.hostname)
        with self._lock:
            hit = self._tiles.get(node.node_id)
        if hit is not None and hit[0] == key:
            return hit[1]
        made = health_tile(node, health)
        made.html  # noqa: B018 -- rendered once, here, not on every page
        with self._lock:
            self._tiles[node.node_id] = (key, made)
        return made


TILES = TileCache()
