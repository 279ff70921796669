"""HTML form bodies of the alert pages (read by :func:`app.forms.read_form`) and their
validation into field-named errors for inline display."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo
from typing import Any

import yaml
from pydantic import ValidationError

from app.alerts.rule_reach import Kept, beyond
from app.alerts.schemas import Matcher, storable_text
from app.alerts.spec import RuleSpec, parse_duration
from app.forms import Form
from app.ingest.fields import plain_text

MATCHER_ROWS = 4


def error_field(loc: tuple[Any, ...], doc: Any) -> str:
    """A pydantic error location as a dotted field name, without the discriminator tag of the
    condition union: ``("condition", "threshold", "metric")`` → ``condition.metric``."""
    parts = [str(p) for p in loc]
    kind = doc.get("condition", {}).get("kind") if isinstance(doc, dict) else None
    if len(parts) > 2 and parts[0] == "condition" and isinstance(kind, str) and parts[1] == kind:
        del parts[1]
    return ".".join(parts) or "document"


@dataclass
class RuleForm:
    """The rule editor: the YAML ``document`` as typed, the validated ``spec`` (None when
    invalid) and ``errors`` (field → message)."""

    document: str
    spec: RuleSpec | None = None
    errors: list[tuple[str, str]] = field(default_factory=list)


def parse_rule(document: str, kept: Kept | None = None) -> RuleForm:
    """Validate a rule typed as YAML (or JSON) against :class:`RuleSpec` and, with ``kept``,
    against what the server keeps (:func:`app.alerts.rule_reach.beyond`); errors name the
    field (``condition.metric``) or ``document`` for YAML syntax."""
    form = RuleForm(document)
    try:
        doc = yaml.safe_load(document)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        form.errors.append(("document", f"not valid YAML{where}: {getattr(exc, 'problem', exc)}"))
        return form
    if not isinstance(doc, dict):
        form.errors.append(("document", "the rule must be a mapping (name: …, condition: …)"))
        return form
    try:
        form.spec = RuleSpec.model_validate(doc)
    except ValidationError as exc:
        form.errors = [(error_field(e["loc"], doc), e["msg"]) for e in exc.errors()]
        return form
    if kept is not None and (far := beyond(form.spec, kept)):
        form.errors = [(".".join(loc), message) for loc, message in far]
        form.spec = None
    return form


@dataclass
class SilenceForm:
    """The silence editor as typed: matcher rows (name, op, value), ``starts``/``ends`` as
    ``datetime-local`` text in the viewer's zone, or a ``duration`` (``2h``), author and
    comment; after :func:`validate_silence`, ``errors`` (field → message) and the parsed
    values."""

    matchers: list[tuple[str, str, str]]
    starts: str = ""
    ends: str = ""
    duration: str = ""
    created_by: str = ""
    comment: str = ""
    team: str = ""
    errors: dict[str, str] = field(default_factory=dict)
    starts_at: datetime | None = None
    ends_at: datetime | None = None

    @classmethod
    def from_form(cls, form: Form) -> SilenceForm:
        """From the posted fields ``matcher_name``/``matcher_op``/``matcher_value`` (one per
        row), ``starts``, ``ends``, ``duration``, ``created_by``, ``comment``."""
        names = form.get("matcher_name", [])
        ops, values = list(form.get("matcher_op", [])), list(form.get("matcher_value", []))
        ops += ["="] * (len(names) - len(ops))
        values += [""] * (len(names) - len(values))
        rows = [(n.strip(), ops[i].strip(), values[i]) for i, n in enumerate(names)]
        return cls(
            matchers=rows,
            starts=form.one("starts"),
            ends=form.one("ends"),
            duration=form.one("duration"),
            created_by=form.one("created_by"),
            comment=(form.get("comment") or [""])[0],
            team=form.one("team")[:128],
        )

    def rows(self) -> list[tuple[str, str, str]]:
        """The matcher rows to draw: those typed plus blank ones up to :data:`MATCHER_ROWS`."""
        filled = [m for m in self.matchers if m[0] or m[2]]
        return filled + [("", "=", "")] * max(1, MATCHER_ROWS - len(filled))

    def matcher_dicts(self) -> list[dict[str, str]]:
        """The non-blank matchers as the service takes them."""
        return [{"name": n, "op": o, "value": v} for n, o, v in self.matchers if n or v]


def _local(text: str, zone: tzinfo) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=zone)


def validate_silence(form: SilenceForm, *, zone: tzinfo, now: datetime) -> SilenceForm:
    """Fill ``form.errors`` (keys: ``matchers.N``, ``matchers``, ``starts``, ``ends``,
    ``duration``, ``created_by``, ``comment``) and, when valid, ``starts_at``/``ends_at``.
    Times are wall-clock times in ``zone``; ``ends`` wins over ``duration``."""
    errors = form.errors
    errors.clear()
    matchers = form.matcher_dicts()
    if not matchers:
        errors["matchers"] = "at least one matcher (e.g. alertname = gpu-hot)"
    for i, m in enumerate(matchers):
        try:
            Matcher.model_validate(m)
        except ValidationError as exc:
            first = exc.errors()[0]
            errors[f"matchers.{i}"] = f"{'.'.join(map(str, first['loc']))}: {first['msg']}"
    starts_at = now
    if form.starts:
        try:
            starts_at = _local(form.starts, zone)
        except ValueError:
            errors["starts"] = f"not a date and time: {form.starts!r}"
    ends_at = None
    if form.ends:
        try:
            ends_at = _local(form.ends, zone)
        except ValueError:
            errors["ends"] = f"not a date and time: {form.ends!r}"
    elif form.duration:
        try:
            seconds = parse_duration(form.duration)
            ends_at = starts_at + timedelta(seconds=seconds)
            if seconds <= 0:
                errors["duration"] = "the duration must be longer than 0 s"
        except ValueError as exc:
            errors["duration"] = str(exc)
        except OverflowError:
            errors["duration"] = "the end would be after the year 9999"
    else:
        errors["ends"] = "give an end time or a duration"
    if form.ends and ends_at is not None and "ends" not in errors:
        if ends_at <= now:
            errors["ends"] = "the end is in the past"
        elif "starts" not in errors and ends_at <= starts_at:
            errors["ends"] = "the end must be after the start"
    if not form.created_by:
        errors["created_by"] = "who creates this silence (required)"
    elif len(form.created_by) > 128:
        errors["created_by"] = "at most 128 characters"
    if len(form.comment) > 4096:
        errors["comment"] = "at most 4096 characters"
    for name, check in (("created_by", plain_text), ("comment", storable_text)):
        try:
            check(getattr(form, name))
        except ValueError as exc:  # NUL: PostgreSQL refuses it, so every backend does
            errors.setdefault(name, str(exc))
    if not errors:
        form.starts_at, form.ends_at = starts_at, ends_at
    return form
