"""The columns of a node's GPU rows that every batch moves (``last_seen_at``,
``last_sample_at`` and ``implausible``), written for all its GPUs in one statement.

Left to the ORM, a batch of an 8-GPU node flushed eight ``UPDATE gpu`` statements (an
``executemany``) after tracking every assignment: a fifth of the server's CPU for a 2-tick
batch, the agent's usual size (bench/ingest_rate.py ``--samples 2``). Here the values go out
in one ``UPDATE … FROM unnest(…)`` on Postgres (an ``executemany`` of one Core statement on
SQLite), and are set on the loaded ``Gpu`` objects as their committed values, so the session
holds what is stored and its flush has nothing more to write for them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import cast

from sqlalchemy import Table, bindparam, text, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from app.fleet.models import Gpu


@dataclass(frozen=True)
class Heartbeat:
    """What one batch moves on one GPU row.

    Attributes:
        gpu: the loaded (and flushed: it has its id) row.
        seen_at: the batch's ``received_at``, for a GPU the batch reported; ``None`` leaves
            ``last_seen_at`` as stored, and so does an older time (Postgres: ``GREATEST``;
            the caller passes only newer ones).
        sampled_at: the GPU's newest sample stored by the batch when newer than its
            ``last_sample_at``; ``None`` leaves ``last_sample_at`` and ``implausible`` as
            stored.
        implausible: with ``sampled_at``: metric name → ISO time of that sample, for the
            metrics nulled in it (``None`` where none was).
    """

    gpu: Gpu
    seen_at: datetime | None = None
    sampled_at: datetime | None = None
    implausible: dict[str, str] | None = None


_PG_UPDATE = text(
    """
    UPDATE gpu SET
        last_seen_at = GREATEST(gpu.last_seen_at, v.seen_at),
        last_sample_at = COALESCE(v.sampled_at, gpu.last_sample_at),
        implausible = CASE WHEN v.sampled_at IS NULL THEN gpu.implausible
                           ELSE CAST(v.implausible AS json) END
    FROM unnest(CAST(:ids AS integer[]), CAST(:seen AS timestamptz[]),
                CAST(:sampled AS timestamptz[]), CAST(:implausible AS text[]))
         AS v(id, seen_at, sampled_at, implausible)
    WHERE gpu.id = v.id
    """
)


def write(session: Session, beats: Sequence[Heartbeat]) -> None:
    """Store ``beats`` (at most one per GPU) and set them on their ``Gpu`` objects as
    committed values. Nothing is sent for beats that move nothing."""
    beats = [b for b in beats if b.seen_at is not None or b.sampled_at is not None]
    if not beats:
        return
    if session.get_bind().dialect.name == "postgresql":
        with session.no_autoflush:  # the node's row goes out once, at the batch's end
            session.execute(
                _PG_UPDATE,
                {
                    "ids": [b.gpu.id for b in beats],
                    "seen": [b.seen_at for b in beats],
                    "sampled": [b.sampled_at for b in beats],
                    # JSON text as the ORM writes it (None as JSON null: no none_as_null).
                    "implausible": [json.dumps(b.implausible) for b in beats],
                },
            )
    else:
        _write_each(session, beats)
    for beat in beats:
        if beat.seen_at is not None:
            set_committed_value(beat.gpu, "last_seen_at", beat.seen_at)
        if beat.sampled_at is not None:
            set_committed_value(beat.gpu, "last_sample_at", beat.sampled_at)
            set_committed_value(beat.gpu, "implausible", beat.implausible)


_GPUS = cast(Table, Gpu.__table__)
_SQLITE_UPDATE = update(_GPUS).where(_GPUS.c.id == bindparam("gpu_key"))


def _write_each(session: Session, beats: Sequence[Heartbeat]) -> None:
    """The SQLite path: one Core ``UPDATE`` per GPU (``executemany``)."""
    params = [
        {
            "gpu_key": b.gpu.id,
            "last_seen_at": b.seen_at if b.seen_at is not None else b.gpu.last_seen_at,
            "last_sample_at": b.sampled_at if b.sampled_at is not None else b.gpu.last_sample_at,
            "implausible": b.implausible if b.sampled_at is not None else b.gpu.implausible,
        }
        for b in beats
    ]
    session.connection().execute(_SQLITE_UPDATE, params)
