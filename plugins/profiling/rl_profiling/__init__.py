"""rl-profiling: torch.profiler traces / Nsight Systems marks of chosen training steps (``profiler.*``)."""
