"""The bulk lists of a batch (``samples`` and the dated node sections) as plain rows, checked
without building a pydantic model per entry.

An HGX node's batch holds thousands of entries; a model per entry cost more than storing it. So
:func:`parse_batch` checks each entry of these lists against the rules of
:class:`~app.ingest.schemas.IngestBatchIn` in plain Python (GPU samples an entry at a time, node
sections a field at a time over all entries) and answers only for entries that are
plainly valid (the usual JSON types, RFC 3339 times in their common form). Anything else (a wrong
type, a missing field, an unusual time format) sends the whole document through ``IngestBatchIn``,
so a bad batch gets exactly the 422 errors it always got, and an unusual but valid one the values
pydantic gives it. ``tests/app/test_ingest_copy_equivalence.py`` checks that both ways give the
same rows.

Implausible numbers are nulled here (:func:`app.metrics.plausible.plausible`); each row carries
the names of the fields it nulled, for the store to count once it knows the row is kept.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from operator import itemgetter
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from app.ingest import table_form
from app.ingest.salvage import MAX_LISTED, MAX_ROUNDS, Path, Salvage, repair
from app.ingest.schemas import MAX_SAMPLES, IngestBatchIn, SampleIn
from app.metrics.catalog import METRICS, sanitize
from app.metrics.plausible import Bound, clean_numbers
from app.nics import schemas as nic_schemas
from app.nvlinks import schemas as nvlink_schemas
from app.storage import schemas as storage_schemas
from app.timebounds import checked_utc

#: One GPU sample: its GPU's UUID, its time (UTC), the metric values in
#: :data:`app.metrics.catalog.METRICS` order (implausible ones nulled) and the nulled names.
SampleRow = tuple[str, datetime, tuple[Any, ...], tuple[str, ...]]
#: One entry of a node section: the values of :attr:`SectionSpec.fields` in order (implausible
#: numbers nulled) and the nulled ``<section>.<field>`` names.
SectionRow = tuple[tuple[Any, ...], tuple[str, ...]]


@dataclass(frozen=True)
class Spec:
    """One field of a section entry, as its pydantic model declares it.

    Attributes:
        name: the payload key (and column).
        kind: ``time`` (a :data:`~app.metrics.plausible.Timestamp`), ``text`` (``str`` of
            ``low``…``high`` characters), ``int`` (a strict ``int`` in ``low``…``high``),
            ``number`` (a :data:`~app.metrics.plausible.Number`, nulled outside ``bound``) or
            ``choice`` (one of ``choices``).
        required: no default; else a missing key gives ``default``.
        nullable: ``null`` is accepted.
    """

    name: str
    kind: Literal["time", "text", "int", "number", "choice"]
    required: bool = False
    nullable: bool = True
    default: Any = None
    low: int = 0
    high: int = 0
    choices: frozenset[str] = frozenset()
    bound: Bound | None = None


def _time(name: str = "sampled_at") -> Spec:
    return Spec(name, "time", required=True, nullable=False)


def _text(name: str, high: int, *, low: int = 0, required: bool = False) -> Spec:
    return Spec(name, "text", required=required, nullable=not required, low=low, high=high)


def _numbers(bounds: Mapping[str, Bound], *names: str) -> tuple[Spec, ...]:
    return tuple(Spec(name, "number", bound=bounds.get(name)) for name in names)


@dataclass(frozen=True)
class SectionSpec:
    """A dated node section: its entry fields in column order and its pydantic model.

    Attributes:
        name: the payload key.
        model: the entry's pydantic model (the fields here mirror it; a test compares them).
        fields: every field of the model; ``owner_field`` (``gpu_uuid``) is not a column.
        max_entries: the list's ``max_length`` in ``IngestBatchIn``.
        owner_field: the field naming the owning GPU, for GPU-owned sections.
    """

    name: str
    model: type[BaseModel]
    fields: tuple[Spec, ...]
    max_entries: int
    owner_field: str | None = None

    @property
    def columns(self) -> tuple[str, ...]:
        """The stored fields (all but ``owner_field``), in order."""
        return tuple(f.name for f in self.fields if f.name != self.owner_field)


_DEVICE_TYPES = frozenset({"gpu", "nvswitch", "cpu", "unknown"})
_NV = nvlink_schemas.BOUNDS
_DISK = storage_schemas.DISK_BOUNDS
_NFS = storage_schemas.NFS_BOUNDS
_NIC = nic_schemas.BOUNDS

SECTION_SPECS: tuple[SectionSpec, ...] = (
    SectionSpec(
        "nvlinks",
        nvlink_schemas.NvlinkIn,
        (
            _text("gpu_uuid", 96, low=1, required=True),
            Spec("link", "int", required=True, nullable=False, low=0, high=255),
            _time(),
            Spec(
                "state",
                "choice",
                nullable=False,
                default="unknown",
                choices=frozenset({"up", "down", "unknown"}),
            ),
            *_numbers(_NV, "speed_gbps"),
            _text("remote_pci_bus_id", 32),
            Spec(
                "remote_device_type",
                "choice",
                choices=frozenset({"gpu", "nvswitch", "cpu", "unknown"}),
            ),
            *_numbers(_NV, "tx_bytes_per_s", "rx_bytes_per_s"),
            *_numbers(_NV, "crc_errors", "replay_errors", "recovery_errors"),
        ),
        nvlink_schemas.MAX_NVLINKS,
        owner_field="gpu_uuid",
    ),
    SectionSpec(
        "disks",
        storage_schemas.DiskIn,
        (
            _time(),
            _text("device", 64, low=1, required=True),
            *_numbers(_DISK, "read_bytes_per_s", "write_bytes_per_s", "read_iops", "write_iops"),
            *_numbers(_DISK, "busy_pct", "avg_wait_s"),
        ),
        storage_schemas.MAX_DISKS,
    ),
    SectionSpec(
        "mounts",
        storage_schemas.MountIn,
        (
            _time(),
            _text("mountpoint", 512, low=1, required=True),
            _text("device", 256),
            _text("fstype", 32),
            *_numbers(storage_schemas.MOUNT_BOUNDS, "used_bytes", "total_bytes"),
        ),
        storage_schemas.MAX_MOUNTS,
    ),
    SectionSpec(
        "nfs_mounts",
        storage_schemas.NfsMountIn,
        (
            _time(),
            _text("mountpoint", 512, low=1, required=True),
            _text("export", 512),
            _text("version", 16),
            *_numbers(_NFS, "read_bytes", "write_bytes", "ops", "retransmits"),
            *_numbers(_NFS, "read_bytes_per_s", "write_bytes_per_s", "ops_per_s"),
            *_numbers(_NFS, "retransmits_per_s", "avg_rtt_s"),
        ),
        storage_schemas.MAX_NFS_MOUNTS,
    ),
    SectionSpec(
        "nic_ports",
        nic_schemas.NicPortIn,
        (
            _time(),
            _text("device", 64, low=1, required=True),
            Spec("port", "int", required=True, nullable=False, low=0, high=255),
            _text("link_layer", 32),
            _text("state", 32),
            _text("phys_state", 32),
            *_numbers(_NIC, "rate_gbps", "tx_bytes_per_s", "rx_bytes_per_s"),
            *_numbers(_NIC, "symbol_error_count", "link_downed_count"),
            *_numbers(_NIC, "link_error_recovery_count", "port_rcv_errors_count"),
            *_numbers(_NIC, "port_xmit_discards_count"),
        ),
        nic_schemas.MAX_NIC_PORTS,
    ),
)
SECTION_NAMES: tuple[str, ...] = tuple(s.name for s in SECTION_SPECS)
_BULK_KEYS = frozenset({"samples", *SECTION_NAMES})


@dataclass
class ParsedBatch:
    """A validated batch: ``head`` holds everything but the bulk lists (its ``samples`` and
    sections are empty), which are here as rows.

    Attributes:
        sections: the rows of each section present in the batch (absent or ``null``: no key).
        salvage: the values and entries left out to accept the batch
            (:mod:`app.ingest.salvage`); ``samples`` holds only the samples kept.
    """

    head: IngestBatchIn
    samples: list[SampleRow]
    sections: dict[str, list[SectionRow]] = field(default_factory=dict)
    salvage: Salvage = field(default_factory=Salvage)


class _NotPlain(Exception):
    """An entry the fast path leaves to pydantic."""


def parse_batch(document: Any) -> ParsedBatch:
    """Validate a cleaned batch document (see :func:`app.ingest.fields.clean_document`), leaving
    out the values and entries it cannot hold (:mod:`app.ingest.salvage`). A plain batch takes
    the fast path; one with anything unusual is validated whole by pydantic, and mended only
    where that fails.

    Raises:
        pydantic.ValidationError: the document does not match ``IngestBatchIn`` where nothing
            may be left out (the errors pydantic gives for the whole document).
    """
    if isinstance(document, dict):
        mended = Salvage()
        try:
            samples, sections = _bulk(document, mended)
        except _NotPlain:
            pass
        except table_form.TableFormError as exc:
            raise _table_form_error(exc) from None
        else:
            head, salvage = _validated({k: v for k, v in document.items() if k not in _BULK_KEYS})
            salvage.samples = mended.samples
            salvage.by_reason.update(mended.by_reason)
            salvage.listed = sorted([*salvage.listed, *mended.listed], key=_in_field_order)
            del salvage.listed[MAX_LISTED:]
            return ParsedBatch(head=head, samples=samples, sections=sections, salvage=salvage)
        try:
            document = table_form.expanded(document, _BULK_KEYS)
        except table_form.TableFormError as exc:
            raise _table_form_error(exc) from None
    batch, salvage = _validated(document)
    parsed = from_model(batch)
    parsed.salvage = salvage
    return parsed


def _table_form_error(exc: table_form.TableFormError) -> ValidationError:
    """A table-form list that cannot be read, as the validation error of the batch."""
    return ValidationError.from_exception_data(
        IngestBatchIn.__name__,
        [{"type": "value_error", "loc": exc.loc, "input": None, "ctx": {"error": str(exc)}}],
    )


_FIELD_ORDER = {name: i for i, name in enumerate(IngestBatchIn.model_fields)}


def _in_field_order(item: tuple[Path, str, Any]) -> int:
    """Values left out are listed in the batch's field order (``node``, ``gpus``, ``samples``,
    ``events`` …), whichever way the batch was read."""
    return _FIELD_ORDER.get(str(item[0][0]), len(_FIELD_ORDER)) if item[0] else -1


def _validated(document: Any) -> tuple[IngestBatchIn, Salvage]:
    """``document`` as ``IngestBatchIn``, mended by :func:`app.ingest.salvage.repair` where it
    can be, and what was left out.

    Raises:
        pydantic.ValidationError: the errors of the round that found one it cannot mend (the
            first, but for a model validator that speaks only once the fields pass), or of the
            first round where mending does not end.
    """
    salvage = Salvage()
    first: ValidationError | None = None
    for _ in range(MAX_ROUNDS):
        try:
            batch = IngestBatchIn.model_validate(document)
            salvage.listed.sort(key=_in_field_order)
            return batch, salvage
        except ValidationError as exc:
            first = first or exc
            errors = exc.errors(include_url=False, include_context=False, include_input=False)
            mended = repair(document, errors, salvage) if isinstance(document, dict) else None
            if mended is None:
                raise
            document = mended
    assert first is not None
    raise first


def from_model(batch: IngestBatchIn) -> ParsedBatch:
    """The rows of a batch validated by pydantic (the reference :func:`parse_batch` follows)."""
    samples = [_sample_row(sample) for sample in batch.samples]
    sections: dict[str, list[SectionRow]] = {}
    for spec in SECTION_SPECS:
        entries: list[BaseModel] | None = getattr(batch, spec.name)
        if entries is None:
            continue
        bounds = {f.name: f.bound for f in spec.fields if f.bound is not None}
        rows: list[SectionRow] = []
        for entry in entries:
            dumped = entry.model_dump()
            counted: Counter[str] = Counter()
            cleaned = clean_numbers(dumped, bounds, prefix=spec.name, nulled=counted)
            rows.append((tuple(cleaned[f.name] for f in spec.fields), tuple(counted.elements())))
        sections[spec.name] = rows
    head = batch.model_copy(update={"samples": [], **dict.fromkeys(SECTION_NAMES)})
    return ParsedBatch(head=head, samples=samples, sections=sections)


def _sample_row(sample: Any) -> SampleRow:
    """The row of a validated ``SampleIn``, implausible values nulled and named."""
    raw = [getattr(sample, m.name) for m in METRICS]
    values = tuple(sanitize(m.name, value) for m, value in zip(METRICS, raw, strict=True))
    nulled = tuple(
        m.name
        for m, before, after in zip(METRICS, raw, values, strict=True)
        if before is not None and after is None
    )
    return (sample.gpu_uuid, sample.sampled_at, values, nulled)


class _SamplesOnly(BaseModel):
    """The ``samples`` of a batch alone, for a sample the fast path leaves to pydantic (its
    errors then have the paths they have in the whole batch)."""

    model_config = ConfigDict(extra="ignore")

    samples: list[SampleIn]


def _mended_sample(index: int, entry: Any, salvage: Salvage) -> SampleRow | None:
    """The row of the sample at ``index`` that the plain check could not take: validated
    alone by pydantic and mended as in the whole batch (:func:`app.ingest.salvage.repair`),
    what was left out recorded in ``salvage`` under its index as sent; ``None`` when the
    sample is left out. One bad sample costs its own validation, not the whole batch's.

    Raises:
        _NotPlain: it cannot be mended (the whole-batch path then gives the errors).
    """
    document: dict[str, Any] = {"samples": [entry]}
    for _ in range(MAX_ROUNDS):
        try:
            samples = _SamplesOnly.model_validate(document).samples
        except ValidationError as exc:
            errors = exc.errors(include_url=False, include_context=False, include_input=False)
            alone = Salvage()
            mended = repair(document, errors, alone)
            if mended is None:
                raise _NotPlain from None
            salvage.by_reason.update(alone.by_reason)
            for loc, kind, action in alone.listed:  # ("samples", 0, …) → its index as sent
                salvage.listed.append((("samples", index, *loc[2:]), kind, action))
            salvage.samples += [(index, uuid) for _, uuid in alone.samples]
            document = mended
            continue
        return _sample_row(samples[0]) if samples else None
    raise _NotPlain


# --- the fast path ---------------------------------------------------------------------------

# RFC 3339 as agents write it; other forms pydantic accepts go to pydantic.
_RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,6})?(?:Z|[+-]\d\d:\d\d)")
# Characters plain_text (app.ingest.fields) refuses in an identifier.
_CONTROLS = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff"
    "\ud800-\udfff]"
)
#: name → (position, low, high, integer) of each sample metric.
_METRIC_SLOTS: dict[str, tuple[int, float, float, bool]] = {
    m.name: (i, m.low, m.high, m.integer) for i, m in enumerate(METRICS)
}
_NO_VALUES: tuple[None, ...] = (None,) * len(METRICS)


class _Times(dict[str, datetime]):
    """RFC 3339 text → UTC time, each distinct text parsed once (a batch repeats its ticks)."""

    def of(self, value: Any) -> datetime:
        """The UTC time of ``value``, which must be RFC 3339 text."""
        if type(value) is not str:
            raise _NotPlain
        return self[value]

    def of_texts(self, texts: Sequence[str]) -> list[datetime]:
        """The UTC times of ``texts``, known to be ``str``: looked up by the dict's own
        ``__getitem__`` (a Python call per value cost more than the lookups)."""
        return list(map(self.__getitem__, texts))

    def __missing__(self, text: str) -> datetime:
        if not _RFC3339.fullmatch(text):
            raise _NotPlain
        try:
            when = checked_utc(datetime.fromisoformat(text))
        except ValueError:
            raise _NotPlain from None
        self[text] = when
        return when


def _bulk(
    document: dict[str, Any], salvage: Salvage
) -> tuple[list[SampleRow], dict[str, list[SectionRow]]]:
    times = _Times()
    samples = document.get("samples", [])
    if table_form.is_table(samples):
        fields, table = table_form.checked("samples", samples)
        if len(table) > MAX_SAMPLES:
            raise _NotPlain
        plain = _sample_rows_of(fields, table, times) if table_form.regular(fields, table) else None
        rows = (
            plain
            if plain is not None
            else _samples(table_form.entries(fields, table), times, salvage)
        )
    elif type(samples) is not list or len(samples) > MAX_SAMPLES:
        raise _NotPlain
    else:
        rows = _samples(samples, times, salvage)
    sections: dict[str, list[SectionRow]] = {}
    for spec in SECTION_SPECS:
        entries = document.get(spec.name)
        if entries is None:
            continue
        if table_form.is_table(entries):
            fields, table = table_form.checked(spec.name, entries)
            if len(table) > spec.max_entries or not table_form.regular(fields, table):
                raise _NotPlain
            sections[spec.name] = _section_table_rows(fields, table, spec, times)
            continue
        if type(entries) is not list or len(entries) > spec.max_entries:
            raise _NotPlain
        sections[spec.name] = _section_rows(entries, spec, times)
    return rows, sections


def _samples(entries: list[Any], times: _Times, salvage: Salvage) -> list[SampleRow]:
    """The rows of the ``samples`` list: a metric at a time over all entries
    (:func:`_sample_columns`) where every entry is plain, else an entry at a time
    (:func:`_sample_entries`), mending the entries that are not."""
    rows = _sample_columns(entries, times)
    return rows if rows is not None else _sample_entries(entries, times, salvage)


def _sample_columns(entries: list[Any], times: _Times) -> list[SampleRow] | None:
    """The rows of ``entries`` checked a metric at a time, as :func:`_section_rows` checks a
    section: where every entry is an object with the same keys (an agent writes every sample
    alike), ``operator.itemgetter`` picks each entry's metrics in C, and each metric's column
    is checked by a few passes of C-level builtins instead of a Python step per value (an
    8-GPU batch of 60 ticks holds 480 × 38 metric values). ``None`` where the entries differ
    in their keys or any is not plain (a UUID or time that is not plain text, a metric that is
    not a number): :func:`_sample_entries` then reads the list and mends those entries."""
    if not entries or set(map(type, entries)) != {dict}:
        return None
    names = list(entries[0])
    if len(names) < 2 or set(map(len, entries)) != {len(names)}:
        return None
    try:  # every entry has the first one's keys, and as many: the same keys
        picked = list(map(itemgetter(*names), entries))
    except KeyError:
        return None
    return _sample_rows_of(names, picked, times)


def _sample_rows_of(
    names: list[str], picked: Sequence[Sequence[Any]], times: _Times
) -> list[SampleRow] | None:
    """The rows of samples given as their values in ``names`` order (every sample has every
    name), checked a metric at a time; ``None`` where any is not plain (see
    :func:`_sample_columns`)."""
    if len(names) < 2 or not picked:
        return None
    every = dict(zip(names, zip(*picked, strict=True), strict=True))
    uuids, stamps = every.get("gpu_uuid"), every.get("sampled_at")
    if uuids is None or stamps is None:
        return None
    if set(map(type, uuids)) != {str} or set(map(type, stamps)) != {str}:
        return None
    if not all(map(_plain_uuid, set(uuids))):
        return None
    try:
        whens = times.of_texts(stamps)
    except _NotPlain:
        return None
    columns: dict[str, Sequence[Any]] = {n: every[n] for n in _METRIC_SLOTS if n in every}
    nulled: dict[int, tuple[str, ...]] = {}
    for name, column in columns.items():
        kinds = set(map(type, column))
        if kinds == {_NONE}:
            continue
        if not kinds <= _NUMBERS:
            return None
        _, low, high, integer = _METRIC_SLOTS[name]
        if not _plausible(column, kinds, low, high, integer):
            columns[name] = _null_implausible(column, low, high, integer, name, nulled)
    nones = (None,) * len(picked)
    values = zip(*(columns.get(name, nones) for name in _METRIC_SLOTS), strict=True)
    if not nulled:
        return [(u, w, v, ()) for u, w, v in zip(uuids, whens, values, strict=True)]
    return [
        (u, w, v, nulled.get(at, ()))
        for at, (u, w, v) in enumerate(zip(uuids, whens, values, strict=True))
    ]


def _plain_uuid(uuid: str) -> bool:
    """Whether a sample's ``gpu_uuid`` text is taken as it is: 1-96 characters, none that
    :func:`app.ingest.fields.plain_text` refuses in an identifier."""
    return 1 <= len(uuid) <= 96 and not _CONTROLS.search(uuid)


def _sample_entries(entries: list[Any], times: _Times, salvage: Salvage) -> list[SampleRow]:
    uuids: set[str] = set()
    rows: list[SampleRow] = []
    slots = _METRIC_SLOTS
    for at, entry in enumerate(entries):
        try:  # free in CPython 3.11+ unless raised: the plain check of one entry
            if type(entry) is not dict:
                raise _NotPlain
            uuid = entry.get("gpu_uuid")
            if type(uuid) is not str:
                raise _NotPlain
            if uuid not in uuids:
                if not _plain_uuid(uuid):
                    raise _NotPlain
                uuids.add(uuid)
            when = times.of(entry.get("sampled_at"))
            values: list[Any] | None = None
            nulled: tuple[str, ...] = ()
            for name, value in entry.items():
                slot = slots.get(name)
                if slot is None or value is None:
                    continue
                kind = type(value)
                if kind is not int and kind is not float:
                    raise _NotPlain
                index, low, high, integer = slot
                if not low <= value <= high:  # NaN too
                    nulled += (name,)
                    continue
                if integer and kind is float:
                    if not value.is_integer():
                        nulled += (name,)
                        continue
                    value = int(value)
                if values is None:
                    values = list(_NO_VALUES)
                values[index] = value
        except _NotPlain:
            row = _mended_sample(at, entry, salvage)
            if row is not None:
                rows.append(row)
            continue
        rows.append((uuid, when, _NO_VALUES if values is None else tuple(values), nulled))
    return rows


@dataclass(frozen=True)
class _Plan:
    """A section's fields grouped by kind, as positions in :attr:`SectionSpec.fields`."""

    names: tuple[str, ...]
    defaults: tuple[tuple[int, Any, bool], ...]  # position, default, required
    not_null: tuple[int, ...]
    times: tuple[int, ...]
    texts: tuple[tuple[int, int, int], ...]  # position, shortest, longest
    ints: tuple[tuple[int, int, int], ...]  # position, low, high
    numbers: tuple[tuple[int, float, float, bool, str], ...]  # position, bound, nulled name
    choices: tuple[tuple[int, frozenset[str]], ...]

    @classmethod
    def of(cls, spec: SectionSpec) -> _Plan:
        fields = list(enumerate(spec.fields))
        numbers = []
        for i, f in fields:
            if f.kind == "number":
                if f.bound is None:  # clean_numbers would leave NaN alone; keep it simple
                    raise ValueError(f"{spec.name}.{f.name} needs a plausible range")
                label = f"{spec.name}.{f.name}"
                numbers.append((i, f.bound.low, f.bound.high, f.bound.integer, label))
        return cls(
            names=tuple(f.name for f in spec.fields),
            defaults=tuple((i, f.default, f.required) for i, f in fields),
            not_null=tuple(i for i, f in fields if not f.nullable),
            times=tuple(i for i, f in fields if f.kind == "time"),
            texts=tuple((i, f.low, f.high) for i, f in fields if f.kind == "text"),
            ints=tuple((i, f.low, f.high) for i, f in fields if f.kind == "int"),
            numbers=tuple(numbers),
            choices=tuple((i, f.choices) for i, f in fields if f.kind == "choice"),
        )


