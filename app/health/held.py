"""``since`` of the reasons read off a node's newest values, held from its stored answer.

Three checks see a condition only in the newest reading — remapped rows pending, a PCIe link
below its maximum (the GPU's newest sample) and an NVLink down (each link's newest reading) —
so the time they can give is that reading's, which moves with every batch: "since 4 s ago",
forever, and a stored answer (:mod:`app.health.state`) that changes with every batch (a new
version for the whole fleet's refresh, the overview's ``204 No Content`` defeated).

The reason was there when the node was last evaluated if its stored answer has it for the same
GPU (by UUID: a replaced card or a renumbered GPU does not inherit it) with the same text (the
same links down, the same PCIe gen and width): its ``since`` is the earlier of the two — unless
a reading after that time shows the condition clear (a batch can carry a clear sample and a
newer one showing it again, and the evaluation sees only the newest): then it starts again
from the newest reading. Readings are looked for among the raw rows, which
cover far more than the time between two evaluations (a minute at most).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from functools import partial
from typing import Any

import orjson
from sqlalchemy import ColumnElement, and_, not_, or_, select
from sqlalchemy.orm import Session

from app.fleet.service import NodeView
from app.health.evidence import Evidence
from app.health.models import NodeHealthState
from app.health.schemas import NodeHealthOut, ReasonOut
from app.series import gpu_history

#: Reason codes whose ``since`` is the time of the newest reading that shows them.
HELD_CODES = frozenset({"remapped_rows_pending", "pcie_downtrained", "nvlink_down"})

Key = tuple[str, str]
#: (GPU id, code, reason, the stored since it would take)
Candidate = tuple[int, str, ReasonOut, datetime]


def _clear_in_sample(code: str, s: Any) -> ColumnElement[bool]:
    """A GPU sample (``s``: its columns) that shows ``code`` cleared: the value read and not
    the condition of :func:`app.health.checks.latest_values` (a sample without the value tells
    nothing)."""
    if code == "remapped_rows_pending":
        return s.remapped_rows_pending == 0
    pairs = (("pcie_link_gen", "pcie_link_gen_max"), ("pcie_link_width", "pcie_link_width_max"))
    known = [and_(s[cur].is_not(None), s[top].is_not(None)) for cur, top in pairs]
    low = [and_(k, s[cur] < s[top]) for k, (cur, top) in zip(known, pairs, strict=True)]
    return and_(or_(*known), not_(or_(*low)))


def hold_since(
    session: Session, answers: Iterable[tuple[NodeView, NodeHealthOut]], evidence: Evidence
) -> None:
    """In place: each reason of :data:`HELD_CODES` in ``answers`` ((view, fresh answer) pairs,
    evaluated from ``evidence``) takes the ``since`` of the same reason of the same GPU in the
    node's stored answer when that is earlier and no reading since shows the condition clear.
    A few statements, only for nodes with such a reason (none in a healthy fleet)."""
    holding = {
        view.node.id: (view, answer)
        for view, answer in answers
        if any(r.code in HELD_CODES for r in answer.reasons)
    }
    if not holding:
        return
    stored = NodeHealthState.__table__.c
    rows = session.execute(
        select(stored.node_id, stored.doc).where(stored.node_id.in_(sorted(holding)))
    )
    candidates: list[Candidate] = []
    for node_id, doc in rows:
        view, answer = holding[node_id]
        earlier = _held(doc)
        ids = {g.gpu.uuid: g.gpu.id for g in view.gpus}
        for gh in answer.gpus:
            for reason in gh.reasons:
                since, text = earlier.get((gh.uuid, reason.code), (None, None))
                # Another text is another condition (other links down, another PCIe gen):
                # it starts from its own reading.
                same = text == reason.text
                earliest = since is not None and (reason.since is None or since < reason.since)
                if gh.uuid in ids and since is not None and same and earliest:
                    candidates.append((ids[gh.uuid], reason.code, reason, since))
    cleared = _cleared_since(session, candidates, evidence)
    for gpu_id, code, reason, since in candidates:
        if (gpu_id, code) not in cleared:
            reason.since = since


def _cleared_since(
    session: Session, candidates: list[Candidate], evidence: Evidence
) -> set[tuple[int, str]]:
    """The (GPU id, code) of ``candidates`` with a raw reading after their stored ``since``
    that shows the condition clear: a GPU sample for the sample codes, an ``up`` reading of one
    of the links now down for ``nvlink_down`` (``unknown`` tells nothing). One statement per
    code present."""
    cleared: set[tuple[int, str]] = set()
    for code in sorted({c[1] for c in candidates}):
        mine = [c for c in candidates if c[1] == code]
        if code == "nvlink_down":
            down = {
                gpu_id: ([d.link for d in evidence.links_down[gpu_id]], since)
                for gpu_id, *_, since in mine
            }
            shown = gpu_history.links_up_after(session, down)
        else:
            shown = gpu_history.shown_after(
                session,
                {gpu_id: since for gpu_id, *_, since in mine},
                partial(_clear_in_sample, code),
            )
        cleared |= {(gpu_id, code) for gpu_id in shown}
    return cleared


def _held(doc: str | bytes) -> dict[Key, tuple[datetime, str]]:
    """(GPU UUID, code) → (``since``, text) of the held reasons of a stored answer's GPUs."""
    held: dict[Key, tuple[datetime, str]] = {}
    for gh in orjson.loads(doc).get("gpus", ()):
        for reason in gh.get("reasons", ()):
            since = reason.get("since")
            if reason.get("code") in HELD_CODES and since:
                key = (gh.get("uuid"), reason["code"])
                held[key] = (datetime.fromisoformat(since), str(reason.get("text")))
    return held
