"""Parse ``nvidia-smi -q -x`` into the same inventory entries and sample metrics as the NVML
collector reads.

Handles DTD v9 to v13: ``power_readings`` (≤ v11) vs ``gpu_power_readings`` (v12+, with
``average_power_draw``/``instant_power_draw`` from driver 570); ECC as ``single_bit``/
``double_bit`` totals (≤ 515) or ``sram_*``/``dram_*`` counters; ``clocks_throttle_reasons``
(< 535) vs ``clocks_event_reasons``; no ``<?xml?>``/DOCTYPE header; ``attached_gpus`` larger than
the number of ``<gpu>`` elements. Values nvidia-smi cannot read are ``None`` with a reason.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any

from agents.numbers import ascii_int
from agents.nvidia_smi.ecc import ecc_counts
from agents.nvidia_smi.values import Fields, parse_number
from agents.nvml.metrics import (
    ALL_METRIC_KEYS,
    PLACEHOLDER_PREFIX,
    normalize_bus_id,
    unavailable_reasons,
)
from agents.nvml.plausible import MAX_INSTANCE_ID, MAX_MEMORY_BYTES, MAX_PID

#: Reason child element (after ``clocks_event_reason_`` / ``clocks_throttle_reason_``) → the
#: ``nvmlClocksEventReason*`` bit.
CLOCKS_EVENT_BITS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "user_defined_clocks": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clocks_setting": 0x100,
}
_DTD = re.compile(r"nvsmi_device_v(\d+)\.dtd")
_START = re.compile(r"<\?xml|<nvidia_smi_log\b")
_END = "</nvidia_smi_log>"


#: The longest product name the server takes (``gpus[].name``).
MAX_NAME_CHARS = 256


class NvidiaSmiParseError(ValueError):
    """The text is not a complete ``nvidia-smi -q -x`` document; the message says what was
    wrong and quotes the start of the text."""


@dataclass
class SmiGpu:
    """One ``<gpu>``: ``info`` (the inventory fields), ``metrics`` (every key of
    :data:`ALL_METRIC_KEYS`), ``unavailable`` (metric → reason), ``mig_instances`` (``None``
    unless MIG is enabled) and ``processes`` (all types; ``type`` is ``C``, ``G`` or ``C+G``)."""

    info: dict[str, Any]
    metrics: dict[str, Any]
    unavailable: dict[str, str]
    mig_instances: list[dict[str, Any]] | None
    processes: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class SmiLog:
    """The whole document: versions (``None`` when absent, as before driver 410 for CUDA), the
    ``attached_gpus`` count as printed, the DTD version and the GPUs described."""

    driver_version: str | None
    cuda_version: str | None
    attached_gpus: int | None
    dtd_version: int | None
    gpus: list[SmiGpu]


def parse_nvidia_smi_xml(text: str | bytes) -> SmiLog:
    """Parse the output of ``nvidia-smi -q -x`` (text before ``<?xml``/``<nvidia_smi_log>``
    and after ``</nvidia_smi_log>`` is ignored; bytes are decoded as UTF-8 with replacement).

    Raises:
        NvidiaSmiParseError: no ``<nvidia_smi_log>`` document, or it is truncated or malformed.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    start = _START.search(text)
    if start is None:
        raise NvidiaSmiParseError(f"no <nvidia_smi_log> document in: {text[:200]!r}")
    end = text.rfind(_END)
    if end < start.start():
        raise NvidiaSmiParseError(
            f"truncated nvidia-smi XML: no closing {_END} ({len(text)} characters)"
        )
    document = text[start.start() : end + len(_END)]
    try:
        root = ET.fromstring(document)
    except ET.ParseError as exc:
        raise NvidiaSmiParseError(f"malformed nvidia-smi XML: {exc}") from None
    dtd = _DTD.search(text[: start.start() + 300])
    top = Fields(root)
    attached = top.text("attached_gpus")
    return SmiLog(
        driver_version=top.word("driver_version"),
        cuda_version=top.word("cuda_version"),
        attached_gpus=ascii_int(attached),
        dtd_version=int(dtd[1]) if dtd else None,
        gpus=[_gpu(element, index) for index, element in enumerate(root.findall("gpu"))],
    )


def _gpu(element: ET.Element, index: int) -> SmiGpu:
    f = Fields(element)
    bus_id = normalize_bus_id(f.word("pci/pci_bus_id") or element.get("id"))
    mig = (f.word("mig_mode/current_mig") or "").lower()
    metrics = _metrics(f)
    memory = f.value("mem_total_bytes", "fb_memory_usage/total")
    if not isinstance(memory, int) or not 0 <= memory <= MAX_MEMORY_BYTES:
        memory = None  # as agents.nvml.plausible nulls it: no GPU has it
    name = f.word("product_name")
    info = {
        "uuid": f.word("uuid") or f"{PLACEHOLDER_PREFIX}{bus_id or index}",
        "index": index,
        "name": name[:MAX_NAME_CHARS] if name else name,
        "pci_bus_id": bus_id,
        "mem_total_bytes": memory,
        "mig_mode": mig if mig in ("enabled", "disabled") else None,
        "state": "ok",
        "state_reason": None,
    }
    return SmiGpu(
        info=info,
        metrics=metrics,
        unavailable=unavailable_reasons(metrics, f.reasons),
        mig_instances=_mig_instances(element) if mig == "enabled" else None,
        processes=_processes(element),
    )


