"""The jobs running on a node when a fault hit it (Slurm), captured for its incidents."""
