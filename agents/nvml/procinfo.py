"""Who a GPU process is, from ``/proc/<pid>``: NVML gives PIDs in the host's PID namespace, so
in a container the PID may not exist or may be another process; then ``name``/``user`` are
``None`` rather than a guess."""

from __future__ import annotations

import os
import pwd
from pathlib import Path
from typing import Any


def process_entry(
    pid: int, used_memory_bytes: int | None, *, proc_root: str | os.PathLike[str] = "/proc"
) -> dict[str, Any]:
    """One ``processes`` entry (docs/ingest.md): ``pid``, ``used_memory_bytes``, and ``name``
    (``/proc/<pid>/comm``) and ``user`` (owner of ``/proc/<pid>``) when visible, else ``None``."""
    name, user = lookup_process(pid, proc_root=proc_root)
    return {"pid": pid, "used_memory_bytes": used_memory_bytes, "name": name, "user": user}


def lookup_process(
    pid: int, *, proc_root: str | os.PathLike[str] = "/proc"
) -> tuple[str | None, str | None]:
    """``(name, user)`` of ``pid`` from ``proc_root``; ``(None, None)`` when not visible."""
    directory = Path(proc_root) / str(pid)
    try:
        raw = (directory / "comm").read_bytes()
        uid = directory.stat().st_uid
    except OSError:
        return None, None
    name = raw.decode("utf-8", errors="replace").strip() or None
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    return name, user
