"""Fleetwatch server: ingest API, time-series storage and the fleet/node views."""

__version__ = "0.1.0"
