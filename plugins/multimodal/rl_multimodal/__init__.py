"""rl-multimodal: prompts with images for rl-core (verl's multimodal rows, vision-language models).

Light on purpose (the entry point ``rl_multimodal.plugin`` imports it): :mod:`rl_multimodal.images` reads and encodes the
rows' images, :mod:`rl_multimodal.forward` runs a VLM's forwards over them, :mod:`rl_multimodal.feature` is what core
calls, :mod:`rl_multimodal.checks` the checks.
"""
