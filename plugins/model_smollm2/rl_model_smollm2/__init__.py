"""rl-model-smollm2: SmolLM2-135M-Instruct made offline (``model.path: builtin:smollm2``, ``rlcore model smollm2``)."""
