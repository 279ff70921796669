"""The fast ways of reading a batch give what the reference ways give: orjson against
``json.loads``, the plain-loop row check (:mod:`app.ingest.rows`) against pydantic, the orjson
digest against itself for equal content."""

from __future__ import annotations

import copy
import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from app.errors import BadRequest, Conflict
from app.fleet import service as fleet_service
from app.ingest import body, rows
from app.ingest import service as ingest_service
from app.ingest.rows import SECTION_SPECS, ParsedBatch, from_model, parse_batch
from app.ingest.salvage import Salvage
from tests.app import section_factories as sections
from tests.dbs import postgres_database
from tests.factories import batch
from tests.factories import gpu as gpu_entry

AT = datetime(2026, 11, 29, 16, 0, tzinfo=UTC)


def _document() -> dict[str, Any]:
    payload = sections.with_sections(batch(gpus=2, samples_per_gpu=2, start=AT), AT)
    payload["samples"][1].update(util_gpu_pct=101, pstate=3.0, clocks_event_reasons=1.5)
    payload["nvlinks"][2].update(speed_gbps=-1, crc_errors=2.0)
    return payload


def _reference(document: Any) -> ParsedBatch | list[Any]:
    """Pydantic's reading of the whole document, mended where it can be (issue 14)."""
    try:
        head, salvage = rows._validated(document)
        parsed = from_model(head)
        parsed.salvage = salvage
        return parsed
    except ValidationError as exc:
        return exc.errors(include_url=False, include_context=False, include_input=False)


def _fast(document: Any) -> ParsedBatch | list[Any]:
    try:
        return parse_batch(document)
    except ValidationError as exc:
        return exc.errors(include_url=False, include_context=False, include_input=False)


def _comparable(result: ParsedBatch | list[Any]) -> Any:
    if isinstance(result, list):
        return result
    return (
        result.head.model_dump(),
        [(u, t, v, Counter(n)) for u, t, v, n in result.samples],
        {name: [(v, Counter(n)) for v, n in entries] for name, entries in result.sections.items()},
        (result.salvage.nulled, result.salvage.rejected, result.salvage.gpu_values),
        (result.salvage.samples, result.salvage.events),
        (result.salvage.listed, result.salvage.by_reason),
    )


_ODD_VALUES: list[Any] = [
    None,
    True,
    0,
    -1,
    256,
    2**64,
    1.5,
    2.0,
    float("nan"),
    "",
    "x",
    "y" * 600,
    "up",
    "GPU-\u202e",
    [],
    {},
    "2026-11-29T16:00:05Z",
    "2026-11-29T16:00:05.5+05:30",
    "2026-11-29T16:00:05",
    "2026-11-29 16:00:05Z",
    "2026-11-29T16:00:05.1234567Z",
    "2026-11-29T16:00:60Z",
    "1700000000",
    "0001-01-01T00:00:00+01:00",
]
_MISSING = object()


def _mutations() -> list[tuple[str, int, str, Any]]:
    document = _document()
    found: list[tuple[str, int, str, Any]] = []
    for key in ("samples", *(spec.name for spec in SECTION_SPECS)):
        index = len(document[key]) - 1
        for field in [*document[key][index], "unknown_key"]:
            for value in [*_ODD_VALUES, _MISSING]:
                found.append((key, index, field, value))
    return found


@pytest.mark.parametrize(("key", "index", "field", "value"), _mutations())
def test_the_row_check_agrees_with_pydantic_on_every_odd_value(
    key: str, index: int, field: str, value: Any
) -> None:
    document = _document()
    if value is _MISSING:
        document[key][index].pop(field, None)
    else:
        document[key][index][field] = value
    assert _comparable(_fast(document)) == _comparable(_reference(document))


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d.update(samples=None),
        lambda d: d.update(samples="many"),
        lambda d: d.update(nvlinks=None),
        lambda d: d.update(disks=5),  # an object is the table form: test_ingest_table_form
        lambda d: d["samples"].append(7),
        lambda d: d.pop("batch_id"),
        lambda d: d.update(schema_version=True),
        lambda d: d["node"].update(hostname="not a host"),
    ],
)
def test_the_row_check_agrees_with_pydantic_on_whole_lists_and_the_head(change: Any) -> None:
    document = _document()
    change(document)
    assert _comparable(_fast(document)) == _comparable(_reference(document))


def test_a_plain_batch_takes_the_fast_path() -> None:
    parsed = rows._bulk(_document(), Salvage())
    assert len(parsed[0]) == 4
    assert set(parsed[1]) == {"nvlinks", "disks", "mounts", "nfs_mounts", "nic_ports"}


def test_a_bad_sample_is_mended_alone_keeping_the_fast_path_for_the_rest() -> None:
    """Issue 14: one sample value that is not a number costs that sample's validation, not the
    whole batch's (bench/ingest_parse.py)."""
    document = _document()
    document["samples"][2]["power_w"] = "12,5"
    document["samples"][3]["gpu_uuid"] = 7
    salvage = Salvage()
    samples, sections = rows._bulk(document, salvage)
    assert len(samples) == 3 and samples[2][3] == ("power_w",)
    assert salvage.samples == [(3, "")]
    assert salvage.listed == [
        (("samples", 2, "power_w"), "number_type", "nulled"),
        (("samples", 3, "gpu_uuid"), "string_type", "entry_left_out"),
    ]
    assert set(sections) == {"nvlinks", "disks", "mounts", "nfs_mounts", "nic_ports"}


