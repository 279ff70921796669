"""``GET /metrics``: the fleet's latest GPU values under dcgm-exporter's names, and Fleetwatch's
own counters and gauges, in the Prometheus text format (docs/metrics.md)."""
