"""The run configuration: frozen attrs classes, one per section.

Names follow verl's where they mean the same thing (docs/config.md maps them). ``*_batch_size`` sizes are global, in
prompts; ``*_per_gpu`` sizes per rank, in sequences (:func:`rl_core.config.normalize.normalize` turns one into the other).
"""

from __future__ import annotations

from typing import Any

import attrs

from rl_core.algorithms.options import KL_KINDS, LOSS_AGG_MODES
from rl_core.config.sections import Sectioned
from rl_core.config.rules import RULE, Length, NonEmpty, OneOf, Range

field = attrs.field


def num(default, **bounds):
    """A number with bounds (``ge``, ``gt``, ``le``, ``lt``, ``also``, ``hint``): see :class:`Range`."""
    return attrs.field(default=default, metadata={RULE: Range(**bounds)})


def pos(default, hint: str = ""):
    """A positive integer (>= 1); None stays allowed where the type says so."""
    return attrs.field(default=default, metadata={RULE: Range(ge=1, hint=hint)})


def frac(default, *, open_low: bool = False, hint: str = ""):
    """A fraction in [0, 1] (or (0, 1] with ``open_low``)."""
    bounds = {"gt": 0} if open_low else {"ge": 0}
    return attrs.field(default=default, metadata={RULE: Range(le=1, hint=hint, **bounds)})


def choice(default, options, hint: str = ""):
    """One of ``options`` (a tuple, or a callable returning one: read lazily)."""
    return attrs.field(default=default, metadata={RULE: OneOf(options, hint=hint)})


def text(default, hint: str = ""):
    """A string that must not be empty."""
    return attrs.field(default=default, metadata={RULE: NonEmpty(hint=hint)})


#: core's own metric loggers (rl_core.trainer.tracking); trainer.loggers may also name an installed tracker card
#: (rl_core.cards.TrackerCard, e.g. rl-tracking's tensorboard and wandb), resolved in the plan (rl_core.plan.named)
LOGGERS = ("console", "jsonl")


@attrs.frozen(kw_only=True)
class DataConfig(Sectioned):
    """The prompt data; packages add sections (rl-data's ``data.custom_cls``, ``data.train_generator``, ``data.val_generator``)."""

    SECTION_KEY = "data"
    train_files: list[str] = field(factory=list)
    val_files: list[str] = field(factory=list)
    prompt_key: str = text("prompt", hint="the row key that holds the chat messages")
    # image inputs (rl-multimodal): the row key of a row's images, and verl's patch size (the processor's own)
    image_key: str = text("images", hint="the row key that holds the images")
    video_key: str = text("videos", hint="the row key of videos (refused when a row has some)")
    image_patch_size: int | None = pos(None, hint="the model processor's patch_size (e.g. 14 for Qwen2-VL)")
    max_prompt_length: int = pos(512, hint="tokens")
    max_response_length: int = pos(512, hint="tokens")
    train_batch_size: int = pos(8, hint="prompts per step")
    # prompts generated per round under algorithm.filter_groups (DAPO's dynamic sampling); null: train_batch_size
    gen_batch_size: int | None = pos(None, hint="prompts per generation round, e.g. 3 x data.train_batch_size")
    val_batch_size: int | None = pos(None)
    val_max_samples: int | None = pos(None)
    shuffle: bool = True
    seed: int | None = None
    filter_overlong_prompts: bool = True
    # with filter_overlong_prompts=false: error on a prompt over max_prompt_length, or keep part of its tokens
    # (left: the end, right: the start, middle: both ends), as verl's data.truncation
    truncation: str = choice("error", ("error", "left", "right", "middle"))
    chat_template_kwargs: dict[str, Any] = field(factory=dict)  # passed to the chat template (e.g. enable_thinking: false)
    apply_chat_template: bool = True


