"""Reading an ingest request body safely: content type, size limit, gzip, JSON.

The size limit applies both to the bytes received and to the bytes after decompression, so a
gzip bomb cannot expand past it (RFC 1952 streams are decompressed with a bounded output).

JSON is parsed by orjson (several times faster than the standard library on a large batch) when
it gives what ``json.loads`` would: anything orjson refuses, and anything it would read otherwise
(an integer wider than 64 bits, which it turns into a float), goes to ``json.loads``, which gives
the answer or the error it always gave. A key repeated in one object is refused either way.
"""

from __future__ import annotations

import json
import logging
import zlib
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.requests import ClientDisconnect, Request

from app.errors import BadRequest, ClientGone, PayloadTooLarge, UnsupportedMediaType

log = logging.getLogger(__name__)


def check_content_type(request: Request) -> None:
    """Accept ``application/json`` (UTF-8) with identity or gzip encoding.

    Raises:
        UnsupportedMediaType: another media type, charset or content encoding.
    """
    content_type = request.headers.get("content-type", "")
    media, _, params = content_type.partition(";")
    if media.strip().lower() != "application/json":
        raise UnsupportedMediaType(
            f"Content-Type must be application/json, got {content_type or 'none'!r}"
        )
    for param in params.split(";"):
        key, _, value = param.strip().partition("=")
        if key.lower() == "charset" and value.strip().strip('"').lower() not in ("utf-8", "utf8"):
            raise UnsupportedMediaType(f"charset must be utf-8, got {value.strip()!r}")
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("identity", "gzip", "x-gzip", ""):
        raise UnsupportedMediaType(f"Content-Encoding must be gzip or identity, got {encoding!r}")


