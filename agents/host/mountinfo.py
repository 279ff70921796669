"""``/proc/<pid>/mountinfo`` (proc(5); Documentation/filesystems/proc.rst, section 3.5) and
the octal escapes the kernel writes in mount tables.

A line is ``mount_id parent_id major:minor root mountpoint options [optional fields…] - fstype
source super_options``. The optional fields (``shared:N``, ``master:N``, ``propagate_from:N``,
``unbindable``) are zero or more, ended by a lone ``-``. The kernel escapes space, tab, newline
and backslash in paths and sources as ``\\040``, ``\\011``, ``\\012`` and ``\\134`` (``mangle()``
in fs/proc_namespace.c); ``/proc/self/mountstats`` uses the same escapes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_OCTAL = re.compile(r"\\([0-7]{3})")


def unescape(field: str) -> str:
    """``field`` with the kernel's ``\\ooo`` octal escapes decoded (``/mnt/my\\040disk`` →
    ``/mnt/my disk``)."""
    return _OCTAL.sub(lambda match: chr(int(match.group(1), 8)), field)


@dataclass(frozen=True)
class MountInfo:
    """One line of ``mountinfo``; paths and the source are unescaped."""

    mount_id: int
    parent_id: int
    major: int
    minor: int
    root: str
    mountpoint: str
    options: str
    optional_fields: tuple[str, ...]
    fstype: str
    source: str
    super_options: str


def parse_mountinfo(text: str) -> list[MountInfo]:
    """Every well-formed line of ``mountinfo`` text, in order; a line without the ``-``
    separator or with a malformed ``major:minor`` is skipped."""
    mounts: list[MountInfo] = []
    for line in text.splitlines():
        parts = line.split(" ")
        try:
            separator = parts.index("-", 6)
            major, minor = (int(n) for n in parts[2].split(":"))
            mount_id, parent_id = int(parts[0]), int(parts[1])
        except (ValueError, IndexError):
            continue
        tail = parts[separator + 1 :]
        if len(tail) < 2:
            continue
        mounts.append(
            MountInfo(
                mount_id=mount_id,
                parent_id=parent_id,
                major=major,
                minor=minor,
                root=unescape(parts[3]),
                mountpoint=unescape(parts[4]),
                options=parts[5],
                optional_fields=tuple(parts[6:separator]),
                fstype=tail[0],
                source=unescape(tail[1]),
                super_options=" ".join(tail[2:]),
            )
        )
    return mounts
