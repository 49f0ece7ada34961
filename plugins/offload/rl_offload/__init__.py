"""rl-offload: CPU offload between phases for the train backends (rl-train-fsdp, rl-train-megatron), its check and its
terms of the plan's memory estimates."""
