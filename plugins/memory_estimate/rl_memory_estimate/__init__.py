"""rl-memory-estimate: the device- and host-memory estimate of an rl-core run (docs/memory.md)."""
