"""Maintenance windows: planned time a node or a group of nodes is worked on (alerts muted, no
automatic action, left out of availability)."""
