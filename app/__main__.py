"""``python -m app`` is the ``fleetwatch`` command."""

from app.cli import main

main()
