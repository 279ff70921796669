"""Values and entries a batch cannot hold, left out one at a time (issue 14).

A GPU's total memory of 2**64-1 (NVML's "not available" as an unsigned 64-bit), a PCI bus id in
an odd form, an NVLink numbered 300, a power reading sent as the text ``"12,5"``, an Xid event
whose code is garbage: each of these used to refuse the whole batch with 422, so the node stayed
"never seen" and its healthy GPUs' samples were lost. :func:`repair` takes the validation errors
of a batch document and, where every one of them lies in a list entry or section that may lose
a value, mends a copy of the document instead:

* a value that may be absent is removed (so it is null, or its default: a GPU ``state`` reads
  ``ok``, an NVLink ``state`` ``unknown``) and counted in ``nulled_values`` as
  ``<list>.<field>``; for a GPU's own fields the value sent is also kept by field, for the
  GPU's ``implausible_inventory``, so its page can say why the value is missing;
* a GPU sample metric that is not a number is replaced by NaN, so the sample's implausible-value
  rule nulls it: it is counted in ``nulled_values`` under the metric's name and marked on the
  GPU's page like any implausible reading;
* a label or ``unavailable`` key is removed and counted as ``node.labels`` /
  ``gpus.unavailable``;
* an entry that cannot be told apart without the bad value (a GPU without a usable UUID, an
  NVLink without its link number or time, a process without its PID, a sample without its GPU
  or time …) is left out and counted in ``sections_rejected`` as ``<list>.invalid`` (a GPU
  listed twice: ``gpus.duplicate_uuid``, the first entry kept; a sample: in the answer's
  ``rejected_by_reason`` as ``invalid``); a topology with any bad value outside its devices and
  links is left out whole (``topology.invalid``). A GPU whose index is unreadable takes its
  position in the list.
* an event with any bad value is left out whole (``events_rejected`` ``invalid``): an event is
  one occurrence, and half of one could page for the wrong GPU, or page for real where the
  agent's self-test flag was unreadable.

Every error mended is listed (the first :data:`MAX_LISTED`) with its path as sent and pydantic's
error type, and counted by ``<list>.<type>`` (:attr:`Salvage.by_reason`).

What makes the batch unreadable as a whole is still refused with the errors pydantic gives: a
wrong type at the top level (``samples`` that is not a list …), no usable hostname, batch id,
schema version or ``sent_at``, bad labels as a whole, and a list over its size limit.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from app.ingest.gpu_schemas import MigInstanceIn, ProcessIn
from app.ingest.schemas import (
    CollectionErrorIn,
    CollectionIn,
    EventIn,
    GpuIn,
    NodeIn,
    SampleIn,
)
from app.nics.schemas import NicPortIn
from app.nvlinks.schemas import NvlinkIn
from app.storage.schemas import DiskIn, MountIn, NfsMountIn
from app.topology.schemas import TopologyDeviceIn, TopologyIn, TopologyLinkIn

#: Longest text of a value sent that a GPU keeps in ``implausible_inventory``.
MAX_SENT_CHARS = 64
#: Rounds of validate-and-mend before giving up (a model validator speaks only once the fields
#: it reads are valid: two topology devices with one id, a GPU listed twice).
MAX_ROUNDS = 4
#: Values and entries left out that the answer lists one by one (all are counted).
MAX_LISTED = 100

Path = tuple[str | int, ...]
Action = Literal["nulled", "entry_left_out"]


@dataclass(frozen=True)
class _Place:
    """Where in the document values may be mended.

    Attributes:
        pattern: the path to it; ``"*"`` stands for any list index.
        kind: ``entry`` (an item of a list: left out when it cannot be mended), ``object`` (a
            section's body) or ``map`` (free keys, each removed alone).
        label: the name it is counted under.
        model: the pydantic model of an entry or object.
        keep: fields whose errors refuse the batch.
        whole: left out whole for any error in its own fields (the topology, an event).
        metrics: a bad optional value becomes NaN instead of going (a GPU sample's metrics).
    """

    pattern: tuple[str, ...]
    kind: Literal["entry", "object", "map"]
    label: str
    model: type[BaseModel] | None = None
    keep: frozenset[str] = frozenset()
    whole: bool = False
    metrics: bool = False


_SECTIONS: dict[str, type[BaseModel]] = {
    "nvlinks": NvlinkIn,
    "disks": DiskIn,
    "mounts": MountIn,
    "nfs_mounts": NfsMountIn,
    "nic_ports": NicPortIn,
}
_PLACES: tuple[_Place, ...] = (
    _Place(("node",), "object", "node", NodeIn, keep=frozenset({"hostname", "labels"})),
    _Place(("node", "labels"), "map", "node.labels"),
    _Place(("gpus", "*"), "entry", "gpus", GpuIn),
    _Place(("gpus", "*", "unavailable"), "map", "gpus.unavailable"),
    _Place(("gpus", "*", "mig_instances", "*"), "entry", "mig_instances", MigInstanceIn),
    _Place(("gpus", "*", "processes", "*"), "entry", "processes", ProcessIn),
    _Place(("samples", "*"), "entry", "samples", SampleIn, metrics=True),
    _Place(("events", "*"), "entry", "events", EventIn, whole=True),
    _Place(("collection",), "object", "collection", CollectionIn),
    _Place(("collection", "errors", "*"), "entry", "collection.errors", CollectionErrorIn),
    *(_Place((name, "*"), "entry", name, model) for name, model in _SECTIONS.items()),
    _Place(("topology",), "object", "topology", TopologyIn, whole=True),
    _Place(("topology", "devices", "*"), "entry", "topology.devices", TopologyDeviceIn),
    _Place(("topology", "links", "*"), "entry", "topology.links", TopologyLinkIn),
)


@dataclass
class Salvage:
    """What :func:`repair` left out of a batch.

    Attributes:
        nulled: values removed, by ``<list>.<field>`` (added to ``nulled_values``).
        rejected: entries left out, by ``<list>.<reason>`` (added to ``sections_rejected``).
        gpu_values: GPU UUID → field → the value sent, as JSON text cut to
            :data:`MAX_SENT_CHARS` characters.
        samples: the samples left out, as (index in ``samples`` as sent, its ``gpu_uuid``
            where that is text, else ``""``); counted in the answer's ``rejected_by_reason``
            as ``invalid``.
        events: how many events were left out (``events_rejected`` ``invalid``).
        listed: the first :data:`MAX_LISTED` errors mended: (path as sent, pydantic's error
            type, what was done).
        by_reason: every error mended, by ``<list>.<error type>``.
    """

    nulled: Counter[str] = field(default_factory=Counter)
    rejected: Counter[str] = field(default_factory=Counter)
    gpu_values: dict[str, dict[str, str]] = field(default_factory=dict)
    samples: list[tuple[int, str]] = field(default_factory=list)
    events: int = 0
    listed: list[tuple[Path, str, Action]] = field(default_factory=list)
    by_reason: Counter[str] = field(default_factory=Counter)


def repair(
    document: dict[str, Any], errors: Sequence[ErrorDetails], salvage: Salvage
) -> dict[str, Any] | None:
    """A copy of ``document`` without the values ``errors`` name, recording in ``salvage`` what
    was left out; ``None`` where an error lies where nothing may be left out (the batch is
    refused). ``document`` itself is never changed: its digest identifies the batch.

    Paths are those of ``document``: samples and events have no model validator, so all their
    errors come in the first round, on the batch as sent; a later round (two GPUs with one UUID,
    a topology's repeated device id) may name an inventory entry by its place after the first
    round's removals.
    """
    edit = _Edit(document)
    for err in errors:
        if not edit.plan(tuple(err["loc"]), err["type"]):
            return None
    edit.apply(salvage)
    return edit.root


class _Edit:
    """The changes one round of errors asks for, applied to copies of the containers on their
    paths (copy on write)."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.original = document
        self.root: dict[str, Any] = dict(document)
        self._copied: set[int] = {id(self.root)}
        self.removals: dict[Path, tuple[_Place, str]] = {}  # path of a value → where, name
        self.drops: dict[Path, str] = {}  # path of an entry or object → reason
        self.positions: dict[Path, int] = {}  # path of a GPU entry → the index it takes
        self.duplicates = False
        self.errors: list[tuple[Path, str, str, Path]] = []  # loc, type, label, path changed

    def plan(self, loc: Path, kind: str) -> bool:
        """Note what mends the error at ``loc``; False if it cannot be mended."""
        if kind == "too_long":  # a list over its size limit: a batch problem, not a value's
            return False
        if loc == ("gpus",) and kind == "value_error":
            self.duplicates = True
            return True
        found = _place_of(loc)
        if found is None:
            return False
        place, at, rest = found
        if place.kind == "map":
            self.removals[(*at, rest[0])] = (place, "")
            return self._noted(loc, kind, place, (*at, rest[0]))
        if not rest:  # the entry or object itself
            if place.kind == "entry" or (place.whole and kind == "value_error"):
                self.drops[at] = "invalid"
                return self._noted(loc, kind, place, at)
            return False
        name = str(rest[0])
        assert place.model is not None
        spec = place.model.model_fields.get(name)
        if spec is None or name in place.keep:
            return False
        if place.whole:
            self.drops[at] = "invalid"
            return self._noted(loc, kind, place, at)
        if place.label == "gpus" and name == "index":
            self.positions[at] = int(at[-1])
        elif not spec.is_required():
            self.removals[(*at, name)] = (place, name)
        elif place.kind == "entry":
            self.drops[at] = "invalid"
            return self._noted(loc, kind, place, at)
        else:
            return False
        return self._noted(loc, kind, place, (*at, name))

    def _noted(self, loc: Path, kind: str, place: _Place, changed: Path) -> bool:
        self.errors.append((loc, kind, place.label, changed))
        return True

    def apply(self, salvage: Salvage) -> None:
        """Make the planned changes on the copy and count them into ``salvage``."""
        dropped = set(self.drops)
        for loc, kind, label, changed in self.errors:
            salvage.by_reason[f"{label}.{kind}"] += 1
            if len(salvage.listed) < MAX_LISTED:
                gone = _within(changed, dropped)
                salvage.listed.append((loc, kind, "entry_left_out" if gone else "nulled"))
        for path, (place, name) in self.removals.items():
            if _within(path, dropped):
                continue
            container = self._writable(path[:-1])
            if place.metrics:
                # Not a number: NaN, which the sample's plausibility rule nulls and counts.
                container[path[-1]] = math.nan
                continue
            sent = container.pop(path[-1], None)
            salvage.nulled[f"{place.label}.{name}" if name else place.label] += 1
            if place.label == "gpus":
                self._keep_sent(path[:-1], name, sent, salvage)
        for path, position in self.positions.items():
            if _within(path, dropped):
                continue
            entry = self._writable(path)
            sent = entry.get("index")
            entry["index"] = position
            salvage.nulled["gpus.index"] += 1
            self._keep_sent(path, "index", sent, salvage)
        self._drop(dropped, salvage)
        if self.duplicates:
            self._drop_repeated_gpus(salvage)

    def _drop(self, dropped: set[Path], salvage: Salvage) -> None:
        """Leave out the entries and objects of ``dropped`` (not those inside another one),
        each list rebuilt once: a batch of 100,000 samples without a usable GPU id must not
        cost a list deletion each."""
        by_list: dict[Path, set[int]] = defaultdict(set)
        for path in self.drops:
            if _within(path, dropped - {path}):
                continue
            label = _label_of(path)
            if label == "samples":
                uuid = _at(self.original, path)
                uuid = uuid.get("gpu_uuid") if isinstance(uuid, dict) else None
                salvage.samples.append((int(path[-1]), uuid if isinstance(uuid, str) else ""))
            elif label == "events":
                salvage.events += 1
            else:
                salvage.rejected[f"{label}.{self.drops[path]}"] += 1
            if isinstance(path[-1], int):
                by_list[path[:-1]].add(path[-1])
            else:
                self._writable(path[:-1])[path[-1]] = None
        # Deepest first: a list inside an entry of another is rebuilt before that one.
        for parent in sorted(by_list, key=len, reverse=True):
            gone = by_list[parent]
            entries: list[Any] = self._writable(parent)
            entries[:] = [entry for i, entry in enumerate(entries) if i not in gone]
        salvage.samples.sort()

    def _drop_repeated_gpus(self, salvage: Salvage) -> None:
        gpus: list[Any] = self._writable(("gpus",))
        seen: set[Any] = set()
        kept = []
        for index, entry in enumerate(gpus):
            uuid = entry.get("uuid") if isinstance(entry, dict) else None
            if uuid is not None and uuid in seen:
                salvage.rejected["gpus.duplicate_uuid"] += 1
                salvage.by_reason["gpus.duplicate_uuid"] += 1
                if len(salvage.listed) < MAX_LISTED:
                    salvage.listed.append((("gpus", index), "duplicate_uuid", "entry_left_out"))
                continue
            seen.add(uuid)
            kept.append(entry)
        gpus[:] = kept

    def _keep_sent(self, gpu_path: Path, name: str, sent: Any, salvage: Salvage) -> None:
        uuid = _at(self.original, gpu_path).get("uuid")
        if isinstance(uuid, str) and name:
            text = json.dumps(sent, ensure_ascii=False, default=str)[:MAX_SENT_CHARS]
            salvage.gpu_values.setdefault(uuid, {})[name] = text

    def _writable(self, path: Path) -> Any:
        """The container at ``path`` in :attr:`root`, copied (with those above it) on first
        write."""
        node: Any = self.root
        for step in path:
            child = node[step]
            if id(child) not in self._copied:
                child = list(child) if isinstance(child, list) else dict(child)
                node[step] = child
                self._copied.add(id(child))
            node = child
        return node


def _place_of(loc: Path) -> tuple[_Place, Path, Path] | None:
    """The most specific place holding ``loc``: the place, the path to it (indices filled in)
    and the rest of ``loc`` below it."""
    best: tuple[_Place, Path, Path] | None = None
    for place in _PLACES:
        size = len(place.pattern)
        if len(loc) < size or (place.kind == "map" and len(loc) == size):
            continue
        matches = all(
            step == want or (want == "*" and isinstance(step, int))
            for step, want in zip(loc, place.pattern, strict=False)
        )
        if matches and (best is None or size > len(best[1])):
            best = (place, loc[:size], loc[size:])
    return best


def _label_of(path: Path) -> str:
    found = _place_of(path)
    return found[0].label if found else str(path[0])


def _within(path: Path, dropped: set[Path]) -> bool:
    """Whether ``path`` lies in (or is) an entry that is left out (a look-up per step of the
    path, not a scan of ``dropped``)."""
    return any(path[:size] in dropped for size in range(1, len(path) + 1))


def _at(document: Any, path: Path) -> Any:
    for step in path:
        document = document[step]
    return document
