"""Access to the real captured outputs in ``../shared/fixtures`` (read in place, never copied).

Where that folder is absent (a clone outside this workplace) tests that need it skip with a
message saying why; under ``CI=true`` its absence is a failure.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent.parent / "shared" / "fixtures"


def fixture_path(relative: str) -> Path:
    """The path of ``../shared/fixtures/<relative>``; skips (or fails under CI) when absent.

    Raises:
        pytest.skip.Exception / pytest.fail.Exception: the fixtures folder or file is missing.
    """
    if not FIXTURES.is_dir():
        message = f"real GPU captures not found at {FIXTURES} (../shared is absent in this clone)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    path = FIXTURES / relative
    if not path.is_file():
        pytest.fail(f"fixture {relative} is missing from {FIXTURES}")
    return path


def fixture_names(folder: str, suffix: str = "") -> list[str]:
    """Names of the files in ``fixtures/<folder>`` (for parametrize; empty when absent)."""
    directory = FIXTURES / folder
    if not directory.is_dir():
        return []
    return sorted(p.name for p in directory.iterdir() if p.is_file() and p.name.endswith(suffix))
