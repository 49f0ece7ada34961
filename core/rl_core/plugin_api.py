"""The modules of rl-core a plugin package may import: its public API (docs/plugins.md lists them too).

A plugin's own source (not its tests) imports only these modules and only
names without a leading underscore; ``tests/core/test_plugin_boundary.py``
fails otherwise. Anything else in core may change without notice.
"""

from __future__ import annotations

PLUGIN_API: dict[str, str] = {
    "rl_core": "hookimpl: the decorator of a plugin's hook functions",
    "rl_core.cards": "the cards a plugin registers (RolloutCard, TrainCard, RewardCard, RewardModelCard, EstimatorCard, PolicyLossCard, ConverterCard, DialectCard, CommandCard, CheckCard: a check of the run plan, ObserverCard: a step observer, RunKindCard: a kind of run (trainer.kind), LogProbRoleCard: a second model scoring the sampled tokens, FeatureCard: a cross-cutting feature's object)",
    "rl_core.config.dialect": "Launch / Translated (a dialect's input and output), is_ours, flatten, grammar_of, parse_override (rl-core's key=value)",
    "rl_core.config.load": "set_dotted / merge / config_to_dict / load_report: the raw config tree, the loaded config",
    "rl_core.config.schema": "RunConfig and its sections (a dialect's defaults compared with rl-core's)",
    "rl_core.card_options": "Options: the base of an estimator's / policy loss's options class (typed card options)",
    "rl_core.engine_versions": "installed_engine: the installed distribution and version of a card's engine (package metadata, no import)",
    "rl_core.problems": "Problem (what a card's check returns), UserError, nearest_divisors",
    "rl_core.backends": "RolloutEngine / TrainEngine protocols, SamplingParams, WorkerContext",
    "rl_core.batch": "Batch: tensors + per-sample objects + meta",
    "rl_core.checkpoints": "safe_load, check_dcp_metadata, save_rng_state / load_rng_state, CheckpointError",
    "rl_core.modeling": "HF model loading, value heads, decoder layers, compile, position ids",
    "rl_core.logprobs": "per-token log-probs / entropy with a chunked LM head",
    "rl_core.lora": "LoRA adapters (peft) on an HF model: apply_lora, adapters_disabled (the reference), iter_merged / iter_base / engine_adapter / sample_effective (weight sync and its check), write_adapter_folder / base_model_reference / adapter_folder_base (save_hf's PEFT folder, issue #32)",
    "rl_core.weight_sync_check": "verified weight sync: fused_location / cut_rows (an engine's fused q/k/v, gate/up rows) for rollout engines' sample_weights (issue #32)",
    "rl_core.data.convert": "decode_entry: data-set entries stored as JSON text",
    "rl_core.rollout.samples": "prompt unpadding, PromptLengthError and length checks, Sample, build_rollout_batch",
    "rl_core.rollout.multi_turn": "the agent-rollout contract: Generated, Decode, AgentRuntime, agent_runtime, MultiTurn (agent rollouts over an engine's continue-ids function), cut_at_stop, eos_token_ids, final_turn_mask",
    "rl_core.plan.preflight": "data_rows: the first rows of the run's data, as the plan's files check read them (once per plan), for a plugin's check that reads rows",
    "rl_core.plugins": "get_registry (extra=: more plugin modules; testing helpers), Registry, UnknownCardError: the installed cards (run-time code gets its cards from the resolved stack)",
    "rl_core.rollout.output": "rollout_batch: the generate() output layout",
    "rl_core.rollout.exact": "exact on-policy training: sequence_log_probs (the canonical per-sequence forward both sides run), the mismatch bound, apply_determinism (issue 51)",
    "rl_core.rollout.engine_kwargs": "problems of rollout.engine_kwargs a rollout card's checks report",
    "rl_core.rollout.moe_parallel": "rollout_devices / engine_size: the rollout's devices and one engine's ranks (TP x DP) under rollout.data_parallel_size",
    "rl_core.train_engine.backend": "TrainBackend (what a train plugin implements), Heads, load_role_model, build_adamw, NO_ROUTE (routed_experts' unrouted mark)",
    "rl_core.train_engine.engine": "RoleEngine: core's driver over a TrainBackend",
    "rl_core.train_engine.batch_sizes": "TrainSizeError, role sizes",
    "rl_core.train_engine.offload": "CPU offload between phases: move_params / move_grads / move_optimizer_state, streamed_step, host_step, own_storage (issues #32, #37)",
    "rl_core.train_engine.lr_schedule": "LRSchedule, ScheduleError",
    "rl_core.train_engine.hf_export": "write_hf_folder / write_weights (ShardWriter: streamed safetensors shards) / write_tokenizer: the HF folder save_hf writes",
    "rl_core.util.precision": "resolve_dtype: auto resolved for a device",
    "rl_core.plan.memory": "hub_config: a hub name's cached config.json (the Hugging Face cache, no download)",
    "rl_core.plan.probes": "folder_problems: a model folder's config, weights, tokenizer and vocabulary as a run loads them (a plugin's model role)",
    "rl_core.rewards.model_role": "the reward-model role's contract: ScoreRequest (texts in), ModelScorer, chat_of / plain_prompt, requests_from_batch, in_process",
    "rl_core.rewards.pool": "Outcome and its statuses OK / ERROR / TIMEOUT: what a scorer returns per sample",
    "rl_core.rewards.scoring": "call_with_timeout / ScorerTimeout (a scorer call with a time limit), RewardConfigError",
    "rl_core.train_engine.packing": "packed sequences (remove padding): pack / unpack, the packed attention, packed forwards",
    "rl_core.observers": "step observers (ObserverCard): StepRollouts, what the controller hands an observer each step and validation (issue 52)",
    "rl_core.run_kind": "run kinds (trainer.kind): RunKind / RunHandle / Loader, what a RunKindCard's factory returns and gets",
    "rl_core.data.dataset": "generate_rows: the rows of a data.*_generator (reasoning-gym), as the RL loop reads them",
    "rl_core.algorithms.aggregation": "agg_loss: a per-token loss aggregated by loss_agg_mode (token-mean, seq-mean-token-sum, ...)",
    "rl_core.models": "cache_dir / is_complete_model_dir / ensure_builtin_model: the folders of the built-in offline models (model.path=builtin:<name>)",
}
