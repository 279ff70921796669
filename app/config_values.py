"""How a setting's text is read, and the start-up error that says what to write instead.

People type settings as plain text, into environment variables and config files, so besides
JSON a list is read from values separated by commas or whitespace (``127.0.0.1,10.0.0.0/8``), a
map from ``key=value`` pairs (``slack=1/1s,webhook=off``) and a boolean from true/false, 1/0,
yes/no or on/off in any case. A refused value is reported as one line,
``FLEETWATCH_<NAME>: [what is wrong; ]expected <form>, got '<value>'`` (:func:`error_line`).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

_SEPARATORS = re.compile(r"[\s,]+")
_AROUND_EQUALS = re.compile(r"\s*=\s*")
# user:password@ in a URL: never echoed into a log.
_PASSWORD = re.compile(r"(://[^:/@\s]*:)[^@\s]*@")
_SHOWN_CHARS = 200

BOOL_FORM = "true or false (also 1/0, yes/no, on/off)"
XIDS_FORM = "Xids (whole numbers) separated by commas (e.g. 48,79) or a JSON list"

#: The form of each setting whose form its type alone does not tell.
FORMS: dict[str, str] = {
    "notify_allow_hosts": "host names or CIDRs separated by commas (e.g. 127.0.0.1,10.0.0.0/8)"
    " or a JSON list",
    "notify_rate_limits": "kind=pace pairs separated by commas (e.g. "
    "slack=1/1s,discord=5/2s,webhook=off) or a JSON object",
    "metrics_node_labels": "node label names separated by commas (e.g. cluster,rack), at most"
    " 16, or a JSON list",
    "health_xid_unhealthy": XIDS_FORM,
    "health_xid_degraded": XIDS_FORM,
    "health_xid_ignored": XIDS_FORM,
    "database_url": "a postgresql:// or sqlite:/// URL (e.g. "
    "postgresql://fleetwatch@db.example:5432/fleetwatch)",
    "log_level": "one of critical, error, warning, info, debug",
    "remediation_hook": "a command line with placeholders {hostname}, {slurm_node}, {k8s_node},"
    " {reason}, {actor} (docs/remediation.md)",
    "kubeconfig": "the path of a kubeconfig file, or in-cluster",
    "slurm_scontrol": "the path of Slurm's scontrol",
    "external_url": "this server's base URL (e.g. https://fleetwatch.example)",
    "secret_key": "a secret text",
    "data_dir": "the path of a folder",
    "runbooks_dir": "the path of a folder",
    "host": "an address to listen on (e.g. 0.0.0.0)",
    "dcgm_endpoints": "dcgm-exporter URLs separated by commas (e.g. "
    "http://gpu-node-01:9400/metrics) or a JSON list",
    "dcgm_endpoints_file": "the path of a JSON or YAML file of file_sd target groups",
}

_UNITS = {"_s": "seconds", "_days": "days", "_bytes": "bytes", "_pct": "percent"}


def plain_list(value: Any, *, blank: Any = None) -> Any:
    """``value`` as a list where it is text: JSON when it starts with ``[``, else the items
    between commas and whitespace; blank text gives ``blank`` (the setting's default). Anything
    else (a TOML array, a keyword argument) is returned as it is, for the field to judge.

    Raises:
        ValueError: text starting with ``[`` that is not JSON.
    """
    if not isinstance(value, str):
        return value
    text = value.strip()
    if not text:
        return blank
    if text.startswith("["):
        return _json(text, "list")
    return [item for item in _SEPARATORS.split(text) if item]


def plain_ints(value: Any) -> Any:
    """:func:`plain_list` of whole numbers (``48,79``); blank text is ``None``.

    Raises:
        ValueError: an item of the plain form that is not a whole number, naming it.
    """
    if not isinstance(value, str) or value.strip().startswith("["):
        return plain_list(value)
    items = plain_list(value)
    if items is None:
        return None
    numbers = []
    for item in items:
        try:
            numbers.append(int(item))
        except ValueError:
            raise ValueError(f"{item!r} is not a whole number") from None
    return numbers


def plain_map(value: Any, *, shape: str = "key=value") -> Any:
    """``value`` as a dict where it is text: JSON when it starts with ``{``, else ``key=value``
    pairs between commas and whitespace (spaces around ``=`` allowed); blank text is ``{}``.

    Raises:
        ValueError: JSON that does not parse, a pair without ``=`` (described as ``shape``) or a
            key given twice.
    """
    if not isinstance(value, str):
        return value
    text = value.strip()
    if not text:
        return {}
    if text.startswith("{"):
        return _json(text, "object")
    pairs: dict[str, str] = {}
    for pair in _SEPARATORS.split(_AROUND_EQUALS.sub("=", text)):
        if not pair:
            continue
        key, equals, item = pair.partition("=")
        if not (key and equals and item):
            raise ValueError(f"{pair!r} is not {shape}")
        if key in pairs:
            raise ValueError(f"{key!r} twice")
        pairs[key] = item
    return pairs


def plain_bool(value: Any) -> Any:
    """Text stripped and in lower case (``" Off "`` → ``off``), for pydantic's boolean."""
    return value.strip().lower() if isinstance(value, str) else value


def _json(text: str, kind: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not a valid JSON {kind} ({exc.msg} at column {exc.colno})") from None


def expected_form(name: str, field: FieldInfo) -> str:
    """What setting ``name`` takes, in words, e.g. ``a whole number from 1 to 65535 (default
    8000)``."""
    if name in FORMS:
        return FORMS[name]
    annotation = field.annotation
    if annotation is bool:
        return BOOL_FORM
    if annotation in (int, float):
        return _number_form(name, field, whole=annotation is int)
    lengths = _bounds(field.metadata)
    if MinLen in lengths and MaxLen in lengths:
        return f"text of {lengths[MinLen]} to {lengths[MaxLen]} characters"
    return "text"


def _number_form(name: str, field: FieldInfo, *, whole: bool) -> str:
    noun = "a whole number" if whole else "a number"
    unit = next((u for suffix, u in _UNITS.items() if name.endswith(suffix)), None)
    if unit is not None:
        noun += f" of {unit}"
    b = _bounds(field.metadata)
    if Ge in b and Le in b:
        span = f" from {_n(b[Ge])} to {_n(b[Le])}"
    else:
        parts = [
            f"at least {_n(b[Ge])}" if Ge in b else "",
            f"more than {_n(b[Gt])}" if Gt in b else "",
        ]
        parts += [
            f"at most {_n(b[Le])}" if Le in b else "",
            f"less than {_n(b[Lt])}" if Lt in b else "",
        ]
        words = " and ".join(p for p in parts if p)
        span = f", {words}" if words else ""
    default = field.get_default(call_default_factory=True)
    return f"{noun}{span} (default {_n(default)})"


def _bounds(metadata: Iterable[Any]) -> dict[type, Any]:
    """The annotated-types constraints of a field by kind (``Ge`` → 1 …)."""
    found: dict[type, Any] = {}
    for item in metadata:
        for kind, attribute in ((Ge, "ge"), (Gt, "gt"), (Le, "le"), (Lt, "lt")):
            if isinstance(item, kind):
                found[kind] = getattr(item, attribute)
        if isinstance(item, MinLen):
            found[MinLen] = item.min_length
        if isinstance(item, MaxLen):
            found[MaxLen] = item.max_length
    return found


def _n(value: Any) -> str:
    """A bound as a person writes it: ``604800`` for ``604800.0``."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def error_line(
    err: ErrorDetails, *, fields: Mapping[str, FieldInfo], raw: Mapping[str, Any]
) -> str:
    """The start-up message for one validation error of the settings.

    ``fields``: the settings' fields by name; ``raw``: the values as given (environment text,
    config-file value or keyword argument) by field name, shown after ``got``.
    """
    loc = err["loc"]
    message = err["msg"].removeprefix("Value error, ")
    if not loc:  # a check across settings: its message names them
        return message
    name = str(loc[0])
    variable = f"FLEETWATCH_{name.upper()}"
    field = fields.get(name)
    if field is None:
        close = difflib.get_close_matches(name.lower(), fields, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        return (
            f"{variable}: no such setting{hint}; expected one of the settings in README.md's "
            f"table (a config-file key is the variable's name without FLEETWATCH_), "
            f"got {_shown(name, raw.get(name, err.get('input')))}"
        )
    detail = ""
    if len(loc) > 1:
        where = f"item {loc[1] + 1}" if isinstance(loc[1], int) else repr(loc[1])
        detail = f"{where}: {message}; "
    elif err["type"] == "value_error":
        detail = f"{message}; "
    got = _shown(name, raw.get(name, err.get("input")))
    return f"{variable}: {detail}expected {expected_form(name, field)}, got {got}"


def _shown(name: str, value: Any) -> str:
    """``value`` as the message quotes it: text in quotes, cut, passwords masked; never a
    secret key."""
    if name == "secret_key":
        return "a value (not shown)"
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = _PASSWORD.sub(r"\1***@", text)
    if len(text) > _SHOWN_CHARS:
        text = text[:_SHOWN_CHARS] + "…"
    return repr(text) if isinstance(value, str) else text
