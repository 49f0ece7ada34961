"""rl-sft: supervised fine-tuning (and off-policy distillation) as a run kind of rl-core (docs/sft.md)."""
