"""Slurm node states through ``scontrol`` (Slurm's own command-line client).

Fleetwatch drains a node it quarantines and resumes it when it returns to service::

    scontrol update NodeName=<node> State=DRAIN Reason="fleetwatch: <reason>"
    scontrol update NodeName=<node> State=RESUME

and reads a node's state with ``scontrol show node -o <node>`` (one line of ``Key=Value``
pairs; ``State`` such as ``IDLE+DRAIN``, ``MIXED+DRAIN``, ``DOWN*+DRAIN``; ``Reason`` last, as
``<text> [<user>@<time>]``). scontrol finds the controller through ``SLURM_CONF`` or
``/etc/slurm/slurm.conf`` and authenticates with munge as the user the server runs as, who must
be a Slurm operator (docs/remediation.md). Commands run without a shell; each argument is one
``argv`` entry, so a reason needs no quoting.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.remediation import commands

#: Slurm keeps a reason of any length, but ``sinfo -R`` shows the first 20 characters and
#: ``scontrol show node`` the whole: keep it one readable line.
MAX_REASON = 200
REASON_PREFIX = "fleetwatch: "

_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def slurm_reason(reason: str) -> str:
    """The ``Reason`` Fleetwatch gives Slurm: prefixed, one line, double quotes made single,
    at most :data:`MAX_REASON` characters (an ellipsis where cut)."""
    # scontrol strips double quotes from a value (a trailing one is lost): single ones stay.
    text = REASON_PREFIX + " ".join(_CONTROL.sub(" ", reason).replace('"', "'").split())
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 1] + "…"


def drain_command(scontrol: str, node: str, reason: str) -> list[str]:
    """``argv`` draining ``node`` with :func:`slurm_reason` of ``reason``."""
    return [scontrol, "update", f"NodeName={node}", "State=DRAIN", f"Reason={slurm_reason(reason)}"]


def resume_command(scontrol: str, node: str) -> list[str]:
    """``argv`` returning a drained ``node`` to service."""
    return [scontrol, "update", f"NodeName={node}", "State=RESUME"]


def show_command(scontrol: str, node: str) -> list[str]:
    """``argv`` printing ``node`` as one line of ``Key=Value`` pairs."""
    return [scontrol, "show", "node", "-o", node]


@dataclass(frozen=True)
class SlurmNode:
    """A node as ``scontrol show node -o`` prints it.

    Attributes:
        name: ``NodeName``.
        state: ``State`` as printed, e.g. ``IDLE+DRAIN``.
        flags: its words split on ``+`` without the ``*`` (not responding) mark, e.g.
            ``{"IDLE", "DRAIN"}``.
        reason: ``Reason`` without Slurm's ``[user@time]`` suffix, or ``None``.
    """

    name: str
    state: str
    flags: frozenset[str]
    reason: str | None

    @property
    def drained(self) -> bool:
        """Draining or drained: Slurm starts no new job on it."""
        return "DRAIN" in self.flags


_SUFFIX = re.compile(r"\s*\[[^\]]*@[^\]]*\]\s*$")
_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_]*)=")


def parse_show_node(text: str) -> SlurmNode:
    """The node of ``scontrol show node -o`` output (the first line naming one).

    ``Reason`` runs to the end of the line (it may hold spaces and ``=``); other values end at
    the next `` Key=``.

    Raises:
        ValueError: no ``NodeName=`` line, or no ``State=`` in it.
    """
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("NodeName="):
            continue
        head, sep, reason = line.partition(" Reason=")
        fields: dict[str, str] = {}
        keys = list(_KEY.finditer(head))
        for i, match in enumerate(keys):
            end = keys[i + 1].start() if i + 1 < len(keys) else len(head)
            fields[match.group(1)] = head[match.end() : end].strip()
        state = fields.get("State")
        if state is None:
            raise ValueError(f"no State= in scontrol output: {line[:200]!r}")
        flags = frozenset(word.rstrip("*~#!%$@^-") for word in state.split("+") if word)
        kept = _SUFFIX.sub("", reason).strip() if sep else ""
        return SlurmNode(fields.get("NodeName", ""), state, flags, kept or None)
    raise ValueError(f"no NodeName= line in scontrol output: {text[:200]!r}")


def parse_show_nodes(text: str) -> list[SlurmNode]:
    """Every node of ``scontrol show node -o`` output (one line each); a line that cannot be
    read is skipped, never the others."""
    nodes = []
    for line in text.splitlines():
        if line.strip().startswith("NodeName="):
            try:
                nodes.append(parse_show_node(line))
            except ValueError:
                continue
    return nodes


def show_all_command(scontrol: str) -> list[str]:
    """``argv`` printing every node, one line each."""
    return [scontrol, "show", "node", "-o"]


def already_done(verb: str, scontrol: str, node: str, *, timeout_s: float) -> str | None:
    """Why ``verb`` (``drain`` / ``resume``) of ``node`` must not run, from ``scontrol show
    node``: a drain of a node someone else drained (it would overwrite their reason, and
    Fleetwatch's resume would later undo their drain), a resume of a node that is not drained
    (Slurm refuses it) or that someone else drained. ``None``: run it (also when the node
    cannot be read: the update then says what is wrong)."""
    shown = commands.run(show_command(scontrol, node), timeout_s=timeout_s)
    if not shown.ok:
        return None
    try:
        state = parse_show_node(shown.stdout)
    except ValueError:
        return None
    ours = state.reason is not None and state.reason.startswith(REASON_PREFIX.strip())
    if verb == "drain" and state.drained and not ours:
        return f"already drained by someone else (Reason={state.reason or '-'}): left as it is"
    if verb == "resume" and not state.drained:
        return f"not drained in Slurm (State={state.state}): nothing to resume"
    if verb == "resume" and not ours:
        return f"drained by someone else (Reason={state.reason or '-'}): left drained"
    return None


_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def valid_node_name(name: str) -> bool:
    """Whether ``name`` is one Slurm node name: not a host list (``dgx-[01-04]``, commas), not
    the keyword ``ALL``, no spaces or quotes."""
    return bool(_NODE_NAME.fullmatch(name)) and name.upper() != "ALL"
