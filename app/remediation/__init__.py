"""Actions on the schedulers that take a node out of service and bring it back (Slurm drain /
resume …), each recorded in the action log with its exact command, output and outcome."""
