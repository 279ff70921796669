"""The NVML collector: real GPUs through the choke point :mod:`agents.nvml.session`.

Each round reads every GPU in one pass. A GPU that NVML reports lost (or in an unknown error
state) is marked so, with all metrics ``None``, while the others keep reporting; a call that
hangs costs that GPU its sample for the round (a collection error says which call), never the
agent; a GPU that disappears from enumeration is reported missing. A GPU that cannot even be
opened (lost before the agent started) is reported as an unreadable placeholder with its PCI
address and reason (:mod:`agents.nvml.gpus`), and tried again every round.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime
from typing import Any

from agents.collectors.base import Collector
from agents.nvml.device import (
    GpuReader,
    read_metrics,
    read_mig_instances,
    read_processes,
)
from agents.nvml.events import XidWatcher
from agents.nvml.gpus import NvmlGpu, enumerate_gpus
from agents.nvml.links import NvLinkReader
from agents.nvml.metrics import blank_sample, cuda_version_text
from agents.nvml.metrics import unavailable_reasons as reasons_for
from agents.nvml.session import BINDING, GpuGone, NvmlSession, Unavailable
from agents.nvml.topology import TopologyGpu, gpu_device, gpu_links
from agents.nvml.worker import CallTimedOut
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
_PROBLEMS = (GpuGone, CallTimedOut)
MIG_MODES = {True: "enabled", False: "disabled"}


class NvmlCollector(Collector):
    """Options: ``call_timeout_s`` (deadline of each NVML call, default 5), ``proc_root`` and
    ``sys_root`` (where process names and NUMA nodes are read), ``module`` (the binding's import
    name; tests install a fake).

    Raises:
        CollectorUnavailable: no ``pynvml``, no driver / ``libnvidia-ml.so``, ``nvmlInit`` hung.
    """

    name = "nvml"

    def __init__(
        self,
        *,
        call_timeout_s: float = 5.0,
        proc_root: str = "/proc",
        sys_root: str = "/sys",
        module: str = BINDING,
    ) -> None:
        self.proc_root = proc_root
        self.sys_root = sys_root
        self.session = NvmlSession(timeout_s=call_timeout_s, module=module)
        self.session.open()
        self._lock = threading.Lock()
        self._gpus: dict[str, NvmlGpu] = {}
        self._events: list[EventDict] = []
        self._errors: list[dict[str, str]] = []
        self._node: NodeInfo | None = None
        self._links = NvLinkReader()
        self._xids = XidWatcher(self.session)
        self._count: int | None = None
        self._enumeration_errors: list[str] = []
        self.start_count = 0
        self._refresh(None)
        self.start_count = len(self._gpus)

    # -- Collector interface -------------------------------------------------------------

    def node_info(self) -> NodeInfo:
        """``nvmlSystemGetDriverVersion`` and ``nvmlSystemGetCudaDriverVersion`` (``"12.8"``)."""
        with self._lock:
            if self._node is None or self._node["driver_version"] is None:
                self._node = NodeInfo(
                    driver_version=self._system("nvmlSystemGetDriverVersion"),
                    cuda_version=cuda_version_text(self._system("nvmlSystemGetCudaDriverVersion")),
                )
            return self._node

    def inventory(self) -> list[GpuInfo]:
        """The GPUs with their state, ``unavailable`` reasons, MIG instances and compute
        processes (re-read now for GPUs that answer)."""
        with self._lock:
            entries = []
            for gpu in self._ordered():
                if gpu.state == "ok" and self._readable(gpu):
                    reader = GpuReader(self.session, gpu.handle, gpu.uuid)
                    try:
                        mig = reader.get("mig_mode", "nvmlDeviceGetMigMode")
                        enabled = mig is not None and mig[0] == 1
                        gpu.info["mig_mode"] = None if mig is None else MIG_MODES[enabled]
                        total = gpu.info.get("mem_total_bytes")
                        gpu.mig_instances = (
                            read_mig_instances(reader, mem_total_bytes=total) if enabled else None
                        )
                        gpu.processes = read_processes(
                            reader, self.proc_root, mem_total_bytes=total
                        )
                    except _PROBLEMS as exc:
                        self._problem(gpu, exc, None)
                entries.append(gpu.entry())
            return entries

    def sample(self, now: datetime) -> list[Sample]:
        """One sample per GPU dated ``now``: full metrics, all-``None`` for a lost or missing
        GPU, none at all for a GPU whose call timed out this round."""
        with self._lock:
            self._refresh(now)
            at_s = time.monotonic()
            samples = []
            for gpu in self._ordered():
                sample = self._sample_gpu(gpu, now, at_s)
                if sample is not None:
                    samples.append(sample)
            self._poll_xids(now)
            return samples

    def drain_events(self) -> list[EventDict]:
        """The ``xid``, ``gpu_lost``, ``gpu_unknown_error`` and ``gpu_missing`` events since the
        last call."""
        with self._lock:
            events, self._events = self._events, []
            return events

    def urgent_pending(self) -> bool:
        """Poll NVML's Xid event set (``nvmlEventSetWait``, 0 ms) between rounds, keeping what
        it holds as events dated now; whether an event waits for the next round."""
        with self._lock:
            self._poll_xids(utc_now())
            return bool(self._events)

    def nvlinks(self, now: datetime) -> list[dict[str, Any]]:
        """One entry per GPU and NVLink (state, peer, counters, throughput)."""
        with self._lock:
            at_s, stamp, entries = time.monotonic(), format_timestamp(now), []
            for gpu in self._ordered():
                if not self._readable(gpu):
                    continue
                try:
                    readings = self._links.read(GpuReader(self.session, gpu.handle, gpu.uuid), at_s)
                except _PROBLEMS as exc:
                    self._problem(gpu, exc, now)
                    continue
                entries += [r.entry(gpu.uuid, stamp) for r in readings]
            return entries

    def topology(self, now: datetime) -> dict[str, Any] | None:
        """GPU devices and GPU↔GPU links (``partial`` with ``errors`` when a GPU fails)."""
        with self._lock:
            errors: list[str] = list(self._enumeration_errors)
            found: list[TopologyGpu] = []
            devices: list[dict[str, Any]] = []
            for gpu in self._ordered():
                if not self._readable(gpu):
                    errors.append(f"{gpu.label()}: {gpu.state_reason or 'not readable'}")
                    continue
                reader = GpuReader(self.session, gpu.handle, gpu.uuid)
                item = TopologyGpu(reader, gpu.info["index"], gpu.uuid, gpu.info["pci_bus_id"])
                try:
                    item.links = self._links.read(reader, time.monotonic(), counters=False)
                    devices.append(gpu_device(item, sys_root=self.sys_root))
                except _PROBLEMS as exc:
                    errors.append(f"{gpu.label()}: {exc}")
                    self._problem(gpu, exc, now)
                    continue
                found.append(item)
            if not devices and not errors:
                return None
            return {
                "collected_at": format_timestamp(now),
                "source": "nvml",
                "partial": bool(errors),
                "errors": errors,
                "devices": devices,
                "links": gpu_links(found, errors),
            }

    def collection_errors(self) -> list[dict[str, str]]:
        """Hung calls, failed enumerations and event-set trouble since the last call."""
        with self._lock:
            errors, self._errors = self._errors, []
            errors += [{"source": "nvml", "message": m} for m in self._xids.errors]
            self._xids.errors = []
            return errors

    def close(self) -> None:
        """Free the event set and ``nvmlShutdown``."""
        with self._lock:
            self._xids.close()
            self.session.close()

    # -- internals -----------------------------------------------------------------------

    def _ordered(self) -> list[NvmlGpu]:
        return sorted(self._gpus.values(), key=lambda g: (g.missing, g.info["index"]))

    def _readable(self, gpu: NvmlGpu) -> bool:
        return not gpu.missing and not gpu.placeholder and self.session.hung_call(gpu.uuid) is None

    def _error(self, message: str) -> None:
        self._errors.append({"source": "nvml", "message": message[:1024]})

    def _system(self, function: str) -> Any:
        try:
            return self.session.call(function)
        except (Unavailable, *_PROBLEMS) as exc:
            log.info("%s: %s", function, exc)
            return None

    def _sample_gpu(self, gpu: NvmlGpu, now: datetime, at_s: float) -> Sample | None:
        if gpu.missing or gpu.placeholder:
            return blank_sample(gpu.uuid, now)
        hung = self.session.hung_call(gpu.uuid)
        if hung is not None:
            self._error(f"{gpu.label()}: {hung} still hung from an earlier round; no sample")
            return None
        reader = GpuReader(self.session, gpu.handle, gpu.uuid)
        try:
            metrics = read_metrics(
                reader, gpu.rates, at_s, mem_total_bytes=gpu.info.get("mem_total_bytes")
            )
        except _PROBLEMS as exc:
            self._problem(gpu, exc, now)
            return blank_sample(gpu.uuid, now) if isinstance(exc, GpuGone) else None
        if gpu.state != "ok":
            log.warning("%s answers again after %s", gpu.label(), gpu.state_reason)
            gpu.state, gpu.state_reason = "ok", None
        gpu.unavailable = reasons_for(metrics, reader.reasons)
        sample = blank_sample(gpu.uuid, now)
        sample.update(metrics)
        return sample

    def _problem(self, gpu: NvmlGpu, exc: Exception, now: datetime | None) -> None:
        """A GPU-level failure: a timeout becomes a collection error; a gone GPU changes state
        (one event per change of state; the first reason is kept)."""
        gpu.rates.clear()
        self._links.forget(gpu.uuid)
        if not isinstance(exc, GpuGone):
            self._error(f"{gpu.label()}: {exc}")
            return
        if gpu.state == exc.state:
            return
        log.error("%s: %s", gpu.label(), exc.reason)
        gpu.state, gpu.state_reason = exc.state, exc.reason
        kind = "gpu_lost" if exc.state == "lost" else "gpu_unknown_error"
        self._event(kind, gpu, now, f"{gpu.label()} is {exc.state}: {exc.reason}")

    def _event(
        self, kind: str, gpu: NvmlGpu, now: datetime | None, message: str, xid: int | None = None
    ) -> None:
        self._events.append(
            make_event(
                kind,
                now or utc_now(),
                gpu_uuid=gpu.uuid,
                pci_bus_id=gpu.info.get("pci_bus_id"),
                xid=xid,
                message=message,
            )
        )

    def _refresh(self, now: datetime | None) -> None:
        """Re-enumerate when ``nvmlDeviceGetCount`` changed or a GPU that could not be opened
        opens now: GPUs known before but not found now are marked missing, with a
        ``gpu_missing`` event; GPUs that cannot be opened are marked lost or in unknown error
        (one event per change of state)."""
        try:
            count = int(self.session.call("nvmlDeviceGetCount"))
        except (Unavailable, *_PROBLEMS) as exc:
            self._error(f"nvmlDeviceGetCount: {exc}")
            return
        if count == self._count and not self._opens_again():
            return
        self._count = count
        found = enumerate_gpus(self.session, count, self._gpus, sys_root=self.sys_root)
        self._enumeration_errors = [m for m in found.errors if "cannot be enumerated" in m]
        for message in found.errors:
            self._error(message)
        for gpu in found.seen:
            self._links.forget(gpu.uuid)
            self._xids.register(gpu.handle, gpu.uuid)
        for gpu in found.missing:
            message = f"NVML sees {count} GPU(s), {self.start_count} at start"
            self._event("gpu_missing", gpu, now, f"{gpu.label()} is missing: {message}")
        for gpu, gone in found.gone:
            self._problem(gpu, gone, now)

    def _opens_again(self) -> bool:
        """Whether a GPU reported unreadable gets a handle now (a reset brought it back)."""
        for gpu in self._gpus.values():
            if not gpu.placeholder:
                continue
            try:
                self.session.call("nvmlDeviceGetHandleByIndex", gpu.info["index"])
            except (Unavailable, *_PROBLEMS):
                continue
            return True
        return False

    def _poll_xids(self, now: datetime) -> None:
        for occurrence in self._xids.poll():
            try:
                uuid = self.session.call("nvmlDeviceGetUUID", occurrence.handle)
            except (Unavailable, *_PROBLEMS):
                uuid = None
            gpu = self._gpus.get(uuid or "")
            if gpu is None:
                self._events.append(
                    make_event("xid", now, xid=occurrence.xid, message=f"NVML Xid {occurrence.xid}")
                )
                continue
            message = f"NVML Xid {occurrence.xid} on {gpu.label()}"
            self._event("xid", gpu, now, message, xid=occurrence.xid)
