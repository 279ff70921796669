"""Fault: a node name with non-ASCII characters (bench/faults/non_ascii_node.py): refused with
the expected form (punycode) by ``fleetwatch token create``, the agent's ``--hostname`` and the
ingest API, a 404 where looked up (API, page, ``fleetwatch health``); its punycode form with
non-ASCII label values kept exactly through ingest, API, pages, ``/metrics`` and the CLI."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.faults.non_ascii_node import run_checks
from tests.dbs import wipe
from tests.live_server import free_port
from tests.server_process import ServerProcess


@pytest.fixture
def pg_url(postgres_url: str) -> Iterator[str]:
    yield postgres_url
    wipe(postgres_url)


def test_a_non_ascii_node_name_is_refused_clearly_and_its_punycode_works(
    pg_url: str, tmp_path: Path
) -> None:
    server = ServerProcess(pg_url, free_port(), tmp_path / "server.log")
    server.start()
    try:
        checks = run_checks(pg_url, server.url)
    finally:
        server.stop()
    bad = [(c.what, c.got) for c in checks if not c.ok]
    assert bad == []
    assert len(checks) == 15
