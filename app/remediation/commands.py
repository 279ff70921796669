"""Running an action's command: no shell, bounded in time, output kept for the action log."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class Outcome:
    """What a command did: its exit status (``None``: it could not start or ran past its
    timeout), its output for the log (stdout then stderr, trimmed, at most
    :data:`MAX_OUTPUT` characters) and its whole stdout, for a caller that parses it."""

    returncode: int | None
    output: str
    stdout: str = ""
    #: Nothing needed doing (the scheduler was in the wanted state, or someone else's).
    skipped: bool = False

    @property
    def ok(self) -> bool:
        """Exit status 0."""
        return self.returncode == 0


#: Longest output kept in the action log.
MAX_OUTPUT = 4000


def run(argv: list[str], *, timeout_s: float, env: dict[str, str] | None = None) -> Outcome:
    """Run ``argv`` (no shell) and capture its output; never raises for the command's failure.

    A command that cannot start (not found, not executable) or runs past ``timeout_s`` gives
    ``returncode`` ``None`` and the reason as output.
    """
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout_s, env=env, check=False
        )
    except FileNotFoundError:
        return Outcome(None, f"{argv[0]}: not found")
    except PermissionError:
        return Outcome(None, f"{argv[0]}: not executable")
    except subprocess.TimeoutExpired:
        return Outcome(None, f"{argv[0]}: no answer within {timeout_s:g} s")
    output = "\n".join(part.strip() for part in (done.stdout, done.stderr) if part.strip())
    return Outcome(done.returncode, output[:MAX_OUTPUT], done.stdout)
