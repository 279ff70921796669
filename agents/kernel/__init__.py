"""The kernel log as a source of GPU faults: NVRM Xid lines and GPUs that fell off the bus."""
