"""What nvidia-smi prints instead of (or next to) its XML when something is wrong.

Per GPU, when it cannot even get a device handle::

    Unable to determine the device handle for GPU 0000:03:00.0: GPU is lost.  Reboot the
    system to recover this GPU
    Unable to determine the device handle for GPU0000:07:00.0: Unknown Error

(each report is one line as printed; two spaces after "lost." on older drivers, no space before
the bus id on newer ones, ``gpu`` in lower case on some, a 4- or 8-digit PCI domain in either
case, and the message hard-wrapped onto an indented next line by a narrow console). For the
whole tool, when the driver is absent: ``NVIDIA-SMI has failed because it couldn't communicate
with the NVIDIA driver``, or ``No devices were found``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agents.nvml.metrics import normalize_bus_id

_HANDLE = re.compile(
    r"Unable to determine the device handle for GPU\s*"
    r"(?P<bus>[0-9A-F]{4,8}:[0-9A-F]{2}:[0-9A-F]{2}(?:\.[0-7])?)?\s*:\s*(?P<message>.*)$",
    re.IGNORECASE,
)
_NO_DRIVER = (
    "couldn't communicate with the nvidia driver",
    "nvml: driver not loaded",
    "unable to load the nvidia driver",
    "failed to initialize nvml",
    "no devices were found",
)


@dataclass(frozen=True)
class GpuFailure:
    """A GPU nvidia-smi could not read: its bus id (NVML spelling, ``None`` if not printed),
    ``state`` (``lost`` or ``unknown_error``) and the message, whitespace-normalised."""

    pci_bus_id: str | None
    state: str
    message: str


def parse_failures(text: str) -> list[GpuFailure]:
    """Every "Unable to determine the device handle" report in ``text`` (nvidia-smi's stdout
    and stderr), in order; a message wrapped onto more-indented lines is joined back."""
    lines = text.splitlines()
    failures = []
    for number, line in enumerate(lines):
        match = _HANDLE.search(line)
        if match is None:
            continue
        parts = [match["message"]]
        indent = len(line) - len(line.lstrip())
        for follow in lines[number + 1 :]:
            if not follow.strip() or len(follow) - len(follow.lstrip()) <= indent:
                break
            if _HANDLE.search(follow):
                break
            parts.append(follow)
        message = " ".join(" ".join(parts).split())
        lost = "gpu is lost" in message.lower() or "fallen off the bus" in message.lower()
        failures.append(
            GpuFailure(
                pci_bus_id=normalize_bus_id(match["bus"]),
                state="lost" if lost else "unknown_error",
                message=message,
            )
        )
    return failures


def tool_failure(text: str) -> str | None:
    """The line saying nvidia-smi cannot work on this machine at all (no driver, no GPU), or
    ``None``."""
    for line in text.splitlines():
        if any(marker in line.lower() for marker in _NO_DRIVER):
            return line.strip()
    return None
