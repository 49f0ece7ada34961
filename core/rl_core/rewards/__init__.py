"""Rewards: the reward manager (scorer choice, process pool, timeouts); pool workers import this package, so it stays empty."""
