"""A hung nvidia-smi (or a wrapper script around it) is killed whole on timeout."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agents.collectors.base import CollectorUnavailable
from agents.collectors.nvidia_smi import NvidiaSmiCollector


def _running(fragment: str) -> bool:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if fragment in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode():
                    return True
            except OSError:
                continue
    return False


def test_a_timed_out_wrapper_leaves_no_child_behind(tmp_path: Path) -> None:
    script = tmp_path / "nvidia-smi"
    script.write_text("#!/bin/sh\nsleep 41.25\n")
    script.chmod(0o755)
    started = time.monotonic()
    with pytest.raises(CollectorUnavailable, match=r"timed out after 0\.5 s"):
        NvidiaSmiCollector(nvidia_smi=str(script), timeout_s=0.5)
    assert time.monotonic() - started < 10
    time.sleep(0.2)
    assert not _running("sleep 41.25")