@attrs.frozen(kw_only=True)
class ModelConfig:
    path: str = ""
    tokenizer_path: str | None = None
    # auto: bfloat16 where the hardware computes it (GPUs with bf16, CPUs with AVX512-BF16 / AMX), else float32 (rl_core.util.precision)
    dtype: str = choice("float32", ("float32", "bfloat16", "float16", "auto"))
    trust_remote_code: bool = False
    enable_gradient_checkpointing: bool = False
    # the activations a training forward saves for backward are kept in host memory and copied back in backward
    # (torch.autograd.graph.save_on_cpu; verl's enable_activation_offload): same gradients, less device memory
    enable_activation_offload: bool = False
    # run each distinct prompt once for its group of n responses in train-side forwards (unsharded models only);
    # null = on for CPU training (measured faster there), off on GPU (measured no faster on an H100)
    share_prompt_forward: bool | None = None
    random_init: bool = False  # build from the config at `path` with random weights (throughput work)
    # train-side log-probs / entropy: the LM head in chunks of this many tokens (rl_core.logprobs), never the
    # full-vocab float32 logits of a micro-batch; 0 = off (plain); null = 2048 on GPU, off on CPU
    logprob_chunk_size: int | None = num(None, ge=0, hint="tokens per chunk, e.g. 2048; 0 turns chunking off")
    # torch.compile each decoder layer of the train-side models (rl_train_fsdp.compile.compile_decoder_layers); auto: eager on a
    # CPU and for short runs, compiled where it pays off (rl_core.config.normalize.resolve_compile; `rlcore check` says which and why)
    compile: bool | str = choice(False, (False, True, "auto"), hint="auto picks eager on a CPU and for short runs")
    override_config: dict[str, Any] = field(factory=dict)
    architecture: str | None = None  # filled from the model's config.json when it can be read
    # LoRA (rl-lora: plugins/lora, docs/lora.md): 0 = off (full fine-tune); the actor's adapters on the fsdp backend
    lora_rank: int = num(0, ge=0, hint="0 turns LoRA off; 8 to 64 is usual, e.g. 32")
    lora_alpha: float = num(16.0, gt=0, hint="the adapters' scale is lora_alpha / lora_rank; twice the rank is usual, e.g. 64")
    # module names (the last part of a module's dotted name, e.g. [q_proj, v_proj]) or "all-linear" (every nn.Linear
    # except the LM head, as peft's "all-linear")
    target_modules: str | list[str] = field(default="all-linear", metadata={RULE: NonEmpty(hint="all-linear, or module names such as [q_proj, v_proj]")})
    exclude_modules: list[str] = field(factory=list)  # module names left without adapters
    lora_dropout: float = num(0.0, ge=0, lt=1, hint="0 is usual for RL")
    lora_adapter_path: str | None = None  # a PEFT adapter folder (adapter_config.json + weights) to start from


@attrs.frozen(kw_only=True)
class OptimConfig:
    lr: float = num(1e-6, gt=0, hint="e.g. 1e-6 for a 0.5B model, 1e-5 for a small one")
    weight_decay: float = num(0.01, ge=0, hint="0 turns it off")
    betas: list[float] = field(factory=lambda: [0.9, 0.999], metadata={RULE: Length(2, Range(ge=0, lt=1, hint="e.g. 0.9"), example="[0.9, 0.999]")})
    eps: float = num(1e-8, gt=0, hint="e.g. 1e-8")
    lr_warmup_steps: int = num(0, ge=0, also=(-1,), hint="0 for none; -1 to use lr_warmup_steps_ratio")
    lr_warmup_steps_ratio: float = frac(0.0, hint="a fraction of the total steps")
    lr_scheduler: str = choice("constant", ("constant", "cosine", "linear"))
    min_lr_ratio: float = frac(0.0, hint="the final lr as a fraction of lr")
    # the final lr itself (verl's Megatron optim.min_lr): the decay ends at min_lr instead of lr * min_lr_ratio
    min_lr: float | None = num(None, ge=0, hint="an absolute learning rate <= lr, e.g. 1e-7")
    grad_clip: float = num(1.0, ge=0, hint="the max gradient norm; 0 turns clipping off")


