"""rl-train-megatron: megatron-core actor / critic / reference backend for rl-core (TP, DP; HF <-> Megatron weights)."""
