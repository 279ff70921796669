"""Tests of the topology readers: nvidia-smi topo/nvlink text and sysfs NICs."""
