"""Rollout engines that ship with the core."""
