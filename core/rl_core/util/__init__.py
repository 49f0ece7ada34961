"""Small helpers that import nothing else of rl-core: the floor every other module may stand on."""