@attrs.frozen(kw_only=True)
class RolloutConfig(Sectioned):
    SECTION_KEY = "rollout"
    name: str = "hf"
    n: int = pos(4, hint="samples per prompt")
    temperature: float = num(1.0, ge=0, hint="1.0 samples from the model; 0 only with do_sample=false")
    top_p: float = frac(1.0, open_low=True, hint="1.0 turns nucleus sampling off")
    top_k: int = num(-1, ge=1, also=(-1, 0), hint="-1 or 0 turn top-k off")
    do_sample: bool = True
    tensor_model_parallel_size: int = pos(1)
    # MoE parallelism inside one engine (verl's rollout keys; engines whose card lists it, rl_core.cards.RolloutCard.moe_parallel):
    # data_parallel_size = attention data parallelism: one engine spans TP x DP devices, each DP rank its own requests;
    # expert_parallel_size = the MoE experts spread over the engine's ranks (1, or TP x DP as verl requires)
    data_parallel_size: int = pos(1)
    expert_parallel_size: int = pos(1)
    gpu_memory_utilization: float = frac(0.5, open_low=True, hint="the fraction of device memory the rollout engine may take, e.g. 0.5")
    log_prob_micro_batch_size_per_gpu: int | None = pos(None)
    generation_batch_size: int | None = pos(None)  # sequences generated per engine call (None: all at once)
    # the engine's sampling log-probs; null (auto): on when the run needs them or the backend's are free (hf), else on
    # every rollout.log_prob_decision.GAP_EVERY-th step only, for the rollout_corr/* gap metrics (rl_core.rollout.log_prob_decision.decide)
    calculate_log_probs: bool | None = None
    # hf rollout: log-probs from the trainer's per-sequence forward (rl-exact, docs/exact.md): the trainer's equal them bit for bit
    exact: bool = False
    # the engine returns each token's routed experts (MoE models; batch field routed_experts) for actor.router_replay=R3
    return_routed_experts: bool = False
    enable_sleep: bool = True
    # an engine whose call raises or does not return within engine_timeout_s seconds (null: no limit) is killed, rebuilt,
    # given the current weights (verified) and the call again; more than engine_restarts in engine_restart_window_s stop the run
    engine_timeout_s: float | None = num(None, gt=0, hint="seconds a rollout call may take before its engine counts as hung; null: no limit")
    engine_restarts: int = num(2, ge=0, hint="engine replacements allowed within rollout.engine_restart_window_s; 0 stops at the first failure")
    engine_restart_window_s: float = num(3600.0, gt=0, hint="seconds over which rollout.engine_restarts are counted")
    stop: list[str] = field(factory=list)
    val_temperature: float = num(0.0, ge=0, hint="0 is greedy")
    val_n: int = pos(1, hint="samples per validation prompt")
    # validation sampling (verl's rollout.val_kwargs): greedy unless val_do_sample
    val_do_sample: bool = False
    val_top_p: float = frac(1.0, open_low=True, hint="1.0 turns nucleus sampling off")
    val_top_k: int = num(-1, ge=1, also=(-1, 0), hint="-1 or 0 turn top-k off")
    engine_kwargs: dict[str, Any] = field(factory=dict)
    # LoRA (model.lora_rank > 0): how the actor's weights reach the engine. adapter: the base weights once, then only
    # the adapters through the engine's LoRA API; merged: W + scale*B@A every sync; auto: adapter where the engine can
    lora_sync: str = choice("auto", ("auto", "adapter", "merged"))
    # a rollout pool of its own (the rl-async package): null = in the actor's workers (hybrid engine, in-memory weight sync)
    n_gpus_per_node: int | None = pos(None, hint="devices (CPU: processes) of the rollout's own workers per node; null shares the actor's")
    nnodes: int = pos(1)
    # auto: the rollout computes in model.dtype; fp8: FP8 weights and KV cache in an engine that has FP8 kernels
    # (vllm, sglang; GPUs of compute capability >= 8.9), with the rollout correction on by default (rl-rollout-correction: rl_rollout_correction.precision)
    precision: str = choice("auto", ("auto", "fp8"), hint="auto (model.dtype) or fp8")


