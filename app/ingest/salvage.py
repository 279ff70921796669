"""Inventory and node-section values a batch cannot hold, left out one at a time (issue 14).

A GPU's total memory of 2**64-1 (NVML's "not available" as an unsigned 64-bit), a PCI bus id in
an odd form, an NVLink numbered 300: each of these used to refuse the whole batch with 422, so
the node stayed "never seen" and its healthy GPUs' samples were lost. :func:`repair` takes the
validation errors of a batch document and, where every one of them lies in the inventory
(``node``, ``gpus``) or a node section, mends a copy of the document instead:

* a value that may be absent is removed (so it is null, or its default: a GPU ``state`` reads
  ``ok``, an NVLink ``state`` ``unknown``) and counted in ``nulled_values`` as
  ``<list>.<field>``; for a GPU's own fields the value sent is also kept by field, for the
  GPU's ``implausible_inventory``, so its page can say why the value is missing;
* a label or ``unavailable`` key is removed and counted as ``node.labels`` /
  ``gpus.unavailable``;
* an entry that cannot be told apart without the bad value (a GPU without a usable UUID, an
  NVLink without its link number or time, a process without its PID …) is left out and counted
  in ``sections_rejected`` as ``<list>.invalid`` (a GPU listed twice: ``gpus.duplicate_uuid``,
  the first entry kept); a topology with any bad value outside its devices and links is left
  out whole (``topology.invalid``). A GPU whose index is unreadable takes its position in the
  list.

What makes the batch unreadable as a whole is still refused with the errors pydantic gives: a
wrong type at the top level, no usable hostname, batch id, schema version or ``sent_at``, bad
labels as a whole, anything in ``samples`` or ``events`` (they keep their own policy), and a
list over its size limit.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from app.ingest.gpu_schemas import MigInstanceIn, ProcessIn
from app.ingest.schemas import CollectionErrorIn, CollectionIn, GpuIn, NodeIn
from app.nics.schemas import NicPortIn
from app.nvlinks.schemas import NvlinkIn
from app.storage.schemas import DiskIn, MountIn, NfsMountIn
from app.topology.schemas import TopologyDeviceIn, TopologyIn, TopologyLinkIn

#: Longest text of a value sent that a GPU keeps in ``implausible_inventory``.
MAX_SENT_CHARS = 64
#: Rounds of validate-and-mend before giving up (a model validator speaks only once the fields
#: it reads are valid: two topology devices with one id, a GPU listed twice).
MAX_ROUNDS = 4

Path = tuple[str | int, ...]


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
        whole: an object left out whole for any error in its own fields (the topology).
    """

    pattern: tuple[str, ...]
    kind: Literal["entry", "object", "map"]
    label: str
    model: type[BaseModel] | None = None
    keep: frozenset[str] = frozenset()
    whole: bool = False


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
    """

    nulled: Counter[str] = field(default_factory=Counter)
    rejected: Counter[str] = field(default_factory=Counter)
    gpu_values: dict[str, dict[str, str]] = field(default_factory=dict)


def repair(
    document: dict[str, Any], errors: Sequence[ErrorDetails], salvage: Salvage
) -> dict[str, Any] | None:
    """A copy of ``document`` without the values ``errors`` name, recording in ``salvage`` what
    was left out; ``None`` where an error lies where nothing may be left out (the batch is
    refused). ``document`` itself is never changed: its digest identifies the batch."""
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
            return True
        if not rest:  # the entry or object itself
            if place.kind == "entry" or (place.whole and kind == "value_error"):
                self.drops[at] = "invalid"
                return True
            return False
        name = str(rest[0])
        assert place.model is not None
        spec = place.model.model_fields.get(name)
        if spec is None or name in place.keep:
            return False
        if place.whole:
            self.drops[at] = "invalid"
        elif place.label == "gpus" and name == "index":
            self.positions[at] = int(at[-1])
        elif not spec.is_required():
            self.removals[(*at, name)] = (place, name)
        elif place.kind == "entry":
            self.drops[at] = "invalid"
        else:
            return False
        return True

    def apply(self, salvage: Salvage) -> None:
        """Make the planned changes on the copy and count them into ``salvage``."""
        dropped = set(self.drops)
        for path, (place, name) in self.removals.items():
            if _within(path, dropped):
                continue
            container = self._writable(path[:-1])
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
        # Deepest first, and the last of a list first, so no removal moves another's index.
        for path in sorted(self.drops, key=_deepest_last_first, reverse=True):
            if _within(path, dropped - {path}):
                continue
            label = _label_of(path)
            salvage.rejected[f"{label}.{self.drops[path]}"] += 1
            parent = self._writable(path[:-1])
            if isinstance(parent, list):
                del parent[int(path[-1])]
            else:
                parent[path[-1]] = None
        if self.duplicates:
            self._drop_repeated_gpus(salvage)

    def _drop_repeated_gpus(self, salvage: Salvage) -> None:
        gpus: list[Any] = self._writable(("gpus",))
        seen: set[Any] = set()
        kept = []
        for entry in gpus:
            uuid = entry.get("uuid") if isinstance(entry, dict) else None
            if uuid is not None and uuid in seen:
                salvage.rejected["gpus.duplicate_uuid"] += 1
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


def _deepest_last_first(path: Path) -> tuple[int, int]:
    return len(path), path[-1] if isinstance(path[-1], int) else -1


def _label_of(path: Path) -> str:
    found = _place_of(path)
    return found[0].label if found else str(path[0])


def _within(path: Path, dropped: Iterable[Path]) -> bool:
    """Whether ``path`` lies in (or is) an entry that is left out."""
    return any(path[: len(d)] == d for d in dropped)


def _at(document: Any, path: Path) -> Any:
    for step in path:
        document = document[step]
    return document
