"""Text field types of the ingest payload.

Free text from a GPU node (device names, kernel messages) can carry bytes no database or browser
wants: PostgreSQL refuses NUL in text, lone UTF-16 surrogates cannot be encoded, and bidi
controls make a label display as something else. Free text is cleaned; identifiers and labels,
which people search and filter by, are refused with 422 instead.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, Field

REPLACEMENT = "\ufffd"
_SURROGATES = re.compile("[\ud800-\udfff]")
# C0/C1 controls, the bidi marks, embeddings, overrides and isolates (U+061C, U+200E/F,
# U+202A–202E, U+2066–2069), line/paragraph separators and the BOM.
_CONTROLS = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]"
)


def clean_text(value: str) -> str:
    """NUL and lone surrogates replaced by U+FFFD; everything else kept."""
    return _SURROGATES.sub(REPLACEMENT, value.replace("\x00", REPLACEMENT))


def plain_text(value: str) -> str:
    """``value`` unchanged if it has no control, bidi-override or surrogate character.

    Raises:
        ValueError: naming the first offending character's code point.
    """
    bad = _CONTROLS.search(value) or _SURROGATES.search(value)
    if bad:
        raise ValueError(f"contains the control character U+{ord(bad.group()):04X}")
    return value


#: Free text (versions, names, reasons): cleaned, never refused for its characters.
Text64 = Annotated[str, Field(max_length=64), AfterValidator(clean_text)]
Text256 = Annotated[str, Field(max_length=256), AfterValidator(clean_text)]
Text1024 = Annotated[str, Field(max_length=1024), AfterValidator(clean_text)]
#: A message of any length, cleaned (callers cut it to their limit).
Message = Annotated[str, AfterValidator(clean_text)]

#: Identifiers and label values: refused (422) if they hold control characters.
GpuUuid = Annotated[str, Field(min_length=1, max_length=96), AfterValidator(plain_text)]
BusId = Annotated[str, Field(max_length=32), AfterValidator(plain_text)]
LabelValue = Annotated[str, Field(max_length=256), AfterValidator(plain_text)]


def clean_document(document: Any) -> Any:
    """A parsed JSON document with every string (keys too) passed through :func:`clean_text`.

    Run before validation, so no field of any section can carry a NUL (PostgreSQL refuses it)
    or a lone surrogate (UTF-8 cannot encode it) into the database. Iterative: a deeply nested
    document cannot exhaust the interpreter's stack here.
    """
    if isinstance(document, str):
        return clean_text(document)
    if not isinstance(document, dict | list):
        return document
    root: list[Any] = [document]
    stack: list[tuple[Any, Any, Any]] = [(root, 0, document)]
    while stack:
        parent, key, value = stack.pop()
        if isinstance(value, dict):
            cleaned: dict[str, Any] = {}
            parent[key] = cleaned
            for k, v in value.items():
                new_key = clean_text(k)
                cleaned[new_key] = v
                stack.append((cleaned, new_key, v))
        elif isinstance(value, list):
            copy = list(value)
            parent[key] = copy
            for i, v in enumerate(copy):
                stack.append((copy, i, v))
        elif isinstance(value, str):
            parent[key] = clean_text(value)
    return root[0]
