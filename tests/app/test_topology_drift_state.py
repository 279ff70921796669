"""Drift computed in the background and stored (``topology_drift_state``), on both backends:
the API and the page serve the stored answer (equal to computing it), a new topology makes it
due again, and a stored answer older than the stale limit is not served."""

from __future__ import annotations

from datetime import timedelta

import httpx

from app.db import make_engine, make_session_factory, session_scope, utcnow
from app.topology import drift_state
from tests.app.test_topology_drift_pages import EXPECTED, POD, ingest, seed
from tests.app.topology_drift_data import node_payload, set_link
from tests.live_server import LiveServer


def _refresh(server: LiveServer, *, max_age_s: float = 60.0, later_s: float = 0.0) -> bool:
    engine = make_engine(server.settings.effective_database_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            now = utcnow() + timedelta(seconds=later_s)
            return drift_state.refresh(session, now=now, max_age_s=max_age_s)
    finally:
        engine.dispose()


def _findings(server: LiveServer) -> list[dict[str, object]]:
    response = httpx.get(f"{server.url}/api/v1/topology/drift", timeout=30)
    assert response.status_code == 200
    return list(response.json()["findings"])


def _stored_at(server: LiveServer) -> object:
    engine = make_engine(server.settings.effective_database_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            found = drift_state.stored(session)
            return None if found is None else found.at
    finally:
        engine.dispose()


def test_stored_drift_is_served_and_recomputed_when_a_topology_changes(
    server: LiveServer,
) -> None:
    seed(server)
    assert _refresh(server) is True
    generated = httpx.get(f"{server.url}/api/v1/topology/drift", timeout=30).json()
    assert generated["findings"] == EXPECTED
    stored_at = _stored_at(server)
    assert generated["generated_at"].startswith(str(stored_at)[:19].replace(" ", "T"))
    assert _refresh(server) is False  # nothing new: not recomputed

    # dgx-02's GPU0↔GPU1 link degrades: a new topology, so the drift is due again.
    def degrade(topology: dict[str, object]) -> None:
        set_link(topology, "GPU0", "GPU1", "NV6")

    ingest(server, node_payload("dgx-02", labels=POD, alter=degrade))
    assert _refresh(server) is True
    hosts = {f["hostname"] for f in _findings(server) if f["kind"] == "nvlink_fewer"}
    assert hosts == {"dgx-02", "dgx-05"}
    page = httpx.get(f"{server.url}/topology", timeout=30)
    assert page.status_code == 200 and "dgx-02" in page.text

    # Repaired: dgx-02 sends its first topology again (a change back to a document it had, no
    # new snapshot): due again, and its finding is gone.
    ingest(server, node_payload("dgx-02", labels=POD))
    assert _refresh(server) is True
    hosts = {f["hostname"] for f in _findings(server) if f["kind"] == "nvlink_fewer"}
    assert hosts == {"dgx-05"}


def test_an_old_stored_drift_is_recomputed_and_a_stale_one_not_served(
    server: LiveServer,
) -> None:
    seed(server)
    assert _refresh(server) is True
    assert _refresh(server, max_age_s=60, later_s=61) is True  # readings move: due by age
    # A stored answer older than the stale limit (a stopped job) is not what the API serves.
    engine = make_engine(server.settings.effective_database_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            stored = drift_state.stored(session)
            assert stored is not None
            old = stored.at + timedelta(seconds=server.settings.drift_stale_after_s + 1)
            served = drift_state.current_drift(
                session, now=old, stale_after_s=server.settings.drift_stale_after_s
            )
            assert served.at == old  # computed on read, not the stored one
    finally:
        engine.dispose()
