"""Rewards: the reward manager (scorer choice, timeouts); rl-reward-pool's workers import this package, so it stays empty."""
