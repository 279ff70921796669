"""Payload schema version 1 of ``POST /api/v1/ingest`` (the contract is ``docs/ingest.md``).

Everything here is a pure function over plain dicts, so batches can be spooled as JSON and
re-sent byte-for-byte apart from ``sent_at``, which is stamped at every send attempt.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, NotRequired, TypedDict

from agents import __version__
from agents.jsonsafe import clean_number, clean_text, dumps

SCHEMA_VERSION = 1

#: Every metric of a sample, in the order of the docs table; units are in the names.
METRIC_KEYS: tuple[str, ...] = (
    "util_gpu_pct",
    "util_mem_pct",
    "util_enc_pct",
    "util_dec_pct",
    "mem_used_bytes",
    "mem_free_bytes",
    "mem_reserved_bytes",
    "power_w",
    "power_limit_w",
    "energy_j",
    "temp_c",
    "mem_temp_c",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "graphics_clock_mhz",
    "fan_pct",
    "pstate",
    "clocks_event_reasons",
    "pcie_tx_bytes_per_s",
    "pcie_rx_bytes_per_s",
    "nvlink_tx_bytes_per_s",
    "nvlink_rx_bytes_per_s",
    "ecc_corrected_volatile_count",
    "ecc_uncorrected_volatile_count",
    "ecc_corrected_aggregate_count",
    "ecc_uncorrected_aggregate_count",
    "pcie_replay_count",
)

#: The sample metrics of docs/ingest.md "More GPU sample metrics" (agents 0.2 and later).
EXTRA_METRIC_KEYS: tuple[str, ...] = (
    "pcie_link_gen",
    "pcie_link_gen_max",
    "pcie_link_width",
    "pcie_link_width_max",
    "retired_pages_sbe_count",
    "retired_pages_dbe_count",
    "retired_pages_pending",
    "remapped_rows_correctable_count",
    "remapped_rows_uncorrectable_count",
    "remapped_rows_pending",
    "remapped_rows_failure",
)
#: Every metric a GPU sample of the current agent carries.
ALL_METRIC_KEYS: tuple[str, ...] = METRIC_KEYS + EXTRA_METRIC_KEYS

GPU_STATES = ("ok", "lost", "unknown_error")
MAX_MESSAGE_CHARS = 4096
_LABEL_KEY = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_HOSTNAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_EVENT_KIND = re.compile(r"^[a-z][a-z0-9_]{0,63}$")

#: A sample: ``gpu_uuid`` (str), ``sampled_at`` (RFC 3339 str) and the :data:`METRIC_KEYS`.
Sample = dict[str, Any]
#: A whole payload as sent (see :func:`build_payload`).
Payload = dict[str, Any]


class GpuInfo(TypedDict):
    """One inventory entry. ``uuid``: ``nvmlDeviceGetUUID``; ``index``: ``nvmlDeviceGetIndex``;
    ``name``: ``nvmlDeviceGetName``; ``pci_bus_id``: ``nvmlDeviceGetPciInfo().busId``;
    ``mem_total_bytes``: ``nvmlDeviceGetMemoryInfo().total``; ``mig_mode``: ``"enabled"``,
    ``"disabled"`` or ``None`` (``nvmlDeviceGetMigMode``); ``state``: ``"ok"``, ``"lost"``
    (``NVML_ERROR_GPU_IS_LOST``) or ``"unknown_error"``; ``state_reason``: free text or ``None``."""

    uuid: str
    index: int
    name: str | None
    pci_bus_id: str | None
    mem_total_bytes: int | None
    mig_mode: str | None
    state: str
    state_reason: str | None


class EventDict(TypedDict):
    """One event occurrence: ``kind`` is ``xid``, ``gpu_lost``, ``thermal_throttle`` …; ``xid`` is
    the Xid code for ``kind == "xid"`` else ``None``; ``occurred_at`` is RFC 3339 UTC."""

    occurred_at: str
    kind: str
    gpu_uuid: str | None
    pci_bus_id: str | None
    xid: int | None
    message: str | None
    #: A synthetic fault of the alert-path self-test (:mod:`agents.self_test`).
    test: NotRequired[bool]


class NodeInfo(TypedDict):
    """What the collector knows of the node's software: ``nvmlSystemGetDriverVersion`` and
    ``nvmlSystemGetCudaDriverVersion`` (as ``"12.8"``); ``None`` when unknown. A simulated
    node also says how many GPUs it has (``expected_gpu_count``; a real node's agent counts
    them on PCI, :mod:`agents.pci_gpus`)."""

    driver_version: str | None
    cuda_version: str | None
    expected_gpu_count: NotRequired[int | None]


def utc_now() -> datetime:
    """Return the current time as a timezone-aware UTC datetime."""
    return datetime.now(UTC)


def format_timestamp(moment: datetime) -> str:
    """Format ``moment`` as RFC 3339 UTC with millisecond precision and a ``Z`` suffix.

    Raises:
        ValueError: ``moment`` is naive (has no timezone); the server refuses such times.
    """
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"naive datetime {moment!r}: timestamps must be timezone-aware")
    text = moment.astimezone(UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def validate_hostname(hostname: str) -> str:
    """Return ``hostname`` if the server will accept it as ``node.hostname``.

    Raises:
        ValueError: empty, longer than 253 characters, or characters outside ``[A-Za-z0-9._-]``;
            for a name with non-ASCII letters (``gpü-01``) the message gives its DNS form
            (IDNA, RFC 3490: ``xn--gp-01-...``) to pass as ``--hostname`` and to create the
            token for.
    """
    if len(hostname) > 253 or not _HOSTNAME.match(hostname):
        hint = ""
        if not hostname.isascii():
            try:
                dns = hostname.encode("idna").decode("ascii")
            except UnicodeError:
                dns = ""
            if dns and _HOSTNAME.match(dns) and len(dns) <= 253:
                hint = f" (its DNS form is {dns!r}: run with --hostname {dns} and a token for it)"
        raise ValueError(
            f"invalid hostname {hostname!r}: use ASCII letters, digits, '.', '_' and '-', "
            "starting and ending with a letter or digit (an internationalised name in its "
            f"punycode form, xn--…){hint}"
        )
    return hostname


def validate_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """Return ``labels`` as a dict after checking them against the server's rules.

    Raises:
        ValueError: more than 64 labels, a key not matching ``[a-z_][a-z0-9_]{0,62}``, or a value
            longer than 256 characters.
    """
    if len(labels) > 64:
        raise ValueError("at most 64 labels")
    for key, value in labels.items():
        if not _LABEL_KEY.match(key):
            raise ValueError(f"invalid label key {key!r}: must match [a-z_][a-z0-9_]{{0,62}}")
        if len(value) > 256:
            raise ValueError(f"label {key!r}: value longer than 256 characters")
    return dict(labels)


def empty_sample(gpu_uuid: str, sampled_at: datetime) -> Sample:
    """Return a sample of ``gpu_uuid`` at ``sampled_at`` with every metric ``None``.

    Raises:
        ValueError: ``sampled_at`` is naive.
    """
    sample: Sample = {"gpu_uuid": gpu_uuid, "sampled_at": format_timestamp(sampled_at)}
    sample.update(dict.fromkeys(METRIC_KEYS))
    return sample


def make_event(
    kind: str,
    occurred_at: datetime,
    *,
    gpu_uuid: str | None = None,
    pci_bus_id: str | None = None,
    xid: int | None = None,
    message: str | None = None,
) -> EventDict:
    """Return one event dict; ``message`` is cut to 4096 characters.

    Raises:
        ValueError: ``kind`` does not match ``[a-z][a-z0-9_]{0,63}`` or ``occurred_at`` is naive.
    """
    if not _EVENT_KIND.match(kind):
        raise ValueError(f"invalid event kind {kind!r}")
    return EventDict(
        occurred_at=format_timestamp(occurred_at),
        kind=kind,
        gpu_uuid=gpu_uuid,
        pci_bus_id=pci_bus_id,
        xid=xid,
        message=None if message is None else clean_text(message)[:MAX_MESSAGE_CHARS],
    )


def build_node(
    hostname: str,
    labels: Mapping[str, str],
    info: NodeInfo,
    *,
    expected_gpu_count: int | None = None,
) -> dict[str, Any]:
    """Return the ``node`` object: hostname, labels, agent version, driver and CUDA versions,
    and the GPUs the node should have (``expected_gpu_count``, else the collector's, left out
    when neither knows)."""
    node: dict[str, Any] = {
        "hostname": hostname,
        "labels": dict(labels),
        "agent_version": __version__,
        "driver_version": _short(info.get("driver_version")),
        "cuda_version": _short(info.get("cuda_version")),
    }
    expected = info.get("expected_gpu_count") if expected_gpu_count is None else expected_gpu_count
    if expected is not None:
        node["expected_gpu_count"] = expected
    return node


def build_payload(
    node: Mapping[str, Any],
    gpus: Iterable[GpuInfo],
    samples: Iterable[Sample],
    events: Iterable[EventDict],
    *,
    batch_id: str | None = None,
    sections: Mapping[str, Any] | None = None,
) -> Payload:
    """Return a payload v1 with a new uuid4 ``batch_id`` (unless given) and ``sent_at`` unset.

    Metric values are cleaned (NaN, ±inf, booleans and non-numbers become ``None``), text fields
    are made valid UTF-8. Stamp ``sent_at`` with :func:`stamp_sent_at` right before each send.
    """
    return {
        "schema_version": SCHEMA_VERSION,
        "batch_id": batch_id or str(uuid.uuid4()),
        "sent_at": None,
        "node": dict(node),
        "gpus": [_clean_gpu(g) for g in gpus],
        "samples": [_clean_sample(s) for s in samples],
        "events": [dict(e) for e in events],
        **clean_sections(sections or {}),
    }


def clean_sections(sections: Mapping[str, Any]) -> dict[str, Any]:
    """The optional node sections (``nvlinks``, ``disks``, ``mounts``, ``nfs_mounts``,
    ``nic_ports``, ``topology``, ``collection``) made JSON-safe: NaN/inf → ``None``, text made
    valid UTF-8. Integers are kept exact (64-bit counters)."""
    return {name: _clean_value(value) for name, value in sections.items()}


def _clean_value(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _clean_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean_value(v) for v in value]
    if isinstance(value, str | bytes):
        return clean_text(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return clean_number(value)
    return clean_text(str(value))


#: The lists of a payload a server may read in the table form (``fields`` + ``rows``).
BULK_LISTS = ("samples", "nvlinks", "disks", "mounts", "nfs_mounts", "nic_ports")


def as_table_form(payload: Payload) -> Payload:
    """``payload`` (a new top-level object) with each bulk list whose entries all have the
    same keys in the table form: ``{"fields": [keys of the first entry], "rows": [[values in
    that order], ...]}``, which a server that lists ``table`` in its answer's ``bulk_forms``
    reads as the same list (a third of the JSON on an HGX node). A list whose entries differ
    in their keys stays a list of objects: a key left out and a ``null`` may differ."""
    out = dict(payload)
    for name in BULK_LISTS:
        entries = payload.get(name)
        if not isinstance(entries, list) or not entries:
            continue
        if not all(isinstance(e, dict) for e in entries):
            continue
        fields = list(entries[0])
        keys = set(fields)
        if not fields or any(e.keys() != keys for e in entries):
            continue
        out[name] = {"fields": fields, "rows": [[e[f] for f in fields] for e in entries]}
    return out


def has_table_form(payload: Payload) -> bool:
    """Whether any bulk list of ``payload`` is in the table form."""
    return any(isinstance(payload.get(name), dict) for name in BULK_LISTS)


def as_objects(payload: Payload) -> Payload:
    """``payload`` (a new top-level object) with each table-form bulk list as the list of
    objects it stands for (the form every server reads)."""
    out = dict(payload)
    for name in BULK_LISTS:
        table = payload.get(name)
        if isinstance(table, dict):
            fields, rows = table.get("fields") or [], table.get("rows") or []
            out[name] = [
                dict(zip(fields, row, strict=True))
                if isinstance(row, list) and len(row) == len(fields)
                else row
                for row in rows
            ]
    return out


def bulk_length(value: Any) -> int:
    """How many entries a bulk list holds, in either form (0 for anything else)."""
    if isinstance(value, dict):
        rows = value.get("rows")
        return len(rows) if isinstance(rows, list) else 0
    return len(value) if isinstance(value, list) else 0


def stamp_sent_at(payload: Payload, now: datetime | None = None) -> Payload:
    """Return a shallow copy of ``payload`` whose ``sent_at`` is ``now`` (default: the clock)."""
    stamped = dict(payload)
    stamped["sent_at"] = format_timestamp(now or utc_now())
    return stamped


def encode_payload(payload: Payload, *, indent: int | None = None) -> bytes:
    """Serialise ``payload`` to UTF-8 JSON bytes; NaN/inf become ``null``, never ``NaN``."""
    return dumps(payload, indent=indent).encode("utf-8")


def _clean_gpu(gpu: GpuInfo) -> dict[str, Any]:
    cleaned: dict[str, Any] = dict(gpu)
    for key, limit in (("name", 256), ("state_reason", 1024), ("pci_bus_id", 32)):
        value = cleaned.get(key)
        if isinstance(value, str | bytes):
            cleaned[key] = clean_text(value)[:limit]
    if cleaned.get("state") not in GPU_STATES:
        cleaned["state"] = "unknown_error"
    return cleaned


def _clean_sample(sample: Sample) -> Sample:
    cleaned: Sample = {"gpu_uuid": sample["gpu_uuid"], "sampled_at": sample["sampled_at"]}
    for key, value in sample.items():
        if key not in cleaned:
            cleaned[key] = clean_number(value)
    return cleaned


def _short(value: str | None) -> str | None:
    return None if value is None else clean_text(value)[:64]
