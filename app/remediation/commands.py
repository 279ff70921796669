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

    A command that cannot start (not found, not executable, not a program, an argument list
    too long) or runs past ``timeout_s`` gives ``returncode`` ``None`` and the reason as
    output; output that is not UTF-8 is kept with replacement characters.
    """
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            errors="replace",  # a command printing bytes that are not UTF-8 is still logged
            timeout=timeout_s,
            env=env,
            check=False,
        )
    except FileNotFoundError:
        return Outcome(None, f"{argv[0]}: not found")
    except PermissionError:
        return Outcome(None, f"{argv[0]}: not executable")
    except subprocess.TimeoutExpired:
        return Outcome(None, f"{argv[0]}: no answer within {timeout_s:g} s")
    except (OSError, ValueError) as exc:  # no shebang, argument list too long, a NUL …
        return Outcome(None, f"{argv[0]}: could not start: {exc}"[:MAX_OUTPUT])
    output = "\n".join(part.strip() for part in (done.stdout, done.stderr) if part.strip())
    return Outcome(done.returncode, output[:MAX_OUTPUT], done.stdout)
