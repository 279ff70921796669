"""The four roles, ordered: each role may do what the ones before it may.

* ``viewer``: every dashboard and read API.
* ``responder``: acknowledge, silence, incident, maintenance and lifecycle actions (for their
  teams where the object has an owning team).
* ``editor``: rules, runbooks, channels and routes (of their teams where the object has one).
* ``admin``: users, teams, tokens, the audit trail and settings; every team.
"""

from __future__ import annotations

from enum import IntEnum


class Role(IntEnum):
    """A role; compare with ``>=`` (``Role.editor >= Role.responder``)."""

    viewer = 1
    responder = 2
    editor = 3
    admin = 4

    @classmethod
    def parse(cls, text: str) -> Role:
        """The role named ``text`` (case-insensitive).

        Raises:
            ValueError: not one of viewer, responder, editor, admin (the message lists them).
        """
        try:
            return cls[text.strip().lower()]
        except KeyError:
            names = ", ".join(r.name for r in cls)
            raise ValueError(f"unknown role {text!r} (expected one of {names})") from None
