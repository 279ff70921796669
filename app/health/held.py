"""``since`` of the reasons read off a node's newest values, held from its stored answer.

Three checks see a condition only in the newest reading — remapped rows pending, a PCIe link
below its maximum (the GPU's newest sample) and an NVLink down (each link's newest reading) —
so the time they can give is that reading's, which moves with every batch: "since 4 s ago",
forever, and a stored answer (:mod:`app.health.state`) that changes with every batch (a new
version for the whole fleet's refresh, the overview's ``204 No Content`` defeated). The reason
was there when the node was last evaluated if its stored answer has it: its ``since`` is the
earlier of the two. A reason that cleared between two evaluations starts again from its reading.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

import orjson
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.health.models import NodeHealthState
from app.health.schemas import NodeHealthOut

#: Reason codes whose ``since`` is the time of the newest reading that shows them.
HELD_CODES = frozenset({"remapped_rows_pending", "pcie_downtrained", "nvlink_down"})

Key = tuple[int | None, str]


def hold_since(session: Session, answers: Iterable[tuple[int, NodeHealthOut]]) -> None:
    """In place: each reason of :data:`HELD_CODES` in ``answers`` ((node id, fresh answer)
    pairs) takes the ``since`` of the same reason (code and GPU index) in the node's stored
    answer when that is earlier. One statement, only for nodes with such a reason (none in a
    healthy fleet)."""
    holding = {
        node_id: answer
        for node_id, answer in answers
        if any(r.code in HELD_CODES for r in answer.reasons)
    }
    if not holding:
        return
    stored = NodeHealthState.__table__.c
    rows = session.execute(
        select(stored.node_id, stored.doc).where(stored.node_id.in_(sorted(holding)))
    )
    for node_id, doc in rows:
        earlier = _held(doc)
        for reason in holding[node_id].reasons:
            since = earlier.get((reason.gpu_index, reason.code))
            if since is not None and (reason.since is None or since < reason.since):
                reason.since = since


def _held(doc: str | bytes) -> dict[Key, datetime]:
    """(GPU index, code) → ``since`` of the held reasons of a stored answer."""
    held: dict[Key, datetime] = {}
    for reason in orjson.loads(doc).get("reasons", ()):
        since = reason.get("since")
        if reason.get("code") in HELD_CODES and since:
            held[(reason.get("gpu_index"), reason["code"])] = datetime.fromisoformat(since)
    return held
