"""NVLink state, speed, traffic and error counters per GPU link (``nvlink_sample``)."""