@attrs.frozen(kw_only=True)
class TrainBackendConfig:
    name: str | None = None  # None: the installed train backend whose card says default=True (or the only one)
    tensor_model_parallel_size: int = pos(1)
    pipeline_model_parallel_size: int = pos(1)
    # context parallelism: the ranks of one model replica split each sequence's tokens (a train backend with "cp")
    context_parallel_size: int = pos(1)
    sequence_parallel_size: int = pos(1)
    # MoE models: ranks that split each MoE layer's experts (megatron: Megatron EP; fsdp: the experts out of FSDP, tokens
    # exchanged by all-to-all, rl_train_fsdp.experts; must divide the experts), and the TP size
    # of each expert (null: train.tensor_model_parallel_size); ETP x EP x PP must divide the world
    expert_model_parallel_size: int = pos(1, hint="1 turns it off; it must divide the model's experts and, times the expert TP and PP, the world size")
    expert_tensor_parallel_size: int | None = pos(None, hint="null = train.tensor_model_parallel_size; 1 keeps each expert whole")
    # AdamW's state sharded over the data-parallel ranks that hold the same weights (ZeRO stage 1; Megatron's
    # use_distributed_optimizer): a train backend with "distributed_optimizer" (a backend that shards every state refuses it)
    distributed_optimizer: bool = False
    options: dict[str, Any] = field(factory=dict)  # backend-specific knobs, passed through


@attrs.frozen(kw_only=True)
class ActorConfig(Sectioned):
    SECTION_KEY = "actor"  # rl-train-fsdp adds fsdp_config
    ppo_mini_batch_size: int = pos(8, hint="prompts per optimizer step")  # prompts
    ppo_micro_batch_size_per_gpu: int = pos(4, hint="sequences per forward/backward")  # sequences
    log_prob_micro_batch_size_per_gpu: int | None = pos(None)
    ppo_epochs: int = pos(1)
    # verl's dynamic batch size: micro-batches formed by a token budget (prompt + response tokens) per forward
    # instead of ppo_micro_batch_size_per_gpu sequences; the same gradients (each micro-batch is weighted by its tokens)
    use_dynamic_bsz: bool = False
    ppo_max_token_len_per_gpu: int = pos(16384, hint="tokens per micro-batch with use_dynamic_bsz, e.g. 16384")
    shuffle: bool = False
    # packed sequences (verl's spelling): the train forwards run each micro-batch's valid tokens as one row with
    # per-sequence attention, no padding computed (rl_train_fsdp.packing); null = on where the model allows it,
    # except where the shared-prompt forward runs (model.share_prompt_forward: unsharded CPU runs), measured faster there
    use_remove_padding: bool | None = None
    # verl's pad_to_length: every packed micro-batch's row is padded up to a multiple of fsdp_config.pad_to_length_bucket
    # tokens (a separate segment the loss never sees), so the train forwards see a few shapes only (no kernel re-tuning
    # per micro-batch); the same numbers. Needs packing (use_remove_padding not false); fsdp backend
    pad_to_length: bool = False
    # Ulysses sequence parallelism (fsdp backend): each sequence split over this many ranks, heads exchanged around
    # attention; the data-parallel size is the world size / this (verl's spelling; also under fsdp_config in verl)
    ulysses_sequence_parallel_size: int = pos(1, hint="1 turns it off; it must divide the attention heads and the world size")
    # None: skip the old-log-prob pass when the update is on-policy and the backend allows it
    recompute_old_log_prob: bool | None = None
    # MoE routing replay (verl's router_replay.mode; rl-routing-replay): R2 replays, in the update, the experts the
    # old-log-prob pass routed each token to; R3 replays the rollout engine's routing (rollout.return_routed_experts) in
    # both; disabled routes every forward natively. A train backend replays only where its card says router_replay.
    router_replay: str = choice("disabled", ("disabled", "R2", "R3"))
    # leave rows whose advantage is 0 everywhere (a group with equal rewards) out of the update's forward /
    # backward: the same gradient for less compute (rl_core.algorithms.zero_advantage)
    skip_zero_advantage_rows: bool = True
    policy_loss: str = "vanilla"  # verl's default: PPO clip + dual clip (clip_ratio_c); "ppo_clip" has no dual clip
    policy_loss_options: dict[str, Any] = field(factory=dict)  # passed to the policy loss as `options`
    loss_scale_factor: int | None = pos(None, hint="the constant T of seq-mean-token-sum-norm; null: the padded width")
    clip_ratio: float = num(0.2, gt=0, lt=1, hint="0.2 is usual")
    # below 1 except for cispo, whose lower bound verl's example sets to 10 (the rules' _clip_low)
    clip_ratio_low: float | None = num(None, gt=0, hint="0.2 is usual")
    clip_ratio_high: float | None = num(None, gt=0, hint="0.2 is usual, 0.28 for DAPO's clip-higher")
    clip_ratio_c: float = num(3.0, gt=1, hint="the dual-clip bound on negative advantages; 3.0 is usual")
    loss_agg_mode: str = choice("token-mean", LOSS_AGG_MODES)
    entropy_coeff: float = 0.0
    use_kl_loss: bool = False
    kl_loss_coef: float = num(0.001, ge=0, hint="0.001 is usual")
    kl_loss_type: str = choice("low_var_kl", KL_KINDS)
    optim: OptimConfig = field(factory=OptimConfig)


