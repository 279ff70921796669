"""InfiniBand/RoCE NIC ports of a node (``nic_port_sample``)."""
