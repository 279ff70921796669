"""DCGM's blank sentinels: the values DCGM (and so dcgm-exporter, which prints them as numbers)
gives for a field it has no value for.

Source: DCGM ``dcgmlib/src/nvcmvalue.h`` (mirrored in ``dcgm_structs.h``, ``DCGM_BLANK_VALUES``):
``DCGM_INT32_BLANK = 0x7ffffff0``, ``DCGM_INT64_BLANK = 0x7ffffffffffffff0`` and
``DCGM_FP64_BLANK = 140737488355328.0`` (2**47); the base plus 1, 2 and 3 are
``*_NOT_FOUND``, ``*_NOT_SUPPORTED`` and ``*_NOT_PERMISSIONED``, and ``DCGM_*_IS_BLANK(v)`` is
``v >= base``. dcgm-exporter's README quick-start shows one: ``DCGM_FI_DEV_MEMORY_TEMP`` =
``9223372036854775794`` (``DCGM_INT64_BLANK + 2``, not supported: a GPU without a memory
temperature sensor).
"""

from __future__ import annotations

from typing import Literal

INT32_BLANK = 0x7FFFFFF0
INT64_BLANK = 0x7FFFFFFFFFFFFFF0
FP64_BLANK = 140737488355328.0

_MEANINGS = ("blank", "not found", "not supported", "not permissioned")

#: How DCGM stores a field: a 64-bit integer or a double (dcgm-exporter prints the first with
#: ``%d``, the second with ``%f``).
Kind = Literal["int64", "fp64"]


def blank_reason(value: float, kind: Kind) -> str | None:
    """Why ``value`` of a field of DCGM type ``kind`` is a blank sentinel (e.g. ``"not
    supported (DCGM_INT64_BLANK+2)"``), or None for a real value.

    An integer at or above ``DCGM_INT64_BLANK`` is blank for any field (an int64 sentinel
    printed as a float, ``9.223372036854776e+18``, too: it cannot be told apart, so it is
    plain ``blank``); a value at or above ``DCGM_FP64_BLANK`` is blank for a double field; an
    integer field's value in ``DCGM_INT32_BLANK`` … ``2**31 - 1`` is an int32 sentinel that
    went through a 64-bit field (DCGM's own ``nvcmvalue_int32_to_int64`` keeps the offset).
    """
    if value != value:  # NaN: not a sentinel; the catalog's bounds null it
        return None
    if value >= INT64_BLANK:
        return _named(value, INT64_BLANK, "DCGM_INT64_BLANK")
    if kind == "fp64" and value >= FP64_BLANK:
        return _named(value, FP64_BLANK, "DCGM_FP64_BLANK")
    if kind == "int64" and INT32_BLANK <= value < 2**31:
        return _named(value, INT32_BLANK, "DCGM_INT32_BLANK")
    return None


def _named(value: float, base: float, name: str) -> str:
    offset = value - base
    if isinstance(value, int) or (isinstance(value, float) and base < 2**53):
        whole = int(offset)
        if whole == offset and 0 <= whole < len(_MEANINGS):
            suffix = f"+{whole}" if whole else ""
            return f"{_MEANINGS[whole]} ({name}{suffix})"
    return f"blank ({name} or above)"