def test_the_section_specs_name_every_field_of_their_models() -> None:
    for spec in SECTION_SPECS:
        assert [f.name for f in spec.fields] == list(spec.model.model_fields), spec.name


def _standard(text: bytes) -> Any:
    try:
        return body._standard(text)
    except BadRequest as exc:
        return ("error", str(exc))


def _decoded(text: bytes) -> Any:
    try:
        return body.decode(text, encoding="identity", max_bytes=2**20).document
    except BadRequest as exc:
        return ("error", str(exc))


@pytest.mark.parametrize(
    "text",
    [
        b'{"a": 1, "b": [1.5, -0, 1e5, 1E-7, 0.1, 12345678901234567890]}',
        b'{"a": 18446744073709551616, "b": -9223372036854775809}',
        b'{"a": "12345678901234567890123", "b": 0.12345678901234567890123}',
        b'{"a": 1, "a": 2}',
        b'{"a": {"b": "x:y", "b": "z"}}',
        b'{"a": "x", "a": "x:y"}',
        b'{"a\\u003a": 1, "a": 2}',
        b'{"a\\u003a": 1, "a:": 2}',
        b'{"a": "\\u0000", "b": "\\ud800"}',
        b'{"a": NaN, "b": Infinity}',
        b'{"a": 1e400}',
        b'\xef\xbb\xbf{"a": 1}',
        b'{"a": "\xff"}',
        b'{"a": 1,}',
        b"[" * 2000 + b"]" * 2000,
        '{"h\u00e9": "\u2028 \U0001f600"}'.encode(),
    ],
)
def test_orjson_decodes_what_the_standard_parser_decodes(text: bytes) -> None:
    assert repr(_decoded(text)) == repr(_standard(text))  # repr: NaN equals NaN, 1 is not 1.0


def test_a_repeated_key_is_refused_whichever_parser_reads_it() -> None:
    for text in (
        b'{"a": 1, "a": 2}',
        b'{"a\\u003a": 1, "x": {"b": 1, "b": 1}}',
        b'{"sent_at": "2026-12-05T00:00:00Z", "a": 1, "sent_at": "x:y"}',
        b'{"sent_at": {"t": "1:2"}, "x": [{"c": "0:0", "c": 1}]}',
    ):
        with pytest.raises(BadRequest, match="appears twice"):
            body.decode(text, encoding="identity", max_bytes=2**20)


def test_equal_content_gets_one_digest_however_it_is_spelled() -> None:
    spellings = [
        b'{"sent_at": "x", "b": [0.00001, 1], "a": "k:v"}',
        b'{"a":"k\\u003av","b":[1e-05,1],"sent_at":"y"}',
        b'{"b": [1.0e-5, 1], "a": "k:v"}',
    ]
    digests = set()
    for text in spellings:
        decoded = body.decode(text, encoding="identity", max_bytes=2**20)
        digests.add(ingest_service.content_digest(decoded.document, finite=decoded.fast))
        # The text written once by the decoder gives the digest written afresh.
        digests.add(
            ingest_service.content_digest(
                decoded.document, finite=decoded.fast, text=decoded.canonical
            )
        )
    assert len(digests) == 1
    nan = body.decode(b'{"a": NaN}', encoding="identity", max_bytes=2**20).document
    null = body.decode(b'{"a": null}', encoding="identity", max_bytes=2**20).document
    assert ingest_service.content_digest(nan) != ingest_service.content_digest(null)


def test_a_batch_first_stored_with_the_legacy_digest_replays_and_conflicts_as_before() -> None:
    from app.db import make_engine, make_session_factory, session_scope

    document = batch(gpus=[gpu_entry(0)], samples_per_gpu=2, start=datetime.now(UTC))
    document["samples"][0]["power_w"] = 3.5e-05
    legacy = ingest_service.legacy_content_digest(document)
    assert legacy != ingest_service.content_digest(document)
    changed = copy.deepcopy(document)
    changed["samples"][0]["power_w"] = 4.5e-05

    def store(doc: dict[str, Any], digest: str, session: Any) -> Any:
        node = fleet_service.get_or_create_node(session, hostname="node-a")
        return ingest_service.store_batch(
            session,
            node=node,
            batch=parse_batch(json.loads(json.dumps(doc))),
            received_at=datetime.now(UTC) + timedelta(seconds=1),
            future_tolerance_s=300.0,
            retention_days=30.0,
            content_sha256=digest,
            legacy_sha256=lambda: ingest_service.legacy_content_digest(doc),
        )

    with postgres_database() as url:
        engine = make_engine(url)
        try:
            factory = make_session_factory(engine)
            with session_scope(factory) as session:
                first = store(document, legacy, session)
            with session_scope(factory) as session:
                again = store(document, ingest_service.content_digest(document), session)
            assert again.replayed and again.samples_stored == first.samples_stored == 2
            with pytest.raises(Conflict), session_scope(factory) as session:
                store(changed, ingest_service.content_digest(changed), session)
        finally:
            engine.dispose()
