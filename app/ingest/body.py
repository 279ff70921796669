"""Reading an ingest request body safely: content type, size limit, gzip, JSON.

The size limit applies both to the bytes received and to the bytes after decompression, so a
gzip bomb cannot expand past it (RFC 1952 streams are decompressed with a bounded output).
"""

from __future__ import annotations

import json
import zlib
from typing import Any

from starlette.requests import Request

from app.errors import BadRequest, PayloadTooLarge, UnsupportedMediaType


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
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise PayloadTooLarge(f"body exceeds the limit of {max_bytes} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def decode_json(raw: bytes, *, encoding: str, max_bytes: int) -> Any:
    """Decompress (if gzip) and parse the body.

    Raises:
        PayloadTooLarge: the decompressed body exceeds ``max_bytes``.
        BadRequest: invalid gzip, invalid UTF-8, or invalid JSON (with line and column).
    """
    if encoding.strip().lower() in ("gzip", "x-gzip"):
        inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        try:
            data = inflater.decompress(raw, max_bytes + 1)
            if len(data) > max_bytes or inflater.unconsumed_tail:
                raise PayloadTooLarge(f"decompressed body exceeds the limit of {max_bytes} bytes")
            if not inflater.eof:
                raise BadRequest("gzip stream is truncated")
        except zlib.error as exc:
            raise BadRequest(f"body is not valid gzip: {exc}") from None
    else:
        data = raw
    if not data:
        raise BadRequest("empty body: expected a JSON ingest batch")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"body is not valid UTF-8 at byte {exc.start}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadRequest(
            f"body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