def _metrics(f: Fields) -> dict[str, Any]:
    m: dict[str, Any] = dict.fromkeys(ALL_METRIC_KEYS)
    for key, path in (
        ("util_gpu_pct", "utilization/gpu_util"),
        ("util_mem_pct", "utilization/memory_util"),
        ("util_enc_pct", "utilization/encoder_util"),
        ("util_dec_pct", "utilization/decoder_util"),
        ("mem_used_bytes", "fb_memory_usage/used"),
        ("mem_free_bytes", "fb_memory_usage/free"),
        ("mem_reserved_bytes", "fb_memory_usage/reserved"),
        ("temp_c", "temperature/gpu_temp"),
        ("mem_temp_c", "temperature/memory_temp"),
        ("sm_clock_mhz", "clocks/sm_clock"),
        ("mem_clock_mhz", "clocks/mem_clock"),
        ("graphics_clock_mhz", "clocks/graphics_clock"),
        ("fan_pct", "fan_speed"),
        ("pstate", "performance_state"),
        ("pcie_tx_bytes_per_s", "pci/tx_util"),
        ("pcie_rx_bytes_per_s", "pci/rx_util"),
        ("pcie_replay_count", "pci/replay_counter"),
        ("pcie_link_gen", "pci/pci_gpu_link_info/pcie_gen/current_link_gen"),
        ("pcie_link_gen_max", "pci/pci_gpu_link_info/pcie_gen/max_link_gen"),
        ("pcie_link_width", "pci/pci_gpu_link_info/link_widths/current_link_width"),
        ("pcie_link_width_max", "pci/pci_gpu_link_info/link_widths/max_link_width"),
        ("retired_pages_sbe_count", "retired_pages/multiple_single_bit_retirement/retired_count"),
        ("retired_pages_dbe_count", "retired_pages/double_bit_retirement/retired_count"),
    ):
        m[key] = f.value(key, path)
    m["power_w"] = f.value(
        "power_w",
        "power_readings/power_draw",
        "gpu_power_readings/power_draw",
        "gpu_power_readings/average_power_draw",
        "gpu_power_readings/instant_power_draw",
    )
    m["power_limit_w"] = f.value(
        "power_limit_w",
        "power_readings/enforced_power_limit",
        "gpu_power_readings/current_power_limit",
    )
    f.reasons["energy_j"] = f.reasons["nvlink_tx_bytes_per_s"] = "NOT_REPORTED"
    f.reasons["nvlink_rx_bytes_per_s"] = "NOT_REPORTED"
    m["clocks_event_reasons"] = _clocks_event_reasons(f)
    m["retired_pages_pending"] = f.value(
        "retired_pages_pending", "retired_pages/pending_retirement", flag=True
    )
    for key, path, flag in (
        ("remapped_rows_correctable_count", "remapped_rows/remapped_row_corr", False),
        ("remapped_rows_uncorrectable_count", "remapped_rows/remapped_row_unc", False),
        ("remapped_rows_pending", "remapped_rows/remapped_row_pending", True),
        ("remapped_rows_failure", "remapped_rows/remapped_row_failure", True),
    ):
        # ``<remapped_rows>N/A</remapped_rows>``: the whole group is not supported.
        m[key] = f.value(key, path, "remapped_rows", flag=flag)
    m.update(ecc_counts(f))
    return m


def _clocks_event_reasons(f: Fields) -> int | None:
    """The ``clocks_event_reasons`` (or, before driver 535, ``clocks_throttle_reasons``)
    children that read ``Active``, as the NVML bitmask."""
    group = f.element.find("clocks_event_reasons")
    if group is None:
        group = f.element.find("clocks_throttle_reasons")
    if group is None:
        f.reasons["clocks_event_reasons"] = "NOT_REPORTED"
        return None
    mask, known = 0, False
    for child in group:
        name = re.sub(r"^clocks_(event|throttle)_reason_", "", child.tag)
        state = (child.text or "").strip().lower()
        if name in CLOCKS_EVENT_BITS and state in ("active", "not active"):
            known = True
            mask |= CLOCKS_EVENT_BITS[name] if state == "active" else 0
    if not known:
        f.value("clocks_event_reasons", "clocks_event_reasons", "clocks_throttle_reasons")
        return None
    return mask


def _mig_instances(element: ET.Element) -> list[dict[str, Any]]:
    """``mig_devices/mig_device``: instance ids and memory (the XML has no MIG UUID or profile)."""
    instances = []
    for device in element.findall("mig_devices/mig_device"):
        f = Fields(device)
        instances.append(
            {
                "uuid": None,
                "gpu_instance_id": _instance_id(f.value("gi", "gpu_instance_id")),
                "compute_instance_id": _instance_id(f.value("ci", "compute_instance_id")),
                "profile": None,
                "mem_total_bytes": f.value("total", "fb_memory_usage/total"),
                "mem_used_bytes": f.value("used", "fb_memory_usage/used"),
            }
        )
    return instances


def _instance_id(value: Any) -> int | None:
    """A MIG instance id as NVML has them (0-1023, the server's range), else ``None``."""
    return value if type(value) is int and 0 <= value <= MAX_INSTANCE_ID else None


def _processes(element: ET.Element) -> list[dict[str, Any]]:
    """``processes/process_info``: pid, type, name as nvidia-smi printed it, used memory; a
    process whose PID no Linux process can have (0, above ``PID_MAX_LIMIT``) is left out."""
    found = []
    for process in element.findall("processes/process_info"):
        f = Fields(process)
        pid = parse_number(f.text("pid") or "")
        if not isinstance(pid, int) or not 0 < pid <= MAX_PID:
            continue  # no process of this machine (as agents.nvml.plausible leaves out)
        found.append(
            {
                "pid": pid,
                "type": f.word("type"),
                "name": f.word("process_name") or None,
                "used_memory_bytes": f.value("used", "used_memory"),
            }
        )
    return found
