"""Text field types of the ingest payload.

Free text from a GPU node (device names, kernel messages) can carry bytes no database or browser
wants: PostgreSQL refuses NUL in text, lone UTF-16 surrogates cannot be encoded, and bidi
controls make a label display as something else. Free text is cleaned; identifiers and labels,
which people search and filter by, are refused with 422 instead.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field

REPLACEMENT = "\ufffd"
_SURROGATES = re.compile("[\ud800-\udfff]")
# C0/C1 controls, and the bidi embeddings/overrides/isolates (U+202A–202E, U+2066–2069).
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


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
