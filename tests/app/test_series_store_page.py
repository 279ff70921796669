"""``/admin/store`` lists every sample table by tier on Postgres, with figures that match the
database, and says why there is nothing to list on SQLite."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import httpx

from app.db import make_engine, make_session_factory, session_scope
from app.fleet.models import Gpu, Node
from app.series.compact import compact
from app.series.rollups.jobs import set_mark
from app.series.rollups.specs import GPU
from app.series.tables import gpu_sample
from tests.live_server import LiveServer

T0 = datetime(2026, 11, 30, 8, tzinfo=UTC)


def seed_and_compact(url: str) -> None:
    """Two hours of one GPU at 10 s, the first hour packed into a block."""
    engine = make_engine(url)
    try:
        factory = make_session_factory(engine)
        with session_scope(factory) as s:
            node = Node(hostname="store-a", labels={}, created_at=T0)
            s.add(node)
            s.flush()
            gpu = Gpu(node_id=node.id, uuid="GPU-s0", index=0, first_seen_at=T0, last_seen_at=T0)
            s.add(gpu)
            s.flush()
            rows = [
                {
                    "gpu_id": gpu.id,
                    "sampled_at": T0 + timedelta(seconds=10 * k),
                    "received_at": T0,
                    "util_gpu_pct": float(k % 100),
                }
                for k in range(720)
            ]
            s.execute(gpu_sample.insert(), rows)
            gpu.last_sample_at = rows[-1]["sampled_at"]
            set_mark(s, GPU.arrival_key, T0 + timedelta(days=1))
        compact(factory, compact_after_s=3600, now=T0 + timedelta(hours=2))
    finally:
        engine.dispose()


def row_of(html: str, table: str) -> list[str]:
    """The cells of ``table``'s row, tags stripped."""
    match = re.search(rf"<code>{table}</code>.*?</tr>", html, re.S)
    assert match, table
    cells = re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", "<th>" + match.group(0), re.S)
    return [re.sub(r"<[^>]+>", "", c).strip() for c in cells]


def test_the_store_page_shows_each_tier_with_its_samples(server: LiveServer, db_url: str) -> None:
    postgres = db_url.startswith("postgresql")
    if postgres:
        seed_and_compact(db_url)
    page = httpx.get(f"{server.url}/admin/store", timeout=30)
    assert page.status_code == 200
    assert 'href="/admin/store"' in page.text  # linked from every page's footer
    if not postgres:
        assert "SQLite" in page.text and "<table" not in page.text
        return
    block = row_of(page.text, "gpu_sample_block")
    assert block[1:2] == ["hour/6-h blocks"]  # 10-s samples: an hour block
    assert block[4] == "360"  # samples in the one block (08:00-09:00 at 10 s)
    assert float(block[5]) > 0  # bytes per value
    raw = row_of(page.text, "gpu_sample")
    assert raw[1] == "raw"
    for table, tier in [
        ("gpu_sample_1m", "1 min"),
        ("nic_port_sample_1h", "1 h"),
        ("nic_port_sample_latest", "current"),
    ]:
        assert row_of(page.text, table)[1] == tier
