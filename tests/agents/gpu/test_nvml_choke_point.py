"""The NVML choke point and its helpers: one importer of ``pynvml``, calls with a deadline,
error codes sorted into "not available" and "GPU gone", counters that never go negative."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

from agents.nvml.counters import CounterRate
from agents.nvml.metrics import cpu_ranges, cuda_version_text, mig_profile, normalize_bus_id
from agents.nvml.session import GpuGone, NvmlSession, Unavailable
from agents.nvml.worker import CallTimedOut, TimedCaller
from tests.agents.gpu.fake_pynvml import FakeNvml, NVMLError

AGENTS = Path(__file__).resolve().parents[3] / "agents"


def test_only_the_session_module_imports_pynvml() -> None:
    importers = {
        path.relative_to(AGENTS).as_posix()
        for path in AGENTS.rglob("*.py")
        if re.search(r"^\s*(import pynvml|from pynvml)|\"pynvml\"", path.read_text(), re.M)
    }
    assert importers == {"nvml/session.py"}


@pytest.fixture
def session(install_nvml: object) -> NvmlSession:
    fake = FakeNvml([], "570.86.15", 12080)
    install_nvml(fake)  # type: ignore[operator]
    opened = NvmlSession(timeout_s=1)
    opened.open()
    return opened


def test_it_sorts_nvml_error_codes_into_not_available_and_gpu_gone(session: NvmlSession) -> None:
    def raising(code: int) -> None:
        raise NVMLError(code)

    session.nvml.nvmlDeviceGetThing = raising
    for code, reason in ((3, "NOT_SUPPORTED"), (4, "NO_PERMISSION"), (13, "FUNCTION_NOT_FOUND")):
        with pytest.raises(Unavailable) as unavailable:
            session.call("nvmlDeviceGetThing", code)
        assert unavailable.value.reason == reason
    for code, state in ((15, "lost"), (28, "lost"), (999, "unknown_error")):
        with pytest.raises(GpuGone) as gone:
            session.call("nvmlDeviceGetThing", code)
        assert gone.value.state == state
    with pytest.raises(Unavailable, match="ERROR_77"):
        session.call("nvmlDeviceGetThing", 77)


def test_a_python_error_inside_the_binding_is_not_available_not_a_crash(
    session: NvmlSession,
) -> None:
    def broken() -> None:
        raise KeyError("missing")

    session.nvml.nvmlDeviceGetThing = broken
    with pytest.raises(Unavailable, match="UNEXPECTED: KeyError"):
        session.call("nvmlDeviceGetThing")


def test_bytes_and_strict_decoding_failures_become_text_with_replacement(
    session: NvmlSession,
) -> None:
    session.nvml.nvmlBytes = lambda: b"GPU \xff"
    session.nvml.nvmlStrict = lambda: b"GPU \xff".decode()
    assert session.call("nvmlBytes") == "GPU \ufffd"
    assert session.call("nvmlStrict") == "GPU \ufffd"
    assert session.call("nvmlSystemGetCudaDriverVersion") == 12080


def test_a_hung_call_times_out_and_later_calls_still_run() -> None:
    caller = TimedCaller(0.05)
    release = threading.Event()
    with pytest.raises(CallTimedOut, match=r"nvmlDeviceGetX timed out after 0\.05 s"):
        caller.run("nvmlDeviceGetX", lambda: release.wait(5), key="GPU-1")
    assert caller.hung_call("GPU-1") is not None
    assert caller.run("nvmlDeviceGetY", lambda: 42, key="GPU-2") == 42
    release.set()
    for _ in range(100):
        if caller.hung_call("GPU-1") is None:
            break
        threading.Event().wait(0.01)
    assert caller.hung_call("GPU-1") is None
    caller.close()


def test_a_counter_rate_skips_first_backwards_stalled_and_absurd_intervals() -> None:
    rate = CounterRate(scale=1024, max_rate=1e6)
    assert rate.update(100, 10.0) is None  # first reading
    assert rate.update(110, 15.0) == 10 * 1024 / 5
    assert rate.update(50, 20.0) is None  # went backwards: driver reload
    assert rate.update(60, 20.0) is None  # no time passed
    assert rate.update(2**40, 25.0) is None  # a wrap read as a jump
    assert rate.update(None, 30.0) is None
    assert rate.update(2**40 + 5, 35.0) is None  # after a missing reading, start again


def test_helpers_spell_values_as_nvml_and_nvidia_smi_do() -> None:
    assert cpu_ranges([*range(52), *range(104, 156)]) == "0-51,104-155"
    assert cpu_ranges([3, 1, 2, 7]) == "1-3,7"
    assert cpu_ranges([]) is None
    assert normalize_bus_id("0000:1a:00.0") == "00000000:1A:00.0"
    assert normalize_bus_id("GPU0000:07:00.0") is None
    assert cuda_version_text(12080) == "12.8"
    assert cuda_version_text(11020) == "11.2"
    assert mig_profile("NVIDIA A100-SXM4-80GB MIG 1g.10gb") == "1g.10gb"
    assert mig_profile("NVIDIA A100-SXM4-80GB") is None
