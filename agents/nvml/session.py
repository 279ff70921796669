"""The agent's one choke point to NVML (STYLE.md point 9, after nvitop): ``pynvml`` is imported
here, lazily, and every NVML call of the agent goes through :meth:`NvmlSession.call`.

What a call can end in:

- a value (``bytes`` and strings that are not valid UTF-8 decoded with replacement);
- *not available*: ``NOT_SUPPORTED``, ``NO_PERMISSION``, ``FUNCTION_NOT_FOUND`` (also a function
  the installed ``pynvml`` lacks) and the like → :class:`Unavailable` carrying the reason, which
  :meth:`NvmlSession.read` turns into ``None`` and records per metric, logging it once per
  (GPU, metric, reason);
- the GPU is gone: ``GPU_IS_LOST``, ``GPU_NOT_FOUND`` → :class:`GpuGone` ``("lost", …)``;
  ``UNKNOWN`` and errors after which nothing on the device can be read → ``("unknown_error", …)``;
- :class:`~agents.nvml.worker.CallTimedOut` when the call hangs past ``timeout_s``.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

from agents.collectors.base import CollectorUnavailable
from agents.jsonsafe import clean_text
from agents.nvml.metrics import FUNCTION_NOT_FOUND
from agents.nvml.plausible import Plausibility
from agents.nvml.worker import CallTimedOut, TimedCaller

log = logging.getLogger(__name__)
#: The binding's import name (nvidia-ml-py installs it as ``pynvml``).
BINDING = "pynvml"

#: NVML return codes (nvml.h, stable across versions) → the names reasons are reported by.
ERROR_NAMES: dict[int, str] = {
    1: "UNINITIALIZED",
    2: "INVALID_ARGUMENT",
    3: "NOT_SUPPORTED",
    4: "NO_PERMISSION",
    6: "NOT_FOUND",
    7: "INSUFFICIENT_SIZE",
    9: "DRIVER_NOT_LOADED",
    10: "TIMEOUT",
    12: "LIBRARY_NOT_FOUND",
    13: "FUNCTION_NOT_FOUND",
    14: "CORRUPTED_INFOROM",
    15: "GPU_IS_LOST",
    16: "RESET_REQUIRED",
    17: "OPERATING_SYSTEM",
    18: "LIB_RM_VERSION_MISMATCH",
    21: "NO_DATA",
    22: "VGPU_ECC_NOT_SUPPORTED",
    25: "ARGUMENT_VERSION_MISMATCH",
    26: "DEPRECATED",
    27: "NOT_READY",
    28: "GPU_NOT_FOUND",
    999: "UNKNOWN",
}
#: Codes after which the GPU itself is reported lost / in an unknown error state.
GONE_STATES: dict[str, str] = {
    "GPU_IS_LOST": "lost",
    "GPU_NOT_FOUND": "lost",
    "UNKNOWN": "unknown_error",
    "RESET_REQUIRED": "unknown_error",
    "UNINITIALIZED": "unknown_error",
    "DRIVER_NOT_LOADED": "unknown_error",
    "LIB_RM_VERSION_MISMATCH": "unknown_error",
}
_NO_DRIVER = {"LIBRARY_NOT_FOUND", "DRIVER_NOT_LOADED", "FUNCTION_NOT_FOUND"}
_QUIET = {"NOT_SUPPORTED", "FUNCTION_NOT_FOUND", "NOT_FOUND"}


class Unavailable(Exception):
    """A call that returned "not available"; ``reason`` is NVML's code name."""

    def __init__(self, function: str, reason: str) -> None:
        super().__init__(f"{function}: {reason}")
        self.function = function
        self.reason = reason


class GpuGone(Exception):
    """The GPU cannot be read any more: ``state`` is ``"lost"`` or ``"unknown_error"``,
    ``reason`` the text for ``state_reason`` (``"NVML_ERROR_GPU_IS_LOST (nvmlDeviceGet…)"``)."""

    def __init__(self, state: str, reason: str) -> None:
        super().__init__(reason)
        self.state = state
        self.reason = reason


def error_name(exc: BaseException) -> str:
    """The NVML code name of an ``NVMLError`` (``"ERROR_<n>"`` for codes this table lacks)."""
    code = getattr(exc, "value", None)
    return ERROR_NAMES.get(code, f"ERROR_{code}") if isinstance(code, int) else "UNEXPECTED"


def struct_text(struct: Any, field: str) -> str | None:
    """A text field of an NVML struct (``nvmlPciInfo_t.busId``): pynvml decodes it strictly on
    access, so bytes that are not UTF-8 are decoded here with replacement instead of raising."""
    if struct is None:
        return None
    try:
        value = getattr(struct, field, None)
    except UnicodeDecodeError as exc:
        return exc.object.decode("utf-8", errors="replace")
    return clean_text(value) if isinstance(value, str | bytes) else None


