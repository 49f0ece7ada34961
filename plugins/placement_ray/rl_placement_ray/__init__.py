"""rl-placement-ray: rl-core's workers as Ray actors, on one node or many (``trainer.placement=ray``, docs/ray.md)."""

__version__ = "0.1.0"
