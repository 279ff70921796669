"""The reliability view: availability, mean time between interruptions, mean time to repair
and the failure taxonomy per node group over a range."""
