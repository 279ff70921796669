"""NVLink state, speed, traffic and error counters per GPU link (readings held by
:mod:`app.series`)."""
