"""rl-data's cards: ``rlcore data`` (rl_data.command) and the ``reasoning_gym`` prompt generator (rl_data.generators)."""

from __future__ import annotations

from rl_core import hookimpl
from rl_core.cards import CommandCard, GeneratorCard

from rl_data.generators import kwargs_problem, package_problem


@hookimpl
def rl_core_register_commands(register):
    register(CommandCard(name="data", factory="rl_data.command:add_parser",
                         help="rlcore data gsm8k | reasoning-gym NAME: prompt data in verl's parquet row format"))


@hookimpl
def rl_core_register_generators(register):
    register(GeneratorCard(name="reasoning_gym", factory="rl_data.generators:generate", checks=(package_problem, kwargs_problem),
                           description="reasoning-gym datasets generated offline at start-up (data.*_generator.dataset, .kwargs, .size, .seed)"))
