"""What a GPU reading is made of, shared by the NVML and the nvidia-smi readers.

Both produce the same things: a sample (:data:`ALL_METRIC_KEYS`, ``None`` = not available), the
reasons a metric is ``None`` (NVML's return-code names: ``NOT_SUPPORTED``, ``NO_PERMISSION``,
``FUNCTION_NOT_FOUND`` …, or ``NOT_REPORTED`` when the source does not report it at all) and an
inventory entry carrying ``unavailable``, ``mig_instances`` and ``processes`` (docs/ingest.md,
"More per-GPU inventory"). Nothing here imports ``pynvml``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any, cast

from agents.payload import ALL_METRIC_KEYS as ALL_METRIC_KEYS
from agents.payload import EXTRA_METRIC_KEYS, GpuInfo, Sample, empty_sample

NOT_SUPPORTED = "NOT_SUPPORTED"
NO_PERMISSION = "NO_PERMISSION"
FUNCTION_NOT_FOUND = "FUNCTION_NOT_FOUND"
UNKNOWN = "UNKNOWN"
TIMEOUT = "TIMEOUT"
#: The source has no such field (an older nvidia-smi DTD, a trimmed capture).
NOT_REPORTED = "NOT_REPORTED"
#: The UUID prefix of a GPU reported without its own UUID: ``GPU-unknown-<PCI address>``, or
#: ``GPU-unknown-index-<n>`` when the address is unknown too.
PLACEHOLDER_PREFIX = "GPU-unknown-"

_BUS_ID = re.compile(
    r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})(?:\.([0-7]))?$"
)
_MIG_PROFILE = re.compile(r"\bMIG\s+(\S+)\s*$")


def blank_sample(gpu_uuid: str, sampled_at: datetime) -> Sample:
    """A sample of ``gpu_uuid`` with every metric of :data:`ALL_METRIC_KEYS` ``None``."""
    sample = empty_sample(gpu_uuid, sampled_at)
    sample.update(dict.fromkeys(EXTRA_METRIC_KEYS))
    return sample


def unavailable_reasons(metrics: Mapping[str, Any], reasons: Mapping[str, str]) -> dict[str, str]:
    """Metric → reason for every metric of :data:`ALL_METRIC_KEYS` that is ``None`` in
    ``metrics`` (``NOT_REPORTED`` when no reason was recorded), sorted by name."""
    return {
        key: reasons.get(key, NOT_REPORTED)
        for key in sorted(ALL_METRIC_KEYS)
        if metrics.get(key) is None
    }


def inventory_entry(
    info: GpuInfo,
    *,
    unavailable: Mapping[str, str] | None = None,
    mig_instances: list[dict[str, Any]] | None = None,
    processes: list[dict[str, Any]] | None = None,
) -> GpuInfo:
    """``info`` plus the optional per-GPU inventory keys ``unavailable``, ``mig_instances`` and
    ``processes`` (absent keys are left out, as the contract allows)."""
    entry: dict[str, Any] = dict(info)
    if unavailable is not None:
        entry["unavailable"] = dict(unavailable)
    if mig_instances is not None:
        entry["mig_instances"] = mig_instances
    if processes is not None:
        entry["processes"] = processes
    return cast(GpuInfo, entry)


def normalize_bus_id(text: str | None) -> str | None:
    """A PCI address in NVML's spelling, ``00000000:18:00.0`` (8-digit domain, upper-case hex),
    from NVML's, sysfs' (``0000:18:00.0``) or nvidia-smi's; ``None`` when it is not one."""
    if not text:
        return None
    match = _BUS_ID.match(text.strip())
    if match is None:
        return None
    domain, bus, device, function = match.groups()
    return (
        f"{int(domain or '0', 16):08X}:{int(bus, 16):02X}:{int(device, 16):02X}."
        f"{int(function or '0')}"
    )


def cuda_version_text(version: int | None) -> str | None:
    """``nvmlSystemGetCudaDriverVersion``'s integer (``12080``) as ``"12.8"``."""
    if version is None or version <= 0:
        return None
    return f"{version // 1000}.{version % 1000 // 10}"


def mig_profile(device_name: str | None) -> str | None:
    """The MIG profile (``1g.10gb``) at the end of a MIG device's ``nvmlDeviceGetName``
    (``NVIDIA A100-SXM4-80GB MIG 1g.10gb``), else ``None``."""
    if not device_name:
        return None
    match = _MIG_PROFILE.search(device_name)
    return match[1] if match else None


def cpu_ranges(cpus: list[int]) -> str | None:
    """CPU numbers as nvidia-smi prints an affinity (``0-51,104-155``); ``None`` when empty."""
    if not cpus:
        return None
    ordered = sorted(set(cpus))
    parts: list[str] = []
    start = previous = ordered[0]
    for cpu in [*ordered[1:], -2]:
        if cpu == previous + 1:
            previous = cpu
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = cpu
    return ",".join(parts)
