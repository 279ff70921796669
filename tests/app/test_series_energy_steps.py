"""GPU blocks keep ``energy_j`` as whole-millijoule steps where that is exact
(:data:`app.series.blocks.GPU_STEPPED`): the values read back are the doubles stored, through
raw reads, charts, a re-opened block and the downgrade of revision 0016; a block with any value
that is not a whole millijoule, a missing one or a negative zero keeps its doubles."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from alembic import command
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.db import make_engine, make_session_factory, session_scope
from app.fleet.models import Gpu, Node
from app.metrics import service as metrics_service
from app.migrate import alembic_config
from app.series.blocks import gpu_sample_block
from app.series.compact import compact
from app.series.read import rows_between
from app.series.rollups.jobs import set_mark
from app.series.rollups.specs import GPU
from app.series.tables import gpu_sample
from tests.app.series_helpers import store_factory
from tests.dbs import postgres_database

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
NOW = T0 + timedelta(hours=4)
STEP_S = 10


@pytest.fixture
def factory(postgres_url: str) -> Iterator[sessionmaker[Session]]:
    with store_factory(postgres_url) as made:
        yield made


def millijoules(k: int, gpu: int) -> int:
    """An energy counter in mJ: ~600 W with jitter, reset to near 0 (a driver reload) at the
    second hour of GPU 0; GPU 1 starts at 10**13 mJ (190 days at 600 W)."""
    base = 10**13 + 1 if gpu == 1 else 379_578_661_560
    if gpu == 0 and k >= 360:
        return 7_000 + (k - 360) * 6_001_337 + (k * 7919) % 1000
    return base + k * 6_013_263 + (k * 104_729) % 997


def seed(session: Session, energies: dict[int, list[float | None]]) -> Node:
    """One node; GPU ``i`` gets ``energies[i]`` every 10 s from T0 (and a power reading)."""
    node = Node(hostname="steps-a", labels={}, created_at=T0)
    session.add(node)
    session.flush()
    rows = []
    for index, values in energies.items():
        gpu = Gpu(
            node_id=node.id, uuid=f"GPU-s{index}", index=index, first_seen_at=T0, last_seen_at=T0
        )
        session.add(gpu)
        session.flush()
        for k, energy in enumerate(values):
            at = T0 + timedelta(seconds=k * STEP_S)
            rows.append(
                {
                    "gpu_id": gpu.id,
                    "sampled_at": at,
                    "received_at": at,
                    "energy_j": energy,
                    "power_w": 600.25,
                }
            )
        gpu.last_sample_at = rows[-1]["sampled_at"]
    session.execute(gpu_sample.insert(), rows)
    set_mark(session, GPU.arrival_key, NOW)
    session.refresh(node)
    assert len(node.gpus) == len(energies)  # loaded while the session is open
    return node


def energy_rows(session: Session) -> list[tuple[Any, ...]]:
    rows = rows_between(
        "gpu_sample", columns=["energy_j", "power_w"], start=None, end=None, dialect="postgresql"
    )
    stmt = select(rows.c.gpu_id, rows.c.sampled_at, rows.c.energy_j, rows.c.power_w)
    return sorted(tuple(r) for r in session.execute(stmt))


def block_forms(session: Session) -> dict[tuple[int, datetime], str]:
    """(gpu_id, block_start) → ``steps`` or ``doubles``: the form each block was stored in."""
    b = gpu_sample_block.c
    forms = {}
    for gpu_id, start, doubles, steps in session.execute(
        select(b.gpu_id, b.block_start, b.energy_j, b.energy_j_steps)
    ):
        assert (doubles is None) != (steps is None)
        forms[(gpu_id, start)] = "steps" if steps is not None else "doubles"
    return forms


def test_whole_millijoules_pack_as_steps_and_read_back_as_the_same_doubles(
    factory: sessionmaker[Session],
) -> None:
    per_gpu = 4 * 3600 // STEP_S
    energies = {g: [millijoules(k, g) / 1000 for k in range(per_gpu)] for g in (0, 1)}
    with session_scope(factory) as s:
        node = seed(s, energies)
        before = energy_rows(s)
        chart = metrics_service.node_series_from(
            s, node=node, metrics=["energy_j"], start=T0, end=NOW, step_s=0
        )
    compact(factory, compact_after_s=2 * 3600, now=NOW)
    with session_scope(factory) as s:
        forms = block_forms(s)
        assert len(forms) == 4 and set(forms.values()) == {"steps"}
        steps = s.scalar(
            select(gpu_sample_block.c.energy_j_steps).where(
                gpu_sample_block.c.block_start == T0 + timedelta(hours=1),
                gpu_sample_block.c.gpu_id == node.gpus[0].id,
            )
        )
        assert steps[0] == 7_000 + 360 * 7919 % 1000  # after the reset: from 0, not negative
        after = energy_rows(s)
        assert after == before  # every double exactly, the reset included
        assert [r[2] for r in after if r[0] == node.gpus[0].id][:2] == energies[0][:2]
        again = metrics_service.node_series_from(
            s,
            node=s.get(Node, node.id),
            metrics=["energy_j"],
            start=T0,
            end=NOW,
            step_s=0,
            source_s=0,
        )
        assert [(g.times, g.values) for g in again] == [(g.times, g.values) for g in chart]


def test_a_block_with_a_finer_value_or_a_gap_keeps_its_doubles(
    factory: sessionmaker[Session],
) -> None:
    per_gpu = 3 * 3600 // STEP_S
    finer: list[float | None] = [millijoules(k, 0) / 1000 for k in range(per_gpu)]
    finer[5] = 0.1 + 0.2  # 0.30000000000000004 J: not a whole millijoule as a double
    gap = list(finer)
    gap[5] = millijoules(5, 0) / 1000
    gap[400] = None  # second hour: energy not read once
    finer[800] = -0.0  # third hour: equal to 0.0, yet a steps block would give back +0.0
    with session_scope(factory) as s:
        node = seed(s, {0: finer, 1: gap})
        before = energy_rows(s)
    compact(factory, compact_after_s=3600, now=NOW)
    ids = {g.index: g.id for g in node.gpus}
    with session_scope(factory) as s:
        forms = block_forms(s)
        assert forms == {
            (ids[0], T0): "doubles",
            (ids[0], T0 + timedelta(hours=1)): "steps",
            (ids[1], T0): "steps",
            (ids[1], T0 + timedelta(hours=1)): "doubles",
            (ids[0], T0 + timedelta(hours=2)): "doubles",
            (ids[1], T0 + timedelta(hours=2)): "steps",
        }
        after = energy_rows(s)
        assert after == before
        assert any(r[2] == 0.1 + 0.2 for r in after)
        assert any(r[2] is None and r[0] == ids[1] for r in after)
        [zero] = [r[2] for r in after if r[0] == ids[0] and r[1] == T0 + timedelta(seconds=8000)]
        assert zero == 0 and math.copysign(1.0, zero) == -1.0


def test_a_late_sample_re_opens_a_stepped_block_with_its_exact_values(
    factory: sessionmaker[Session],
) -> None:
    per_gpu = 3 * 3600 // STEP_S
    with session_scope(factory) as s:
        node = seed(s, {0: [millijoules(k, 0) / 1000 for k in range(per_gpu)]})
    compact(factory, compact_after_s=3600, now=NOW)
    gpu_id = node.gpus[0].id
    late = T0 + timedelta(seconds=15)
    with session_scope(factory) as s:
        before = energy_rows(s)
        s.execute(
            gpu_sample.insert(),
            [
                {
                    "gpu_id": gpu_id,
                    "sampled_at": late,
                    "received_at": NOW,
                    "energy_j": 379_578_700.125,
                }
            ],
        )
        set_mark(s, GPU.arrival_key, NOW)
    result = compact(factory, compact_after_s=3600, now=NOW)
    assert result.blocks_reopened["gpu_sample"] == 1
    with session_scope(factory) as s:
        assert block_forms(s)[(gpu_id, T0)] == "steps"
        after = energy_rows(s)
        assert after == sorted([*before, (gpu_id, late, 379_578_700.125, None)])


def test_downgrading_0016_turns_steps_back_into_doubles() -> None:
    with postgres_database() as url:
        engine = make_engine(url)
        try:
            made = make_session_factory(engine)
            values = [millijoules(k, 0) / 1000 for k in range(2 * 3600 // STEP_S)]
            with session_scope(made) as s:
                seed(s, {0: values})
            compact(made, compact_after_s=3600, now=NOW)
            with session_scope(made) as s:
                assert set(block_forms(s).values()) == {"steps"}
        finally:
            engine.dispose()
        command.downgrade(alembic_config(url), "0015")
        engine = make_engine(url)
        try:
            with engine.connect() as conn:
                stored = (
                    conn.exec_driver_sql(
                        "SELECT energy_j FROM gpu_sample_block ORDER BY block_start"
                    )
                    .scalars()
                    .first()
                )
        finally:
            engine.dispose()
        assert stored == values[:360]
