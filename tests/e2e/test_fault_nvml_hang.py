"""Fault: an NVML call that does not return on one GPU of eight (bench/faults/nvml_hang.py,
short): the other GPUs keep reporting, the hung one is marked unresponsive with the call named
and its alert goes pending; once the call returns the GPU is healthy again."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.faults.nvml_hang import CAPTURE, run
from tests.dbs import wipe
from tests.notify_helpers import wipe_notify
from tests.shared_fixtures import fixture_path


@pytest.fixture
def pg_url(postgres_url: str) -> Iterator[str]:
    yield postgres_url
    wipe_notify(postgres_url)
    wipe(postgres_url)


def test_a_hung_nvml_call_marks_its_gpu_and_spares_the_others(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    capture = fixture_path(f"nvidia-smi-xml/{CAPTURE}")
    monkeypatch.setitem(sys.modules, "pynvml", sys.modules.get("pynvml"))  # restored after
    result = run(pg_url, tmp_path, capture, hang_s=10.0)

    assert result.others_reporting
    assert result.marked_s is not None
    assert "has sent no sample" in result.reason
    assert "nvmlDeviceGetPowerUsage" in result.collection_error
    assert "gpu-unresponsive pending" in result.alert_state
    assert result.back_s is not None and result.health_after == "healthy"
    assert result.dropped_batches == 0
