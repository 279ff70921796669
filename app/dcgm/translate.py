"""One dcgm-exporter scrape as the inventory, samples and Xid readings of an ingest batch.

Labels read (dcgm-exporter's, ``pkg/dcgmexporter``): ``UUID`` (the GPU), ``gpu`` (its index),
``modelName``, ``pci_bus_id``, ``Hostname`` (``hostname`` in some deployments),
``DCGM_FI_DRIVER_VERSION``, ``GPU_I_ID`` / ``GPU_I_PROFILE`` (a MIG GPU instance of the GPU) and
the Kubernetes ``pod`` / ``namespace`` / ``container`` labels. Every series either fills a
field (a blank sentinel fills it with null) or is skipped with a reason; nothing in a scrape
fails the node.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal
from urllib.parse import urlsplit

from app.dcgm import fields
from app.dcgm.blanks import blank_reason
from app.dcgm.parse import Parsed, Series
from app.dcgm.targets import Target

#: A Hostname label that can name a node (app.fleet.service.HOSTNAME_RE): another is ignored.
_HOSTNAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$")
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ufeff]")
_MAX_SKIPPED = 200
_MAX_INT = 2**31 - 1
_XIDS = frozenset({fields.XID_LAST, *fields.XID_COUNTS})


@dataclass(frozen=True)
class XidReading:
    """An Xid series of one GPU (or one of its MIG instances).

    ``kind`` ``last``: ``DCGM_FI_DEV_XID_ERRORS``, the last Xid (``xid``; 0 for none).
    ``kind`` ``count``: how many Xid ``xid`` occurred within the window (``count``,
    ``window_ms``).
    """

    gpu_uuid: str
    pci_bus_id: str | None
    gpu_instance_id: int | None
    kind: Literal["last", "count"]
    xid: int
    count: int = 0
    window_ms: int | None = None

    @property
    def key(self) -> str:
        """Its identity across scrapes: GPU, instance and (for a count) the Xid."""
        instance = "" if self.gpu_instance_id is None else f"/{self.gpu_instance_id}"
        suffix = f"#{self.xid}" if self.kind == "count" else ""
        return f"{self.gpu_uuid}{instance}{suffix}"


@dataclass
class _Gpu:
    uuid: str
    index: int
    name: str | None = None
    pci_bus_id: str | None = None
    mem_total_bytes: int | None = None
    values: dict[str, tuple[int, Any, str]] = field(default_factory=dict)
    instances: dict[int, dict[str, Any]] = field(default_factory=dict)


@dataclass
class Translation:
    """A scrape read into Fleetwatch's model.

    Attributes:
        hostname: the node's name.
        gpus, samples: ``gpus[]`` and ``samples[]`` entries of an ingest batch.
        xids: the Xid series, for :mod:`app.dcgm.xid` to turn into events.
        workloads: ``{gpu_uuid, gpu_index, gpu_instance_id, namespace, pod, container}`` of
            each pod the series name.
        skipped: ``{series, reason, count}``: series whose value is not stored, grouped.
        blanks: ``{series, reason, count}``: values stored as null because DCGM sent a blank.
        series_total, series_stored: series read, and those whose value (or null) is stored.
    """

    hostname: str
    node_labels: dict[str, str]
    driver_version: str | None
    gpus: list[dict[str, Any]]
    samples: list[dict[str, Any]]
    xids: list[XidReading]
    workloads: list[dict[str, Any]]
    skipped: list[dict[str, Any]]
    blanks: list[dict[str, Any]]
    series_total: int
    series_stored: int


class _Reader:
    def __init__(self, target: Target, hostname: str) -> None:
        self.target = target
        self.hostname = hostname
        self.gpus: dict[str, _Gpu] = {}
        self.xids: list[XidReading] = []
        self.workloads: dict[tuple[Any, ...], dict[str, Any]] = {}
        self.skipped: Counter[tuple[str, str]] = Counter()
        self.blanks: Counter[tuple[str, str]] = Counter()
        self.stored = 0

    def skip(self, series: Series | str, reason: str) -> None:
        name = series if isinstance(series, str) else series.name
        self.skipped[(name, reason)] += 1

    def read(self, series: Series) -> None:
        if not series.name.startswith(("DCGM_FI_", "DCGM_EXP_")):
            # Another exporter's series on the same page: not a GPU's, whatever its labels.
            self.skip(series, fields.UNKNOWN)
            return
        host = _host_label(series.labels)
        if (
            host is not None
            and self.target.hostname is None
            and _HOSTNAME.match(host)
            and host.lower() != self.hostname.lower()
        ):
            self.skip(series, f"its Hostname {host!r} is not this endpoint's node")
            return
        uuid = series.labels.get("UUID", "")
        if not uuid or len(uuid) > 96 or _CONTROLS.search(uuid):
            self.skip(series, "no UUID label naming a GPU")
            return
        index = _whole(series.labels.get("gpu"))
        if index is None or index > 1023:
            self.skip(series, "its gpu label is not a GPU index 0-1023")
            return
        instance: int | None = None
        if "GPU_I_ID" in series.labels:
            instance = _whole(series.labels["GPU_I_ID"])
            if instance is None or instance > 1023:
                self.skip(series, "its GPU_I_ID label is not a MIG instance id 0-1023")
                return
        gpu = self.gpus.get(uuid)
        if gpu is None:
            gpu = self.gpus[uuid] = _Gpu(uuid=uuid, index=index)
        gpu.name = gpu.name or _text(series.labels.get("modelName"), 256)
        bus = series.labels.get("pci_bus_id")
        if gpu.pci_bus_id is None and bus and len(bus) <= 32 and not _CONTROLS.search(bus):
            gpu.pci_bus_id = bus
        if instance is not None:
            entry = gpu.instances.setdefault(instance, {"gpu_instance_id": instance})
            profile = _text(series.labels.get("GPU_I_PROFILE"), 64)
            if profile:
                entry.setdefault("profile", profile)
        self._workload(series, gpu, instance)
        self._value(series, gpu, instance)

    def _workload(self, series: Series, gpu: _Gpu, instance: int | None) -> None:
        labels = series.labels
        # dcgm-exporter's --use-old-namespace writes pod_name, pod_namespace, container_name.
        pod = labels.get("pod") or labels.get("pod_name")
        if not pod:
            return
        namespace = labels.get("namespace") or labels.get("pod_namespace") or None
        container = labels.get("container") or labels.get("container_name") or None
        key = (gpu.uuid, instance, namespace, pod, container)
        self.workloads.setdefault(
            key,
            {
                "gpu_uuid": gpu.uuid,
                "gpu_index": gpu.index,
                "gpu_instance_id": instance,
                "namespace": _text(namespace, 256),
                "pod": _text(pod, 256),
                "container": _text(container, 256),
            },
        )

    def _value(self, series: Series, gpu: _Gpu, instance: int | None) -> None:
        name = series.name
        sample_field = fields.SAMPLE_FIELDS_BY_NAME.get(name)
        if sample_field is not None:
            self._sample_value(series, sample_field, gpu, instance)
        elif name == fields.FB_TOTAL:
            self._fb_total(series, gpu, instance)
        elif name in _XIDS:
            self._xid(series, gpu, instance)
        else:
            # Not stored, though its labels list the GPU, its MIG instance and its pod.
            self.skip(series, fields.NOT_TAKEN.get(name, fields.UNKNOWN))

    def _blank(self, series: Series, kind: fields.Kind) -> bool:
        reason = blank_reason(series.value, kind)
        if reason is None:
            return False
        self.blanks[(series.name, reason)] += 1
        return True

    def _sample_value(
        self, series: Series, sample_field: fields.SampleField, gpu: _Gpu, instance: int | None
    ) -> None:
        if instance is not None:
            if sample_field.metric == "mem_used_bytes":
                entry = gpu.instances[instance]
                value = None if self._blank(series, "int64") else _scaled(series, sample_field)
                entry["mem_used_bytes"] = value
                self.stored += 1
            else:
                self.skip(series, fields.MIG_VALUE)
            return
        value = None if self._blank(series, sample_field.kind) else _scaled(series, sample_field)
        held = gpu.values.get(sample_field.metric)
        if held is not None:
            rank, before, name = held
            if rank < sample_field.rank:
                self.skip(series, f"{name} is served and taken instead")
                return
            if rank == sample_field.rank:
                if before != value:
                    self.skip(series, "another value for this GPU in the same scrape (first kept)")
                else:  # the same reading again (one series per pod sharing the GPU)
                    self.stored += 1
                return
            # A better-ranked field came after its stand-in: the stand-in is skipped after all.
            self.skipped[(name, f"{series.name} is served and taken instead")] += 1
            self.stored -= 1
        gpu.values[sample_field.metric] = (sample_field.rank, value, series.name)
        self.stored += 1

    def _fb_total(self, series: Series, gpu: _Gpu, instance: int | None) -> None:
        value = None if self._blank(series, "int64") else _whole(series.value)
        total = value * fields.MIB if value is not None else None
        if instance is not None:
            gpu.instances[instance]["mem_total_bytes"] = total
        else:
            gpu.mem_total_bytes = total
        self.stored += 1

    def _xid(self, series: Series, gpu: _Gpu, instance: int | None) -> None:
        if self._blank(series, "int64"):
            return
        value = _whole(series.value)
        if series.name == fields.XID_LAST:
            if value is None or value > _MAX_INT:
                self.skip(series, "its value is not an Xid number")
                return
            reading = XidReading(gpu.uuid, gpu.pci_bus_id, instance, "last", value)
        else:
            xid = _whole(series.labels.get("xid"))
            if xid is None or xid > _MAX_INT or value is None:
                self.skip(series, "no xid label with an Xid number, or a count that is not whole")
                return
            window = _whole(series.labels.get("window_size_in_ms"))
            reading = XidReading(gpu.uuid, gpu.pci_bus_id, instance, "count", xid, value, window)
        self.xids.append(reading)
        self.stored += 1


def translate(parsed: Parsed, *, target: Target, scraped_at: datetime) -> Translation:
    """The node, GPUs, samples (one per GPU, at ``scraped_at``) and Xid readings of a scrape.

    The node's name: the target's ``hostname`` where configured, else the ``Hostname`` (or
    ``hostname``) label most series carry, else the endpoint URL's host. Series of another
    host are skipped.
    """
    hostname = target.hostname or _majority_host(parsed.series) or _url_host(target.url)
    reader = _Reader(target, hostname)
    for series in parsed.series:
        reader.read(series)
    for number, why in parsed.bad_lines:
        reader.skip(f"line {number}", why)
    when = scraped_at.isoformat()
    gpus: list[dict[str, Any]] = []
    samples: list[dict[str, Any]] = []
    for gpu in sorted(reader.gpus.values(), key=lambda g: (g.index, g.uuid)):
        instances = [gpu.instances[i] for i in sorted(gpu.instances)]
        gpus.append(
            {
                "uuid": gpu.uuid,
                "index": gpu.index,
                "name": gpu.name,
                "pci_bus_id": gpu.pci_bus_id,
                "mem_total_bytes": gpu.mem_total_bytes,
                "mig_mode": "enabled" if instances else None,
                "state": "ok",
                "mig_instances": instances or None,
            }
        )
        sample: dict[str, Any] = {"gpu_uuid": gpu.uuid, "sampled_at": when}
        sample.update({metric: value for metric, (_, value, _) in gpu.values.items()})
        samples.append(sample)
    drivers = Counter(
        s.labels["DCGM_FI_DRIVER_VERSION"]
        for s in parsed.series
        if "DCGM_FI_DRIVER_VERSION" in s.labels
    )
    return Translation(
        hostname=hostname,
        node_labels=dict(target.labels),
        driver_version=_text(drivers.most_common(1)[0][0], 64) if drivers else None,
        gpus=gpus,
        samples=samples,
        xids=reader.xids,
        workloads=list(reader.workloads.values()),
        skipped=_grouped(reader.skipped),
        blanks=_grouped(reader.blanks),
        series_total=len(parsed.series) + len(parsed.bad_lines),
        series_stored=reader.stored,
    )


def _grouped(counts: Counter[tuple[str, str]]) -> list[dict[str, Any]]:
    return [
        {"series": name, "reason": reason, "count": count}
        for (name, reason), count in sorted(counts.items())[:_MAX_SKIPPED]
    ]


def _scaled(series: Series, sample_field: fields.SampleField) -> Any:
    value = series.value * sample_field.factor
    if sample_field.divisor != 1:
        return value / sample_field.divisor
    return value


def _whole(value: Any) -> int | None:
    """A non-negative whole number from a label text or a sample value, else None."""
    if isinstance(value, str):
        return int(value) if value.isascii() and value.isdigit() else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None
    return int(value) if value >= 0 else None


def _text(value: str | None, limit: int) -> str | None:
    if not value:
        return None
    return _CONTROLS.sub("\ufffd", value)[:limit]


def _host_label(labels: dict[str, str]) -> str | None:
    return labels.get("Hostname") or labels.get("hostname") or None


def _majority_host(series: list[Series]) -> str | None:
    hosts = Counter(h for s in series if (h := _host_label(s.labels)) and _HOSTNAME.match(h))
    return hosts.most_common(1)[0][0] if hosts else None


def _url_host(url: str) -> str:
    return urlsplit(url).hostname or "dcgm-exporter"
