"""The agent's NVML layer. :mod:`agents.nvml.session` is the one place ``pynvml`` is imported
(lazily, so importing this package never loads the library); the other modules read a GPU's
metrics, NVLinks, topology and Xid events through it."""