class NvmlSession:
    """One initialised NVML (``nvmlInit`` once) and the calls made through it, each within
    ``timeout_s`` seconds. ``module`` is the import name of the binding (tests put a fake under
    ``sys.modules["pynvml"]``)."""

    def __init__(self, *, timeout_s: float | None = 5.0, module: str = BINDING) -> None:
        self.timeout_s = timeout_s
        self._module_name = module
        self._nvml: Any = None
        self._caller = TimedCaller(timeout_s)
        self._logged: set[tuple[str | None, str, str]] = set()
        #: The plausibility checks of every value read through this session.
        self.plausible = Plausibility()

    def open(self) -> None:
        """Import the binding and call ``nvmlInit``.

        Raises:
            CollectorUnavailable: ``pynvml`` is not installed, ``libnvidia-ml.so`` or the driver
                is missing, or ``nvmlInit`` failed or hung.
        """
        try:
            self._nvml = importlib.import_module(self._module_name)
        except ImportError as exc:
            raise CollectorUnavailable(
                f"{self._module_name} (nvidia-ml-py) is not installed: {exc}"
            ) from None
        try:
            self._caller.run("nvmlInit", self._nvml.nvmlInit)
        except CallTimedOut as exc:
            raise CollectorUnavailable(f"no usable NVIDIA driver: {exc}") from None
        except self._nvml.NVMLError as exc:
            name = error_name(exc)
            if name in _NO_DRIVER:
                raise CollectorUnavailable(
                    f"no NVIDIA driver found: {exc} (NVML_ERROR_{name}; libnvidia-ml.so.1 "
                    "could not be loaded); use --collector simulated for a simulated node"
                ) from None
            raise CollectorUnavailable(f"nvmlInit failed: {exc} (NVML_ERROR_{name})") from None

    @property
    def nvml(self) -> Any:
        """The binding module, for its constants (``NVML_CLOCK_SM`` …)."""
        return self._nvml

    def call(self, function: str, *args: Any, gpu: str | None = None) -> Any:
        """Call ``pynvml.<function>(*args)`` within the deadline; ``gpu`` keys hung calls.

        Raises:
            Unavailable: not supported / no permission / missing function / other per-call codes.
            GpuGone: the device is lost or in an unknown error state.
            CallTimedOut: the call hung.
        """
        target = getattr(self._nvml, function, None)
        if target is None:
            raise Unavailable(function, FUNCTION_NOT_FOUND)
        try:
            value = self._caller.run(function, lambda: target(*args), key=gpu)
        except UnicodeDecodeError as exc:
            # pynvml decodes char arrays strictly; the raw bytes ride on the exception.
            return exc.object.decode("utf-8", errors="replace")
        except self._nvml.NVMLError as exc:
            name = error_name(exc)
            state = GONE_STATES.get(name)
            if state is not None:
                raise GpuGone(state, f"NVML_ERROR_{name} ({function})") from None
            raise Unavailable(function, name) from None
        except (CallTimedOut, Unavailable, GpuGone):
            raise
        except Exception as exc:
            log.debug("%s raised %r", function, exc)
            raise Unavailable(function, f"UNEXPECTED: {type(exc).__name__}") from None
        return clean_text(value) if isinstance(value, str | bytes) else value

    def read(
        self, reasons: dict[str, str], metric: str, function: str, *args: Any, gpu: str
    ) -> Any:
        """:meth:`call`, with "not available" turned into ``None`` and its reason stored in
        ``reasons[metric]`` (logged once per GPU, metric and reason)."""
        try:
            return self.call(function, *args, gpu=gpu)
        except Unavailable as exc:
            self.note_unavailable(reasons, metric, exc, gpu=gpu)
            return None

    def note_unavailable(
        self, reasons: dict[str, str], metric: str, exc: Unavailable, *, gpu: str | None
    ) -> None:
        """Record ``exc.reason`` for ``metric`` and log it the first time."""
        reasons[metric] = exc.reason
        key = (gpu, metric, exc.reason)
        if key not in self._logged:
            self._logged.add(key)
            level = logging.INFO if exc.reason in _QUIET else logging.WARNING
            log.log(level, "GPU %s: %s not available: %s", gpu, metric, exc)

    def hung_call(self, gpu: str) -> str | None:
        """The function still hung on ``gpu`` since an earlier timeout, if any."""
        hung = self._caller.hung_call(gpu)
        return None if hung is None else hung.function

    def close(self) -> None:
        """``nvmlShutdown`` (errors ignored) and stop the worker."""
        if self._nvml is not None:
            try:
                self._caller.run("nvmlShutdown", self._nvml.nvmlShutdown)
            except Exception as exc:
                log.debug("nvmlShutdown: %r", exc)
            self._nvml = None
        self._caller.close()
