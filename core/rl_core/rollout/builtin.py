"""Registers the built-in `hf` rollout backend."""
