"""Node topology (nvidia-smi ``topo -m``): snapshots of each distinct topology and their changes."""
