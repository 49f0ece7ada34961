"""The train-engine contract: core owns the update (``engine``, ``update``), a train backend provides primitives
(``backend``). Importing the package imports nothing; ``backend``, ``engine`` and ``update`` import torch."""
