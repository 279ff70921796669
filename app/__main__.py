"""``python -m app`` is the ``fleetwatch`` command."""

from app.entry import main

main()
