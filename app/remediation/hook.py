"""The remediation hook: a site's own command (a BMC power cycle, a GPU reset, a reimage
request) that Fleetwatch runs when a node enters ``remediating``.

``FLEETWATCH_REMEDIATION_HOOK`` is a command line as a person types it, split as a POSIX shell
splits words (:func:`shlex.split`) but never run by a shell; each word may hold the
placeholders ``{hostname}``, ``{slurm_node}``, ``{k8s_node}``, ``{reason}`` and ``{actor}``,
filled per word (a reason with spaces or quotes stays one argument). For example::

    FLEETWATCH_REMEDIATION_HOOK='/usr/local/sbin/power-cycle --bmc {hostname}-bmc --why {reason}'

The exact argument list is written to the action log; the command gets the action timeout,
retries and its output is kept, as for Slurm's commands.
"""

from __future__ import annotations

import shlex
import string

#: Placeholders a hook's words may hold.
PLACEHOLDERS = ("hostname", "slurm_node", "k8s_node", "reason", "actor")


def parse(command: str) -> tuple[str, ...]:
    """The hook's words.

    Raises:
        ValueError: not a command line (unbalanced quotes, empty), or a placeholder other than
            :data:`PLACEHOLDERS` (or a stray ``{``/``}``: write ``{{``/``}}`` for a brace).
    """
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise ValueError(f"not a command line: {exc}") from None
    if not words:
        raise ValueError("an empty command")
    for word in words:
        try:
            fields = [name for _, name, _, _ in string.Formatter().parse(word) if name is not None]
        except ValueError as exc:
            raise ValueError(f"{word!r}: {exc} (write {{{{ and }}}} for braces)") from None
        parts = [(name, spec, conv) for _, name, spec, conv in string.Formatter().parse(word)]
        shaped = [name for name, spec, conv in parts if name is not None and (spec or conv)]
        if shaped:
            raise ValueError(
                f"{word!r}: {{{shaped[0]}}} has a conversion or format; write the placeholder "
                "alone, e.g. {hostname}"
            )
        unknown = [f for f in fields if f not in PLACEHOLDERS]
        if unknown:
            raise ValueError(
                f"{word!r}: unknown placeholder {{{unknown[0]}}}; known: "
                + ", ".join(f"{{{p}}}" for p in PLACEHOLDERS)
            )
    return tuple(words)


def command(words: tuple[str, ...], **values: str) -> list[str]:
    """The argument list for one node: each word with its placeholders filled from
    ``values`` (the keys of :data:`PLACEHOLDERS`)."""
    return [word.format(**values) for word in words]
