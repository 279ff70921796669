"""The ``fleetwatch`` console script, importable with the agent-only install.

``pip install .`` installs the agent alone; the server's dependencies come with
``pip install '.[server]'``. Without them this prints what to install instead of a traceback.
"""

from __future__ import annotations

import sys


def main() -> None:
    """Run :func:`app.cli.main`, or exit 2 naming the missing server dependencies."""
    try:
        from app.cli import main as cli_main
    except ImportError as exc:
        sys.stderr.write(
            f"fleetwatch: the server is not installed ({exc.name or exc} is missing); "
            "install it with: pip install 'fleetwatch[server]'\n"
        )
        raise SystemExit(2) from None
    cli_main()
