"""Slurm host lists (``gpu-[01-03,07]``, ``rack[1-2]-n[1-2]``) expanded to node names, as
``scontrol show hostnames`` does, without a process per list.

A bracket holds comma-separated numbers and ranges; a range keeps the width of its low bound
(``[08-10]``: ``08 09 10``); several brackets in one name multiply, the first outermost; commas
outside brackets separate names.
"""

from __future__ import annotations

import itertools
import re

#: Most names one list expands to: a longer one is returned as it is (no cluster is that big,
#: and ``[1-999999999]`` must not fill memory).
MAX_HOSTS = 65536

_PART = re.compile(r"\[([^\[\]]*)\]|([^\[\]]+)")


def split_top(text: str) -> list[str]:
    """``text`` split at the commas outside brackets (``a[1,2],b``: ``a[1,2]``, ``b``)."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in (p.strip() for p in parts) if p]


def _numbers(inside: str) -> list[str]:
    """The numbers of one bracket's content (``01-03,07``), each as wide as its range's low
    bound. Raises ValueError for anything else."""
    found: list[str] = []
    for item in inside.split(","):
        low, dash, high = item.strip().partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ValueError(f"not a host range: {item!r}")
        last = int(high) if dash else int(low)
        if last < int(low) or len(found) + last - int(low) >= MAX_HOSTS:
            raise ValueError(f"not a host range: {item!r}")
        found += [str(n).zfill(len(low)) for n in range(int(low), last + 1)]
    return found


def _expand_one(name: str) -> list[str]:
    if "".join(m.group(0) for m in _PART.finditer(name)) != name:
        raise ValueError(f"unbalanced brackets: {name!r}")
    choices = [
        _numbers(m.group(1)) if m.group(1) is not None else [m.group(2)]
        for m in _PART.finditer(name)
    ]
    total = 1
    for options in choices:
        total *= len(options)
    if total > MAX_HOSTS:
        raise ValueError(f"more than {MAX_HOSTS} names: {name!r}")
    return ["".join(combo) for combo in itertools.product(*choices)]


def expand_hostlist(text: str) -> list[str]:
    """The node names of a Slurm host list, in its order, duplicates kept once; ``[]`` for an
    empty list or ``(null)``. A list Slurm would not print (unbalanced brackets, a range
    that is not numbers, over :data:`MAX_HOSTS` names) is returned whole as one name, so a
    caller still shows what Slurm said."""
    text = text.strip()
    if not text or text == "(null)":
        return []
    try:
        names = [n for part in split_top(text) for n in _expand_one(part)]
    except ValueError:
        return [text]
    return list(dict.fromkeys(names))