_PLANS: dict[str, _Plan] = {spec.name: _Plan.of(spec) for spec in SECTION_SPECS}


class _Absent:
    """The value of a key an entry lacks (``None`` is a value the entry may hold)."""


_ABSENT = _Absent()
_NONE = type(None)
_TEXTS = frozenset({str, _NONE})
_NUMBERS = frozenset({int, float, _NONE})


def _section_rows(entries: list[Any], spec: SectionSpec, times: _Times) -> list[SectionRow]:
    """The rows of one section's entries, checked a field at a time over all entries: each
    check is a few passes of C-level builtins (``map``, ``set``, ``min``, ``max``) over a column
    instead of a Python loop per value; a number column holding an implausible value is walked
    value by value to null it (:func:`_null_implausible`)."""
    if not entries:
        return []
    if set(map(type, entries)) != {dict}:
        raise _NotPlain
    plan = _PLANS[spec.name]
    return _checked_section(_section_columns(entries, plan.names), plan, times)


def _section_table_rows(
    fields: list[str], rows: list[Any], spec: SectionSpec, times: _Times
) -> list[SectionRow]:
    """:func:`_section_rows` of a section sent in the table form (:mod:`app.ingest.table_form`)
    whose rows are all lists of as many values as ``fields``: its columns are the rows
    transposed, a field it does not send absent from every row."""
    if not rows:
        return []
    plan = _PLANS[spec.name]
    transposed = dict(zip(fields, map(list, zip(*rows, strict=True)), strict=True))
    absent = [_ABSENT] * len(rows)
    columns = [transposed.get(name, absent) for name in plan.names]
    return _checked_section(columns, plan, times)


