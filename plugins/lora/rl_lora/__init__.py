"""LoRA adapters for rl-core (issue #32, docs/lora.md): ``model.lora_rank > 0`` trains peft LoRA adapters on a frozen base.

- :mod:`rl_lora.adapters`: apply / merge / save the adapters of an HF model (what train backends call: rl-train-fsdp);
- :mod:`rl_lora.merge`: the hf rollout's in-place merge (``rollout.lora_sync=adapter``), the feature's
  ``rollout_adapters`` hook;
- :mod:`rl_lora.sync`: adapter sync to a rollout engine, verified (the ``weight_sync`` hook);
- :mod:`rl_lora.resume`: a resume that would drop trained adapters (the ``resume_drops`` hook);
- :mod:`rl_lora.memory`: LoRA's terms of the plan's memory / disk estimates;
- :mod:`rl_lora.checks`: `rlcore check`'s ``lora`` check;
- :mod:`rl_lora.plugin`: the ``FeatureCard`` and ``CheckCard`` (light: nothing heavy is imported).
"""

__version__ = "0.1.0"
