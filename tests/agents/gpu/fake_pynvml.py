"""A stand-in for the ``pynvml`` module, installed as ``sys.modules["pynvml"]`` so the agent's
NVML choke point imports it instead of the real binding.

Its devices come from the real captures in ``../shared/fixtures/nvidia-smi-xml``
(:meth:`FakeNvml.from_capture`): a field nvidia-smi printed as N/A raises
``NVMLError_NotSupported``, a device marked ``lost`` raises ``NVMLError_GpuIsLost`` on every
call. Tests add faults per device (``failures``, ``hang_s``, ``energy_mj``, ``nvlinks`` …) or
for the whole library (:meth:`FakeNvml.fail`, :meth:`FakeNvml.remove`).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml as _real

from agents.nvidia_smi import parse_nvidia_smi_xml
from tests.agents.gpu.fake_api import LinksApi, MetricsApi, NVMLError, api
from tests.agents.gpu.fake_devices import FakeDevice, Missing


class FakeNvml(MetricsApi, LinksApi):
    """The fake library: ``devices`` (all), ``visible`` (what enumeration shows now),
    ``pending_xids`` (``(device, xid)`` waiting in the event set), ``calls`` (every call)."""

    NVMLError = NVMLError

    def __init__(self, devices: list[FakeDevice], driver: str, cuda: int | None) -> None:
        for name in dir(_real):
            if name.startswith(("NVML_", "nvml")) and isinstance(getattr(_real, name), int):
                setattr(self, name, getattr(_real, name))
        self.nvmlMemory_v2 = _real.nvmlMemory_v2
        self.devices = devices
        self.visible = list(devices)
        self.driver, self.cuda = driver, cuda
        self.failures: dict[str, int] = {}
        #: index → the code ``nvmlDeviceGetHandleByIndex`` raises for it (a GPU that cannot be
        #: opened, as nvidia-smi's "Unable to determine the device handle").
        self.handle_errors: dict[int, int] = {}
        self.init_error: int | None = None
        self.pending_xids: list[tuple[FakeDevice, int]] = []
        self.topology: dict[tuple[str, str], int] = {}
        self.calls: list[str] = []

    @classmethod
    def from_capture(cls, path: Path) -> FakeNvml:
        """A machine as ``nvidia-smi -q -x`` showed it in ``path``."""
        log = parse_nvidia_smi_xml(path.read_bytes())
        major, _, minor = (log.cuda_version or "").partition(".")
        cuda = int(major) * 1000 + int(minor or 0) * 10 if major.isdigit() else None
        devices = [FakeDevice.from_capture(g) for g in log.gpus]
        return cls(devices, log.driver_version or "", cuda)

    def fail(self, function: str, code: int) -> None:
        """Every call of ``function`` raises ``NVMLError(code)`` (e.g. 13, FUNCTION_NOT_FOUND:
        the driver's library lacks the symbol)."""
        self.failures[function] = code

    def remove(self, function: str) -> None:
        """The binding itself lacks ``function`` (an older nvidia-ml-py)."""
        setattr(self, function, None)

    # -- library and system ------------------------------------------------------------
    @api
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    @api
    def nvmlShutdown(self) -> None:
        return None

    @api
    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    @api
    def nvmlSystemGetCudaDriverVersion(self) -> int:
        if self.cuda is None:
            raise Missing(3)
        return self.cuda

    @api
    def nvmlDeviceGetCount(self) -> int:
        return len(self.visible)

    @api
    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeDevice:
        if not 0 <= index < len(self.visible):
            raise Missing(2)
        if index in self.handle_errors:
            raise Missing(self.handle_errors[index])
        return self.visible[index]

    # -- identity ----------------------------------------------------------------------
    @api
    def nvmlDeviceGetUUID(self, d: FakeDevice) -> str:
        return d.uuid

    @api
    def nvmlDeviceGetName(self, d: FakeDevice) -> str:
        if isinstance(d.name, bytes):
            return d.name.decode()  # pynvml decodes strictly: UnicodeDecodeError on bad bytes
        if d.name is None:
            raise Missing(3)
        return d.name if d.profile is None else f"{d.name} MIG {d.profile}"

    @api
    def nvmlDeviceGetPciInfo(self, d: FakeDevice) -> SimpleNamespace:
        return SimpleNamespace(busId=d.bus_id)

    @api
    def nvmlDeviceGetMemoryInfo(self, d: FakeDevice, version: int | None = None) -> Any:
        return d.memory(v2=bool(version))

    @api
    def nvmlDeviceGetMigMode(self, d: FakeDevice) -> list[int]:
        if d.mig_mode is None:
            raise Missing(3)
        return [1, 1] if d.mig_mode == "enabled" else [0, 0]

    @api
    def nvmlDeviceGetMaxMigDeviceCount(self, d: FakeDevice) -> int:
        return 7 if d.mig_mode == "enabled" else 0

    @api
    def nvmlDeviceGetMigDeviceHandleByIndex(self, d: FakeDevice, index: int) -> FakeDevice:
        if index >= len(d.mig_devices):
            raise Missing(6)
        return d.mig_devices[index]

    @api
    def nvmlDeviceGetGpuInstanceId(self, d: FakeDevice) -> int | None:
        return d.gpu_instance_id

    @api
    def nvmlDeviceGetComputeInstanceId(self, d: FakeDevice) -> int | None:
        return d.compute_instance_id

    @api
    def nvmlDeviceGetComputeRunningProcesses(self, d: FakeDevice) -> list[SimpleNamespace]:
        return [
            SimpleNamespace(pid=p["pid"], usedGpuMemory=p["used_memory_bytes"]) for p in d.processes
        ]
