"""Shared trees for the host-source tests: the H100 InfiniBand sysfs listing is materialised
once per session for the tests that only read it (writing its 486 files takes a while)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.agents.host.fakefs import materialise_grep_listing, proc_fixture

IB_LISTING = "sys-class-infiniband-h100-9hca-grep-listing.txt"


@pytest.fixture(scope="session")
def shared_ib_sysfs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A read-only fake sysfs of the 9-HCA H100 node; tests that change files make their own."""
    return materialise_grep_listing(proc_fixture(IB_LISTING), tmp_path_factory.mktemp("ib"))


@pytest.fixture
def ib_sysfs(tmp_path: Path) -> Path:
    """A fake sysfs holding the H100 node's first HCA, ``mlx5_0``, that the test may change."""
    lines = [line for line in proc_fixture(IB_LISTING).splitlines() if "/mlx5_0/" in line]
    return materialise_grep_listing("\n".join(lines), tmp_path)
