"""JSON columns read back exactly what was stored: orjson parses them on Postgres, ``json``
where orjson would not keep a value exact (an integer beyond 64 bits)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import text

from app.db import json_loads, make_engine

DOCUMENTS: list[Any] = [
    {"hostname": "gpu-001", "labels": {"rack": "r1", "ünïcode": "✓"}},
    [18446744073709551615, -9223372036854775808, 2**53 + 1],
    {"counter": 2**64 * 1000 + 7, "exact": 123456789012345678901234567890},
    {"below_int64": -(2**63) - 1, "nineteen_digits": -9999999999999999999},
    [0.1, 12345.678, -2.5, None, True, "NaN"],
]


@pytest.mark.parametrize("document", DOCUMENTS)
def test_a_json_value_read_back_from_postgres_is_the_value_stored(
    postgres_url: str, document: Any
) -> None:
    engine = make_engine(postgres_url)
    try:
        with engine.connect() as conn:
            for cast in ("json", "jsonb"):
                stored = conn.scalar(
                    text(f"SELECT CAST(:doc AS {cast})"),
                    {"doc": json.dumps(document)},
                )
                assert stored == document
                assert type(stored) is type(document)
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    "raw",
    [
        "[99999999999999999999]",
        b'{"a": 123456789012345678901}',
        "[-9223372036854775809]",
        b"[-9999999999999999999]",
    ],
)
def test_integers_beyond_64_bits_stay_integers(raw: str | bytes) -> None:
    parsed = json_loads(raw)
    value = parsed[0] if isinstance(parsed, list) else parsed["a"]
    assert isinstance(value, int)
    assert str(value) in (raw if isinstance(raw, str) else raw.decode())


def test_what_orjson_refuses_json_still_parses() -> None:
    assert json_loads('{"a": NaN}')["a"] != json_loads('{"a": NaN}')["a"]  # NaN, as json reads it