async def read_limited(request: Request, *, max_bytes: int) -> bytes:
    """The raw body, refusing more than ``max_bytes`` before reading it all where possible.

    Raises:
        PayloadTooLarge: ``Content-Length`` or the streamed body exceeds ``max_bytes``.
        BadRequest: ``Content-Length`` is not an integer.
        ClientGone: the client disconnected before the whole body arrived.
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            length = int(declared)
        except ValueError:
            raise BadRequest("Content-Length is not an integer") from None
        if length > max_bytes:
            raise PayloadTooLarge(f"body of {length} bytes exceeds the limit of {max_bytes} bytes")
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_bytes:
                raise PayloadTooLarge(f"body exceeds the limit of {max_bytes} bytes")
            chunks.append(chunk)
    except ClientDisconnect:
        # One log line (below), not the 40-line traceback of an unhandled ASGI error per
        # agent that timed out on a busy server.
        log.info("client went away after %d bytes of its body", size)
        raise ClientGone("the client closed the connection before its body was read") from None
    return b"".join(chunks)


@dataclass(frozen=True)
class Decoded:
    """A parsed body.

    Attributes:
        document: the JSON value, as ``json.loads`` gives it.
        fast: parsed by orjson: no ``NaN`` or ``Infinity``, no lone surrogate, every integer
            within 64 bits.
        plain: no string (key or value) holds NUL or a lone surrogate, so
            :func:`app.ingest.fields.clean_document` would change nothing.
        canonical: where ``fast``, :func:`canonical` of the document (written once, for the
            repeated-key check and the batch's digest); else ``None``.
    """

    document: Any
    fast: bool
    plain: bool
    canonical: bytes | None = None


def decode_json(raw: bytes, *, encoding: str, max_bytes: int) -> Any:
    """Decompress (if gzip) and parse the body; see :func:`decode`."""
    return decode(raw, encoding=encoding, max_bytes=max_bytes).document


def decode(raw: bytes, *, encoding: str, max_bytes: int) -> Decoded:
    """Decompress (if gzip) and parse the body.

    Raises:
        PayloadTooLarge: the decompressed body exceeds ``max_bytes``.
        BadRequest: invalid gzip, invalid UTF-8, invalid JSON (with line and column), a key
            repeated in one object, nesting too deep or a number too long to convert.
    """
    data = gunzip(raw, max_bytes=max_bytes) if encoding.strip().lower() in GZIP else raw
    if not data:
        raise BadRequest("empty body: expected a JSON ingest batch")
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError:
        return Decoded(_standard(data), fast=False, plain=False)
    if _has_wide_int(data):
        return Decoded(_standard(data), fast=False, plain=False)
    # One scan rules out both escapes below in a usual body: a search for one byte (memchr)
    # first, ~60 times faster than for the four of \u00 in a 1-MB body without backslashes.
    escaped = _BACKSLASH in data and _ESCAPE in data
    text = canonical(document)
    if _lost_keys(data, document, text, escaped=escaped):
        _standard(data)  # raises, naming the repeated key
    plain = not escaped or _NUL_ESCAPE not in data
    return Decoded(document, fast=True, plain=plain, canonical=text)


def canonical(document: Any) -> bytes:
    """The document without ``sent_at`` (which the agent restamps at each send attempt), keys
    sorted, as orjson writes it: the text of a batch's content digest
    (:func:`app.ingest.service.content_digest`).

    Raises:
        orjson.JSONEncodeError: what orjson cannot write (a lone surrogate, an integer beyond 64
            bits); never for a document orjson parsed.
    """
    return orjson.dumps(without_sent_at(document), option=orjson.OPT_SORT_KEYS)


def without_sent_at(document: Any) -> Any:
    """``document`` less its top-level ``sent_at`` key, where it is an object."""
    if isinstance(document, dict):
        return {k: v for k, v in document.items() if k != "sent_at"}
    return document


def _standard(data: bytes) -> Any:
    """``json.loads`` with repeated keys refused: the reference for :func:`decode`."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"body is not valid UTF-8 at byte {exc.start}") from None
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        raise BadRequest(
            f"body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except RecursionError:
        raise BadRequest("body is not acceptable JSON: nested too deeply") from None
    except ValueError as exc:  # Python's int digit limit, or a duplicate key
        raise BadRequest(f"body is not acceptable JSON: {exc}") from None


GZIP = ("gzip", "x-gzip")

_BACKSLASH = b"\\"
_ESCAPE = b"\\u00"
_NUL_ESCAPE = b"\\u0000"
_COLON_ESCAPES = (b"\\u003a", b"\\u003A")
_DIGIT_MARKS = bytes(0x39 if 0x30 <= i <= 0x39 else 0x20 for i in range(256))
_WIDE_RUN = b"9" * 19  # every integer orjson would turn into a float has at least 19 digits


def _lost_keys(data: bytes, document: Any, text: bytes, *, escaped: bool) -> bool:
    """Whether orjson dropped a repeated key (it keeps the last value silently).

    Every ``:`` of the body is either a key's separator or a character of a string; written
    back by orjson (``text``: :func:`canonical`, which leaves out ``sent_at``, counted here
    apart), the document has the same strings, so it has fewer colons exactly when a key was
    dropped. A colon escaped as ``\\u003a`` would upset the count: then the standard parser
    decides. ``escaped``: the body holds ``\\u00``.
    """
    if escaped and any(escape in data for escape in _COLON_ESCAPES):
        _standard(data)
        return False
    colons = text.count(b":")
    if isinstance(document, dict) and "sent_at" in document:
        colons += 1 + orjson.dumps(document["sent_at"]).count(b":")
    return colons != data.count(b":")


def _has_wide_int(data: bytes) -> bool:
    """Whether the body may hold an integer outside −2⁶³ … 2⁶⁴−1, which orjson reads as a
    float where ``json.loads`` keeps the exact integer. Digit runs inside strings and
    fractions count too: a false alarm only costs the slower parser."""
    marks = data.translate(_DIGIT_MARKS)
    start = marks.find(_WIDE_RUN)
    while start != -1:
        end = start + len(_WIDE_RUN)
        while end < len(marks) and marks[end] == 0x39:
            end += 1
        negative = start > 0 and data[start - 1] == 0x2D
        # More than 20 digits is wider than 64 bits whatever they are; int() would refuse a
        # run of 4,300 and more (a long number in a message string: a 500, found by fuzzing).
        if end - start > 20 or int(data[start:end]) > (2**63 if negative else 2**64 - 1):
            return True
        start = marks.find(_WIDE_RUN, end)
    return False


def gunzip(raw: bytes, *, max_bytes: int) -> bytes:
    """Inflate a gzip body of one or more members (RFC 1952 §2.2), never past ``max_bytes``.

    Raises:
        PayloadTooLarge: more than ``max_bytes`` once inflated.
        BadRequest: not gzip, truncated, or followed by bytes that are not another member.
    """
    out = bytearray()
    rest = raw
    while True:
        inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        try:
            out += inflater.decompress(rest, max_bytes + 1 - len(out))
        except zlib.error as exc:
            raise BadRequest(f"body is not valid gzip: {exc}") from None
        if len(out) > max_bytes or inflater.unconsumed_tail:
            raise PayloadTooLarge(f"decompressed body exceeds the limit of {max_bytes} bytes")
        if not inflater.eof:
            raise BadRequest("gzip stream is truncated")
        rest = inflater.unused_data
        if not rest:
            return bytes(out)
        if not rest.startswith(b"\x1f\x8b"):
            raise BadRequest("unexpected bytes after the end of the gzip stream")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` refusing an object that names a key twice: silently keeping the
    last ``samples`` of two would lose data."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"key {key!r} appears twice in one object")
        result[key] = value
    return result