def _checked_section(picked: list[list[Any]], plan: _Plan, times: _Times) -> list[SectionRow]:
    """The rows of a section's columns (``plan.names`` order, :data:`_ABSENT` where an entry
    lacks the field), checked a column at a time."""
    columns: list[list[Any]] = []
    kinds_of: list[set[type]] = []
    for i, column in enumerate(picked):
        kinds = set(map(type, column))
        if _Absent in kinds:
            _, default, required = plan.defaults[i]
            if required:
                raise _NotPlain
            column = [default if value is _ABSENT else value for value in column]
            kinds = set(map(type, column))
        columns.append(column)
        kinds_of.append(kinds)
    for i in plan.not_null:
        if _NONE in kinds_of[i]:
            raise _NotPlain
    for i in plan.times:
        if kinds_of[i] != {str}:
            raise _NotPlain
        columns[i] = times.of_texts(columns[i])
    for i, shortest, longest in plan.texts:
        if not kinds_of[i] <= _TEXTS:
            raise _NotPlain
        # A section repeats its texts (devices, states, peers): each distinct one once.
        lengths = set(map(len, set(columns[i]) - {None}))
        if lengths and not (shortest <= min(lengths) and max(lengths) <= longest):
            raise _NotPlain
    for i, least, most in plan.ints:
        if kinds_of[i] != {int} or not (least <= min(columns[i]) and max(columns[i]) <= most):
            raise _NotPlain
    for i, choices in plan.choices:
        if not kinds_of[i] <= _TEXTS or not set(columns[i]) - {None} <= choices:
            raise _NotPlain
    nulled: dict[int, tuple[str, ...]] = {}
    for i, low, high, integer, label in plan.numbers:
        kinds = kinds_of[i]
        if not kinds <= _NUMBERS:
            raise _NotPlain
        if kinds == {_NONE} or _plausible(columns[i], kinds, low, high, integer):
            continue
        columns[i] = _null_implausible(columns[i], low, high, integer, label, nulled)
    values = list(zip(*columns, strict=True))
    if not nulled:
        return [(row, ()) for row in values]
    return [(row, nulled.get(at, ())) for at, row in enumerate(values)]


