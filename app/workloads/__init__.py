"""The jobs running on a node when a fault hit it (Slurm jobs, Kubernetes GPU pods), captured for
its incidents."""
