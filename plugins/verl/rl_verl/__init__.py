"""verl's dialect for rl-core: verl's launch (Hydra's override grammar, ``--config-path`` / ``--config-name``, verl's
config files and keys) read into rl-core's config, verl's defaults for a verl launch, and ``rlcore import-verl``."""

__version__ = "0.1.0"