def _section_columns(entries: list[dict[str, Any]], names: tuple[str, ...]) -> list[list[Any]]:
    """Each of ``names``' values over ``entries``, :data:`_ABSENT` where an entry lacks it:
    picked by one ``itemgetter`` pass where every entry has every name (agents write them
    alike), else name by name."""
    if len(names) > 1:
        try:
            picked = list(map(itemgetter(*names), entries))
        except KeyError:
            pass
        else:
            return list(map(list, zip(*picked, strict=True)))
    return [[entry.get(name, _ABSENT) for entry in entries] for name in names]


def _plausible(
    column: Sequence[Any], kinds: set[type], low: float, high: float, integer: bool
) -> bool:
    """Whether every number of ``column`` (ints, floats or ``None``) is kept as it is: within
    ``low``…``high``, no NaN, and no float in an integer field."""
    if float in kinds and integer:
        return False
    present = column if _NONE not in kinds else [v for v in column if v is not None]
    if not low <= min(present) or not max(present) <= high:
        return False
    # min and max skip a NaN that is not first; a sum holding one is NaN.
    if float in kinds:
        total = sum(present)
        return total == total
    return True


def _null_implausible(
    column: Sequence[Any],
    low: float,
    high: float,
    integer: bool,
    label: str,
    nulled: dict[int, tuple[str, ...]],
) -> list[Any]:
    """``column`` with each value outside ``low``…``high`` (NaN too) or, in an integer field,
    each fractional float nulled, and whole floats made ints; adds ``label`` to ``nulled`` at
    the row of each value nulled."""
    kept: list[Any] = []
    for at, value in enumerate(column):
        if value is not None:
            if not low <= value <= high:  # NaN too
                value = None
                nulled[at] = (*nulled.get(at, ()), label)
            elif integer and type(value) is float:
                if value.is_integer():
                    value = int(value)
                else:
                    value = None
                    nulled[at] = (*nulled.get(at, ()), label)
        kept.append(value)
    return kept