@attrs.frozen(kw_only=True)
class CriticConfig(Sectioned):
    SECTION_KEY = "critic"  # rl-train-fsdp adds fsdp_config
    enable: bool | None = None  # None: on when the estimator needs a critic
    model_path: str | None = None  # None: the actor's model
    ppo_mini_batch_size: int | None = pos(None)  # None: the actor's
    ppo_micro_batch_size_per_gpu: int | None = pos(None)
    ppo_epochs: int | None = pos(None)
    cliprange_value: float = num(0.5, gt=0, hint="0.5 is usual")
    loss_agg_mode: str = choice("token-mean", LOSS_AGG_MODES)
    optim: OptimConfig = field(factory=lambda: OptimConfig(lr=1e-5))
    # a resource pool of its own (rl_core.placement.pools): null = in the actor's workers, on their devices
    n_gpus_per_node: int | None = pos(None, hint="devices of the critic's own workers per node; null shares the actor's")
    nnodes: int = pos(1)


@attrs.frozen(kw_only=True)
class RefConfig:
    enable: bool | None = None  # None: on when a KL term is used
    log_prob_micro_batch_size_per_gpu: int | None = pos(None)
    # a resource pool of its own (rl_core.placement.pools): null = in the actor's workers, on their devices
    n_gpus_per_node: int | None = pos(None, hint="devices of the reference model's own workers per node; null shares the actor's")
    nnodes: int = pos(1)


@attrs.frozen(kw_only=True)
class KLControlConfig:
    type: str = choice("fixed", ("fixed", "adaptive"))
    kl_coef: float = num(0.001, ge=0, hint="0.001 is usual")
    target_kl: float = num(0.1, gt=0, hint="e.g. 0.1")
    horizon: int = pos(10000)


@attrs.frozen(kw_only=True)
class AlgorithmConfig(Sectioned):
    SECTION_KEY = "algorithm"
    adv_estimator: str = "grpo"
    gamma: float = frac(1.0, hint="the discount; 1.0 is usual for LLMs")
    lam: float = frac(1.0, hint="the GAE lambda; 1.0 or 0.95 are usual")
    norm_adv_by_std_in_grpo: bool = True
    use_kl_in_reward: bool = False
    kl_penalty: str = choice("kl", KL_KINDS)
    kl_ctrl: KLControlConfig = field(factory=KLControlConfig)
    options: dict[str, Any] = field(factory=dict)


@attrs.frozen(kw_only=True)
class CustomRewardConfig:
    path: str | None = None
    name: str = text("compute_score", hint="the function in reward.custom.path")


