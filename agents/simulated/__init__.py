"""The simulated collector: nodes shaped like real captured machines, with load and faults."""
