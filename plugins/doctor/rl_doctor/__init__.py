"""rl-doctor: ``rlcore doctor``, what this machine has and whether its collectives work (``--cluster``: a cluster's)."""
