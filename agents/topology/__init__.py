"""Node topology: nvidia-smi's ``topo -m`` matrix, NICs and their PCI distance to GPUs from sysfs,
and ``nvidia-smi nvlink -s`` text."""
