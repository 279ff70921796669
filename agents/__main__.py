"""``python -m agents`` runs the ``fleetwatch-agent`` command line."""

import sys

from agents.main import main

if __name__ == "__main__":
    sys.exit(main())