@attrs.frozen(kw_only=True)
class RewardConfig(Sectioned):
    SECTION_KEY = "reward"
    name: str | None = None  # None: pick by each sample's data_source
    custom: CustomRewardConfig = field(factory=CustomRewardConfig)
    num_workers: int = num(0, ge=0, hint="0 scores in-process")  # 0: score in-process; >0: a process pool
    timeout_s: float = num(10.0, gt=0, hint="seconds per sample, e.g. 10")
    on_error: str = choice("raise", ("raise", "skip"))
    kwargs: dict[str, Any] = field(factory=dict)
    # per data source (exact name or glob, the longest match wins; "*" for the rest): weights of the reward's
    # parts, e.g. {"gsm8k": {"rule": 1.0, "model": 0.5}}; a part weighted 0 is not computed. Unmatched sources:
    # the model's score alone when reward_model.enable, else the rule's (rl-reward-model's rl_reward_model.mixing)
    weights: dict[str, dict[str, float]] = field(factory=dict)


@attrs.frozen(kw_only=True)
class TrainerConfig(Sectioned):
    SECTION_KEY = "trainer"
    device: str = choice("auto", ("auto", "cpu", "cuda"))
    nnodes: int = pos(1)
    n_gpus_per_node: int = pos(1)  # on CPU: worker processes
    placement: str = text("local", hint="a placement by name: local (this machine), ray (rl-placement-ray), or a plugin's (rlcore plugins)")
    total_epochs: int = pos(1)
    total_training_steps: int | None = pos(None)
    # the run kind (rl_core.run_kind): "rl" (the RL loop) or a registered RunKindCard's name (e.g. sft, rl-sft), with its
    # options (checked against the card's Options class)
    kind: str = text("rl", hint="rl, or an installed run kind such as sft")
    kind_options: dict[str, Any] = field(factory=dict)
    log_val_generations: int = num(0, ge=0, hint="validation samples (response, score) written per validation to <output_dir>/val_generations.jsonl")
    save_freq: int = num(-1, ge=1, also=(-1,), hint="steps between checkpoints; -1 for only the final model")
    test_freq: int = num(-1, ge=1, also=(-1,), hint="steps between validations; -1 for none")
    val_before_train: bool = True
    max_ckpt_to_keep: int | None = pos(2, hint="null keeps every checkpoint")
    resume: bool = True
    # what a checkpoint holds (verl's checkpoint.save_contents / load_contents; rl_core.train_engine.engine): model (always),
    # optimizer (AdamW's state), extra (the LR schedule's state), hf_model (an HF folder hf/ in every checkpoint)
    save_contents: list[str] = field(factory=lambda: ["model", "optimizer", "extra"])
    load_contents: list[str] | None = None  # what a resume reads; null: all the checkpoint holds
    # LoRA: save_hf (hf_final, a checkpoint's hf/) writes a PEFT adapter folder; true adds the merged weights in
    # model.dtype as an HF folder merged/ inside it (rl-lora, docs/lora.md)
    save_merged_lora: bool = False
    loggers: list[str] = field(factory=lambda: ["console", "jsonl"])  # console, jsonl, or an installed tracker card's name (rl_core.plan.named)
    project_name: str = text("rl-core")
    experiment_name: str = text("run")
    output_dir: str = text("outputs/run", hint="a folder for checkpoints and metrics, e.g. outputs/run")
    seed: int = 0
    # same seed -> same metrics and weights on a GPU too: deterministic CUDA kernels (rl_core.util.determinism)
    deterministic: bool = False
    torch_threads: int | None = pos(None)
    # step observers (rl_core.observers): an installed observer card's options, by its name (rl-traces: traces.*);
    # checked against the card's options class by `rlcore check`
    observers: dict[str, Any] = field(factory=dict)


@attrs.frozen(kw_only=True)
class RunConfig(Sectioned):
    data: DataConfig = field(factory=DataConfig)
    model: ModelConfig = field(factory=ModelConfig)
    rollout: RolloutConfig = field(factory=RolloutConfig)
    train: TrainBackendConfig = field(factory=TrainBackendConfig)
    actor: ActorConfig = field(factory=ActorConfig)
    critic: CriticConfig = field(factory=CriticConfig)
    ref: RefConfig = field(factory=RefConfig)
    algorithm: AlgorithmConfig = field(factory=AlgorithmConfig)
    reward: RewardConfig = field(factory=RewardConfig)
    trainer: TrainerConfig = field(factory=TrainerConfig)
