"""Fleetwatch node agent: collects GPU metrics and events, spools and pushes them.

The agent depends on the standard library only (plus ``pynvml`` for real GPUs, imported lazily);
it never imports the server package ``app``.
"""

__version__ = "0.1.0"
