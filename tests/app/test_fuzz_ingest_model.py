"""Fuzzing the ingest model (issue 14): a full agent batch with one value anywhere replaced by
an odd one, or a key removed, is either stored (the bad value or entry left out and listed in
``left_out``) or, where the change makes it no batch at all, refused with a validation error
naming that field; the body decoder gives only its 400/413 errors for mutated bytes. Nothing
else escapes, on Postgres and SQLite. Profiles: ``tests/fuzzing.py``."""

from __future__ import annotations

import copy
import gzip
import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from sqlalchemy.engine import Engine

from app.db import make_engine, make_session_factory, session_scope
from app.errors import BadRequest, Conflict, Forbidden, PayloadTooLarge
from app.fleet import service as fleet_service
from app.ingest import body
from app.ingest import service as ingest_service
from app.ingest.fields import clean_document
from app.ingest.rows import parse_batch
from tests.app.section_factories import with_sections
from tests.dbs import wipe
from tests.factories import batch
from tests.fuzzing import Mutation, mutate, mutations

AT = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
ODD: list[Any] = [
    None,
    True,
    -1,
    0,
    2**64,
    2**70,
    1.5,
    float("nan"),
    float("inf"),
    "",
    "12,5",
    "x" * 300,
    "GPU-\u202e",
    "\x00",
    "2026-11-29T16:00:05",
    "0001-01-01T00:00:00Z",
    [],
    {},
    [1, 2],
    {"a": 1},
]
_MISSING = object()
#: Paths whose change may make the document no batch at all (refused whole, docs/ingest.md).
_BATCH_FIELDS = {("schema_version",), ("batch_id",), ("sent_at",), ("node",)}
_BATCH_FIELDS |= {("node", "hostname"), ("node", "labels")}


def _document() -> dict[str, Any]:
    payload = with_sections(batch(gpus=2, samples_per_gpu=2, start=AT), AT)
    payload["events"] = [
        {"occurred_at": payload["samples"][0]["sampled_at"], "kind": "xid", "xid": 79,
         "gpu_uuid": payload["gpus"][0]["uuid"], "message": "NVRM: Xid 79"},
    ]  # fmt: skip
    return payload


def _paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if path:
        yield path
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, (*path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _paths(child, (*path, index))


_PATHS = list(_paths(_document()))


def _changed(path: tuple[Any, ...], new: Any) -> dict[str, Any]:
    document = copy.deepcopy(_document())
    target: Any = document
    for step in path[:-1]:
        target = target[step]
    if new is _MISSING:
        if isinstance(target, list):
            del target[path[-1]]
        else:
            target.pop(path[-1])
    else:
        target[path[-1]] = new
    return document


def _may_refuse(path: tuple[Any, ...]) -> bool:
    """A change at ``path`` may make the document no batch (a top-level value, the hostname,
    the labels as a whole); anywhere else it must be left out alone."""
    return len(path) == 1 or path in _BATCH_FIELDS


changes = st.tuples(
    st.sampled_from(_PATHS), st.sampled_from([*ODD, _MISSING]), st.sampled_from([*ODD, _MISSING])
)


@pytest.fixture(scope="module", params=["postgres", "sqlite"])
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    """Each backend's session database, wiped after (the examples leave batches behind)."""
    url = request.getfixturevalue(f"{request.param}_url")
    wipe(url)
    made = make_engine(url)
    yield made
    made.dispose()
    wipe(url)


@given(change=changes)
def test_fuzz_one_odd_value_anywhere_is_left_out_or_refuses_only_what_is_no_batch(
    engine: Engine, change: tuple[tuple[Any, ...], Any, Any]
) -> None:
    path, new, second = change
    document = _changed(path, new)
    touched = [path]
    if second is not _MISSING and len(path) > 1:  # and the same field of another entry
        other = (*path[:-2], 0, path[-1]) if isinstance(path[-2], int) else None
        if other and other != path and other in _PATHS:
            target: Any = document
            for step in other[:-1]:
                target = target[step]
            if isinstance(target, dict):
                target[other[-1]] = second
                touched.append(other)
    try:
        parsed = parse_batch(clean_document(document))
    except ValidationError as exc:
        assert _may_refuse(path), (path, new, exc.errors(include_url=False)[:3])
        return
    factory = make_session_factory(engine)
    try:
        with session_scope(factory) as session:
            node = fleet_service.get_or_create_node(session, hostname="node-a")
            answer = ingest_service.store_batch(
                session,
                node=node,
                batch=parsed,
                received_at=AT + timedelta(seconds=60),
                future_tolerance_s=300.0,
                retention_days=30.0,
            )
    except (Forbidden, Conflict):
        assert _may_refuse(path), path  # another hostname; a batch id used before
        return
    listed = {tuple(item.loc) for item in answer.left_out}
    assert all(item.reason for item in answer.left_out)
    for loc in listed:  # nothing left out but what was changed (or the entry holding it)
        assert any(p[: len(loc)] == loc or loc[: len(p)] == p for p in touched), (touched, loc)
    assert answer.samples_received == answer.samples_stored + answer.samples_rejected + (
        answer.samples_duplicate
    )


@given(mutations, st.booleans())
def test_fuzz_a_mutated_body_gives_the_batch_or_a_400_or_413(
    changes: list[Mutation], gzipped: bool
) -> None:
    raw = mutate(orjson.dumps(_document()), changes)
    if gzipped:
        raw = mutate(gzip.compress(orjson.dumps(_document())), changes)
    try:
        decoded = body.decode(raw, encoding="gzip" if gzipped else "identity", max_bytes=2**20)
    except (BadRequest, PayloadTooLarge) as exc:
        assert str(exc)
        return
    try:
        parse_batch(decoded.document if decoded.plain else clean_document(decoded.document))
    except ValidationError as exc:
        assert exc.errors()  # names the fields


def test_nan_and_infinity_in_a_sample_are_nulled_like_any_implausible_value() -> None:
    document = _document()
    document["samples"][0]["power_w"] = math.nan
    document["samples"][1]["temp_c"] = -math.inf
    parsed = parse_batch(document)
    assert parsed.samples[0][3] == ("power_w",) and parsed.samples[1][3] == ("temp_c",)
