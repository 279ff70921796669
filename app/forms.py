"""HTML form bodies (``application/x-www-form-urlencoded`` or ``multipart/form-data`` without
files) read through Starlette's parser (python-multipart), with size and field-count limits
that answer 413/400 naming the problem, never a 500."""

from __future__ import annotations

import re

from fastapi import Request
from starlette.exceptions import HTTPException

from app.errors import BadRequest, PayloadTooLarge, UnsupportedMediaType

#: The largest form body accepted (bytes): the runbook editor's Markdown is the biggest field.
MAX_FORM_BYTES = 256 * 1024
#: The most fields one form may send (the silence editor's matcher rows are the most).
MAX_FORM_FIELDS = 200
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
_SITE_PATH = re.compile(r"/[A-Za-z0-9/_.~%#?=&-]*")


def back_path(back: str, default: str) -> str:
    """Where a form's ``back`` field asks to return: a plain path of this site, else
    ``default`` — never an open redirect (``//host``, ``https://…``), never a header
    injection (a newline or any character a path does not need)."""
    if _SITE_PATH.fullmatch(back) and not back.startswith("//"):
        return back
    return default


class Form(dict[str, list[str]]):
    """A parsed form: field name → every value sent, in order."""

    def one(self, name: str) -> str:
        """The first value of ``name`` stripped, or ``""``."""
        return (self.get(name) or [""])[0].strip()

    def first(self) -> dict[str, str]:
        """Field name → its first value, unstripped."""
        return {name: values[0] for name, values in self.items()}


async def read_form(request: Request) -> Form:
    """FastAPI dependency: :func:`parse_form` with ``MAX_FORM_BYTES``."""
    return await parse_form(request, max_bytes=MAX_FORM_BYTES)


async def parse_form(request: Request, *, max_bytes: int) -> Form:
    """The request's form (a body with no content type must be empty).

    Raises:
        UnsupportedMediaType: another content type, or a body without one.
        PayloadTooLarge: a body over ``max_bytes`` (Content-Length or bytes read).
        BadRequest: an urlencoded body that is not UTF-8, a file part, over
            ``MAX_FORM_FIELDS`` fields.
    """
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind not in (*FORM_TYPES, ""):
        raise UnsupportedMediaType(f"content-type: expected a form, got {kind!r}")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise PayloadTooLarge(f"the form is over {max_bytes} bytes")
    body = await request.body()  # cached: request.form() parses these bytes
    if len(body) > max_bytes:
        raise PayloadTooLarge(f"the form is over {max_bytes} bytes")
    if kind == "":
        if body.strip():
            raise UnsupportedMediaType("content-type: expected a form, got none")
        return Form()
    if kind == FORM_TYPES[0]:
        try:
            body.decode()
        except UnicodeDecodeError:
            raise BadRequest("the form is not UTF-8") from None
    try:
        data = await request.form(max_files=0, max_fields=MAX_FORM_FIELDS, max_part_size=max_bytes)
    except HTTPException as exc:  # python-multipart's limits, as Starlette reports them
        raise BadRequest(f"the form: {exc.detail}") from None
    form = Form()
    for name, value in data.multi_items():
        if not isinstance(value, str):
            raise BadRequest(f"{name}: files are not accepted")
        form.setdefault(name, []).append(value)
    if sum(len(v) for v in form.values()) > MAX_FORM_FIELDS:
        raise BadRequest(f"the form has more than {MAX_FORM_FIELDS} fields")
    return form
