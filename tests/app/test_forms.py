"""The shared form reader (app/forms.py) through a real server on both backends: a body over
the limit is a 413, a file part or a non-UTF-8 body a 400, another content type a 415, each
naming the problem; a multipart form without files reads like an urlencoded one."""

from __future__ import annotations

from urllib.parse import quote

import httpx

from app.forms import MAX_FORM_BYTES, MAX_FORM_FIELDS
from tests.live_server import LiveServer

URLENCODED = {"content-type": "application/x-www-form-urlencoded"}


def test_form_limits_answer_4xx_naming_the_problem(server: LiveServer) -> None:
    rules = f"{server.url}/rules/_preview"
    huge = httpx.post(
        rules, content=b"document=" + b"a" * MAX_FORM_BYTES, headers=URLENCODED, timeout=30
    )
    many = httpx.post(
        rules,
        content="&".join(f"f{i}=x" for i in range(MAX_FORM_FIELDS + 1)),
        headers=URLENCODED,
        timeout=30,
    )
    latin1 = httpx.post(rules, content=b"document=caf\xe9", headers=URLENCODED, timeout=30)
    with_file = httpx.post(rules, files={"document": ("rule.yaml", b"name: x")}, timeout=30)
    as_json = httpx.post(rules, json={"document": "x"}, timeout=30)

    assert (huge.status_code, many.status_code) == (413, 400)
    assert f"the form is over {MAX_FORM_BYTES} bytes" in huge.text
    assert f"the form: Too many fields. Maximum number of fields is {MAX_FORM_FIELDS}." in many.text
    assert (latin1.status_code, with_file.status_code, as_json.status_code) == (400, 400, 415)
    assert "the form: Too many files. Maximum number of files is 0." in with_file.text
    assert "the form is not UTF-8" in latin1.text
    assert "content-type: expected a form, got &#39;application/json&#39;" in as_json.text


def test_multipart_and_urlencoded_forms_read_alike(server: LiveServer) -> None:
    url = f"{server.url}/runbooks/form-check/preview"
    text = "# Title ü & <b>"
    encoded = httpx.post(url, content=f"markdown={quote(text)}", headers=URLENCODED, timeout=30)
    multipart = httpx.post(url, files={"markdown": (None, text.encode())}, timeout=30)

    assert encoded.status_code == 200, encoded.text
    assert multipart.status_code == 200, multipart.text
    assert encoded.text == multipart.text
    assert "Title ü &amp;" in encoded.text
