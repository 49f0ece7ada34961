"""rl-data's cards: ``rlcore data`` (rl_data.command), the prompt generators of ``data.*_generator`` (rl_data.generators:
their sections and the ``generated_data`` feature whose object core's data sets call and whose ``sample_rows`` hook core's
files check calls) and the user's own dataset class (``data.custom_cls``, rl_data.custom): a feature whose object core's
data sets call, and its check."""

from __future__ import annotations

from rl_core import hookimpl
from rl_core.cards import CheckCard, CommandCard, ConfigSectionCard, FeatureCard


@hookimpl
def rl_core_register_commands(register):
    register(CommandCard(name="data", factory="rl_data.command:add_parser",
                         help="rlcore data gsm8k | reasoning-gym NAME: prompt data in verl's parquet row format"))


@hookimpl
def rl_core_register_features(register):
    register(FeatureCard(name="custom_dataset", factory="rl_data.custom:enabled", provides="rl_data.custom:custom_rows", keys=("data.custom_cls.path",),
                         description="rows from the user's own dataset class (verl's data.custom_cls), built as verl builds it"))
    register(FeatureCard(name="generated_data", factory="rl_data.generators:enabled", provides="rl_data.generators:generated_rows",
                         hooks={"sample_rows": "rl_data.generators:sample_rows"}, keys=("data.train_generator.name", "data.val_generator.name"),
                         description="prompt rows made at start-up (data.*_generator: reasoning_gym's datasets, .dataset, .kwargs, .size, .seed)"))


@hookimpl
def rl_core_register_config_sections(register):
    register(ConfigSectionCard(name="data.custom_cls", factory="rl_data.config:CustomDatasetConfig",
                               description="the user's own dataset class (verl's data.custom_cls): data.custom_cls.path / .name"))
    for split in ("train", "val"):
        register(ConfigSectionCard(name=f"data.{split}_generator", factory="rl_data.config:GeneratorConfig",
                                   description=f"the {split} rows generated at start-up: data.{split}_generator.name / .dataset / .size / .seed / .kwargs / .system_prompt"))


@hookimpl
def rl_core_register_checks(register):
    register(CheckCard(name="custom_dataset_keys", stage="rules", factory="rl_data.custom:pair_problems",
                       description="data.custom_cls.path and data.custom_cls.name set together"))
    # before core's files check (order 10), as when it was core's: the class is checked first, then the files it reads
    register(CheckCard(name="custom_dataset", stage="files", order=5, factory="rl_data.custom:custom_class_problems",
                       description="data.custom_cls: the dataset class imports, is map-style and takes verl's constructor arguments"))
