"""rl-verl's cards: verl's dialect (rl_verl.dialect) and the ``rlcore import-verl`` command (rl_verl.import_cmd)."""

from __future__ import annotations

from rl_core import hookimpl
from rl_core.cards import CommandCard, DialectCard

PROFILES = ("verl", "rl-core")  # rl_verl.dialect: whose defaults fill what a verl launch leaves unset
#: the command-line options of a verl launch (rl_core.cards.DialectCard.cli_options)
CLI_OPTIONS = (
    ("--config-path", {"help": "verl / Hydra: the folder of --config-name"}),
    ("--config-name", {"help": "verl / Hydra: a config file in --config-path (its defaults list is followed); "
                               "verl's own ppo_trainer / ppo_megatron_trainer select verl's defaults"}),
    ("--profile", {"choices": PROFILES, "help": "whose defaults fill what a verl launch leaves unset (default: verl's)"}),
)


@hookimpl
def rl_core_register_dialects(register):
    register(DialectCard(
        name="verl", factory="rl_verl.dialect:translate", detect="rl_verl.dialect:detect", keys="rl_verl.dialect:keys",
        cli_options=CLI_OPTIONS, description="verl's launch: Hydra's override grammar, --config-path / --config-name, verl's keys and defaults",
        detects="--config-name, an override in Hydra's grammar (+key, ~key, group@package), --profile verl / profile=verl; "
                "in a native launch: verl's keys (actor_rollout_ref.*, ...), translated one by one"))


@hookimpl
def rl_core_register_commands(register):
    register(CommandCard(name="import-verl", factory="rl_verl.import_cmd:add_parser",
                         help="rlcore import-verl run.sh > run.yaml: the native config a verl launch script means"))
