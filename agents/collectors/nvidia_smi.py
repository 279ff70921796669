"""The nvidia-smi fallback collector: runs ``nvidia-smi -q -x`` each round and parses it into
the same samples and inventory as the NVML collector (for hosts where NVML cannot be loaded
from Python but the tool works).

A GPU nvidia-smi reports as lost or in an unknown error state ("Unable to determine the device
handle …") is marked so with all metrics ``None``; one this agent never saw (lost before it
started) is reported as an unreadable placeholder, ``GPU-unknown-<PCI address>``, with the
reason, while the other GPUs report as usual (:mod:`agents.nvml.gpus`). Output that cannot be
parsed, or a run past its timeout, is a collection error and no samples for that round (never
old values again).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import shutil
import signal
import subprocess
import threading
from datetime import datetime
from typing import Any

from agents.collectors.base import Collector, CollectorUnavailable
from agents.nvidia_smi import (
    NvidiaSmiParseError,
    SmiGpu,
    parse_failures,
    parse_nvidia_smi_xml,
    tool_failure,
)
from agents.nvidia_smi.failures import GpuFailure
from agents.nvml.gpus import NvmlGpu, distinct_uuid, unreadable_gpu
from agents.nvml.metrics import blank_sample
from agents.nvml.procinfo import lookup_process
from agents.payload import (
    EventDict,
    GpuInfo,
    NodeInfo,
    Sample,
    format_timestamp,
    make_event,
    utc_now,
)

log = logging.getLogger(__name__)


class NvidiaSmiCollector(Collector):
    """Options: ``nvidia_smi`` (the binary, a name on ``PATH`` or a path; default
    ``"nvidia-smi"``), ``timeout_s`` (per run, default 10), ``proc_root`` (for process owners),
    ``wait_for_driver`` (start even when the first run shows no GPU at all: each round then
    says why in a collection error and tries again, so the GPUs appear once the driver
    answers).

    Raises:
        CollectorUnavailable: the binary is absent; or, without ``wait_for_driver``, its first
            run prints neither XML nor a GPU failure report (no driver, no GPU: the message
            quotes nvidia-smi).
    """

    name = "nvidia-smi"

    def __init__(
        self,
        *,
        nvidia_smi: str = "nvidia-smi",
        timeout_s: float = 10.0,
        proc_root: str = "/proc",
        wait_for_driver: bool = False,
    ) -> None:
        path = shutil.which(nvidia_smi)
        if path is None:
            raise CollectorUnavailable(
                f"nvidia-smi not found: {nvidia_smi!r} is not an executable file or on PATH"
            )
        self.path, self.timeout_s, self.proc_root = path, timeout_s, proc_root
        self._lock = threading.Lock()
        self._gpus: dict[str, NvmlGpu] = {}
        self._metrics: dict[str, dict[str, Any]] = {}
        self._events: list[EventDict] = []
        self._errors: list[dict[str, str]] = []
        self._node = NodeInfo(driver_version=None, cuda_version=None)
        self._attached: int | None = None
        output = self._run("-q", "-x")
        if (output is None or not self._read(output, None)) and not wait_for_driver:
            problem = self._errors[-1]["message"] if self._errors else "no output"
            raise CollectorUnavailable(f"nvidia-smi cannot read the GPUs here: {problem}")
        self.start_count = len(self._gpus)

    def node_info(self) -> NodeInfo:
        """``driver_version`` and ``cuda_version`` of the last XML document."""
        with self._lock:
            return NodeInfo(**self._node)

    def inventory(self) -> list[GpuInfo]:
        """The GPUs of the last round, with state, reasons, MIG instances and compute processes."""
        with self._lock:
            return [g.entry() for g in self._ordered()]

    def sample(self, now: datetime) -> list[Sample]:
        """Run ``nvidia-smi -q -x`` and return one sample per GPU dated ``now`` (none when the
        run failed)."""
        with self._lock:
            output = self._run("-q", "-x")
            if output is None or not self._read(output, now):
                return []  # never the previous round's values again
            samples = []
            for gpu in self._ordered():
                sample = blank_sample(gpu.uuid, now)
                if gpu.state == "ok":
                    sample.update(self._metrics.get(gpu.uuid, {}))
                samples.append(sample)
            return samples

    def drain_events(self) -> list[EventDict]:
        """``gpu_lost``, ``gpu_unknown_error`` and ``gpu_missing`` events since the last call."""
        with self._lock:
            events, self._events = self._events, []
            return events

    def collection_errors(self) -> list[dict[str, str]]:
        """Failed or unparsable runs since the last call."""
        with self._lock:
            errors, self._errors = self._errors, []
            return errors

    def topology(self, now: datetime) -> dict[str, Any] | None:
        """``nvidia-smi topo -m`` through ``agents.topology.matrix.parse_topo_matrix``; ``None``
        while that parser is not installed."""
        try:
            matrix_module = importlib.import_module("agents.topology.matrix")
        except ImportError as exc:
            log.debug("no topology matrix parser: %s", exc)
            return None
        section: dict[str, Any] = {"collected_at": format_timestamp(now), "source": "nvidia-smi"}
        with self._lock:
            gpus = {
                g.info["index"]: g
                for g in self._gpus.values()
                if not g.missing and not g.placeholder
            }
            output = self._run("topo", "-m")
        try:
            if output is None:
                raise RuntimeError("nvidia-smi topo -m did not run (see collection errors)")
            matrix = matrix_module.parse_topo_matrix(output)
            body = matrix_module.topology_section(
                matrix, {index: gpu.uuid for index, gpu in gpus.items()}
            )
        except Exception as exc:
            return {**section, "partial": True, "errors": [str(exc)], "devices": [], "links": []}
        for device in body["devices"]:
            gpu = gpus.get(int(device["id"][3:])) if device.get("kind") == "gpu" else None
            if gpu is not None:
                device["pci_bus_id"] = gpu.info["pci_bus_id"]
        return {**section, "partial": False, "errors": [], **body}

    # -- internals -----------------------------------------------------------------------

    def _ordered(self) -> list[NvmlGpu]:
        return sorted(self._gpus.values(), key=lambda g: (g.missing, g.info["index"]))

    def _error(self, message: str) -> None:
        self._errors.append({"source": "nvidia-smi", "message": message[:1024]})

    def _run(self, *args: str) -> str | None:
        """stdout and stderr of one run, decoded with replacement; ``None`` on timeout or when
        it cannot be started (a collection error says which)."""
        command = " ".join(("nvidia-smi", *args))
        try:
            # Its own process group, so a timeout kills a wrapper script's children too.
            proc = subprocess.Popen(
                [self.path, *args],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            self._error(f"{command} could not run: {exc}")
            return None
        try:
            out, err = proc.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            self._error(f"{command} timed out after {self.timeout_s:g} s")
            return None
        text = out.decode("utf-8", errors="replace")
        stderr = err.decode("utf-8", errors="replace")
        return f"{text}\n{stderr}" if stderr.strip() else text

    def _read(self, output: str, now: datetime | None) -> bool:
        """Update the GPUs from one run's output; ``False`` when it held neither XML nor a GPU
        failure report."""
        failures = parse_failures(output)
        try:
            document = parse_nvidia_smi_xml(output)
        except NvidiaSmiParseError as exc:
            if not failures:
                self._error(f"nvidia-smi -q -x: {tool_failure(output) or exc}")
                return False
            document = None
        seen: set[str] = set()
        if document is not None:
            self._node = NodeInfo(
                driver_version=document.driver_version, cuda_version=document.cuda_version
            )
            for parsed in document.gpus:
                uuid = distinct_uuid(parsed.info["uuid"], parsed.info["pci_bus_id"], seen)
                if uuid != parsed.info["uuid"] and uuid not in self._gpus:
                    self._error(f"GPU {parsed.info['index']} repeats UUID; reported as {uuid}")
                parsed.info["uuid"] = uuid
                self._update(parsed)
                seen.add(uuid)
            if document.attached_gpus not in (None, len(document.gpus), self._attached):
                self._error(
                    f"nvidia-smi reports {document.attached_gpus} attached GPUs but describes "
                    f"{len(document.gpus)}"
                )
            self._attached = document.attached_gpus
        self._read_failures(failures, seen, now)
        for gpu in self._gpus.values():
            if gpu.uuid not in seen and not gpu.missing:
                gpu.missing = True
                count = len(seen)
                message = f"nvidia-smi sees {count} GPU(s), {self.start_count} at start"
                self._change(gpu, "lost", f"not listed by nvidia-smi any more ({message})", now)
                self._event("gpu_missing", gpu, now, f"{gpu.label()} is missing: {message}")
        return True

    def _read_failures(
        self, failures: list[GpuFailure], seen: set[str], now: datetime | None
    ) -> None:
        """Mark each GPU of a failure report (added to ``seen``) lost or in unknown error: the
        GPU known at that PCI address, else a placeholder, indexed by its place in PCI order
        among this round's GPUs. Placeholders not reported again leave the inventory (their
        GPU is listed under its UUID now, or not at all)."""
        by_bus = {g.info["pci_bus_id"]: g for g in self._gpus.values() if not g.placeholder}
        listed = {g.info["pci_bus_id"] for g in by_bus.values() if g.uuid in seen}
        order = sorted(listed | {f.pci_bus_id for f in failures}, key=lambda b: b or "")
        for failure in failures:
            if failure.pci_bus_id is None:
                self._error(f"a GPU (no PCI address printed) is {failure.state}: {failure.message}")
                continue
            gpu = by_bus.get(failure.pci_bus_id)
            if gpu is None:
                placeholder = unreadable_gpu(order.index(failure.pci_bus_id), failure.pci_bus_id)
                gpu = self._gpus.setdefault(placeholder.uuid, placeholder)
            seen.add(gpu.uuid)
            self._change(gpu, failure.state, f"nvidia-smi: {failure.message}", now)
        for uuid in [u for u, g in self._gpus.items() if g.placeholder and u not in seen]:
            del self._gpus[uuid]

    def _update(self, parsed: SmiGpu) -> None:
        uuid = parsed.info["uuid"]
        info = {k: v for k, v in parsed.info.items() if k not in ("state", "state_reason")}
        gpu = self._gpus.get(uuid)
        if gpu is None:
            gpu = self._gpus[uuid] = NvmlGpu(info, None)
        gpu.info, gpu.missing = info, False
        gpu.state, gpu.state_reason = "ok", None
        gpu.unavailable = parsed.unavailable
        gpu.mig_instances = parsed.mig_instances
        gpu.processes = [
            {
                "pid": p["pid"],
                "used_memory_bytes": p["used_memory_bytes"],
                "name": p["name"],
                "user": lookup_process(p["pid"], proc_root=self.proc_root)[1],
            }
            for p in parsed.processes
            if "C" in (p["type"] or "")
        ]
        self._metrics[uuid] = parsed.metrics

    def _change(self, gpu: NvmlGpu, state: str, reason: str, now: datetime | None) -> None:
        if (gpu.state, gpu.state_reason) == (state, reason):
            return
        gpu.state, gpu.state_reason = state, reason
        if not gpu.missing:
            kind = "gpu_lost" if state == "lost" else "gpu_unknown_error"
            self._event(kind, gpu, now, f"{gpu.label()} is {state}: {reason}")

    def _event(self, kind: str, gpu: NvmlGpu, now: datetime | None, message: str) -> None:
        self._events.append(
            make_event(
                kind,
                now or utc_now(),
                gpu_uuid=gpu.uuid,
                pci_bus_id=gpu.info["pci_bus_id"],
                message=message,
            )
        )
