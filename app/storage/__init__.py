"""Node storage: block devices, mounted filesystems and NFS mounts."""
