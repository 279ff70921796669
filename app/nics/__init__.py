"""InfiniBand/RoCE NIC ports of a node (readings held by :mod:`app.series`)."""
