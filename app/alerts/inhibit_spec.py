"""The inhibition rule document (``InhibitRuleSpec``), in the shape of Alertmanager's
``inhibit_rules``: while an alert matching ``source_matchers`` is firing, alerts matching
``target_matchers`` that carry the same values of every ``equal`` label are not notified.

Matchers are written as Alertmanager writes them (``alertname="gpu-lost"``,
``severity=~"warning|info"``) or as the silences API's ``{name, op, value}`` objects; both are
stored as the latter. The same document is a YAML file entry (``inhibit_rules:``), the JSON
API body and ``alert_inhibit_rule.spec``.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, field_validator

from app.alerts.schemas import LABEL_NAME_RE, Matcher, StorableText
from app.alerts.spec import NAME_RE

#: ``name op "value"`` or ``name op value`` (unquoted: no space, comma, quote or brace), as in
#: Alertmanager's matcher syntax (``amtool``, ``*_matchers`` of its configuration).
_MATCHER_TEXT = re.compile(
    r'^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*(?:"((?:[^"\\]|\\.)*)"|([^\s",{}]*))\s*$'
)


def parse_matcher(value: Any) -> Any:
    """A matcher object from Alertmanager's text form (``alertname="gpu-lost"``); anything
    else is returned as it is, for :class:`Matcher` to validate.

    Raises:
        ValueError: text that is not ``name op "value"``, naming the expected form.
    """
    if not isinstance(value, str):
        return value
    m = _MATCHER_TEXT.match(value)
    if m is None:
        raise ValueError(
            f"not a matcher: {value[:80]!r} (expected name, one of = != =~ !~, and a value "
            'in double quotes, e.g. alertname="gpu-lost")'
        )
    name, op, quoted, bare = m.groups()
    if quoted is None:
        return {"name": name, "op": op, "value": bare}
    try:
        text = json.loads(f'"{quoted}"')  # the escapes Alertmanager's quoted values allow
    except json.JSONDecodeError:
        raise ValueError(f"not a matcher: {value[:80]!r} (bad escape in the value)") from None
    return {"name": name, "op": op, "value": text}


#: One matcher, in Alertmanager's text form or as an object (errors carry the item's index).
MatcherItem = Annotated[Matcher, BeforeValidator(parse_matcher)]


class InhibitRuleSpec(BaseModel):
    """One inhibition rule.

    Attributes:
        name: unique; letters, digits, ``_ . -``.
        description: why the targets are noise while the source fires (shown on the page).
        source_matchers: what the inhibiting (firing) alert matches, 1–16 matchers.
        target_matchers: what an inhibited alert matches, 1–16 matchers.
        equal: labels whose values the source and the target must share (a label missing on
            both counts as equal, as in Alertmanager); empty: any source mutes every target.
        enabled: a disabled rule inhibits nothing.
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=128)
    description: StorableText = Field(default="", max_length=4096)
    source_matchers: list[MatcherItem] = Field(min_length=1, max_length=16)
    target_matchers: list[MatcherItem] = Field(min_length=1, max_length=16)
    equal: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(
        default_factory=list, max_length=16
    )
    enabled: StrictBool = True

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.fullmatch(v):
            raise ValueError("a name is a letter or digit, then letters, digits, '_', '.', '-'")
        return v

    @field_validator("equal")
    @classmethod
    def _equal(cls, v: list[str]) -> list[str]:
        for name in v:
            if not LABEL_NAME_RE.fullmatch(name):
                raise ValueError(
                    f"{name[:80]!r} is not a label name (a letter or '_' then letters, digits, '_')"
                )
        if len(set(v)) != len(v):
            raise ValueError("a label is named twice")
        return v

    def document(self) -> dict[str, Any]:
        """The stored form: matchers as ``{name, op, value}`` objects."""
        return self.model_dump(mode="json")
