"""The run configuration: frozen attrs classes, one per section.

Names follow verl's where they mean the same thing (``data.train_batch_size``,
``rollout.n``, ``actor.ppo_mini_batch_size``, ...); ``docs/config.md`` maps
every verl key onto ours. Sizes named ``*_batch_size`` without a suffix are
**global, in prompts**; ``*_per_gpu`` sizes are **per rank, in sequences**
(on CPU a "gpu" is one worker process). :func:`rl_core.config.normalize.normalize`
turns the former into the latter.
"""

from __future__ import annotations

from typing import Any

import attrs

field = attrs.field


def _opt(default=None, **kw):
    return attrs.field(default=default, **kw)


@attrs.frozen(kw_only=True)
class GeneratorConfig:
    """A dataset generated offline at start-up (e.g. reasoning-gym), instead of files."""

    name: str = ""  # e.g. "reasoning_gym"
    dataset: str = ""  # e.g. "basic_arithmetic"
    size: int = 1000
    seed: int = 0
    kwargs: dict[str, Any] = field(factory=dict)
    system_prompt: str | None = None


@attrs.frozen(kw_only=True)
class DataConfig:
    train_files: list[str] = field(factory=list)
    val_files: list[str] = field(factory=list)
    train_generator: GeneratorConfig | None = None
    val_generator: GeneratorConfig | None = None
    prompt_key: str = "prompt"
    max_prompt_length: int = 512
    max_response_length: int = 512
    train_batch_size: int = 8
    val_batch_size: int | None = None
    val_max_samples: int | None = None
    shuffle: bool = True
    seed: int | None = None
    filter_overlong_prompts: bool = True
    apply_chat_template: bool = True


@attrs.frozen(kw_only=True)
class ModelConfig:
    path: str = ""
    tokenizer_path: str | None = None
    dtype: str = field(default="float32", validator=attrs.validators.in_(("float32", "bfloat16", "float16")))
    trust_remote_code: bool = False
    enable_gradient_checkpointing: bool = False
    # run each distinct prompt once for its group of n responses in train-side forwards (unsharded models only);
    # null = on for CPU training (measured faster there), off on GPU (measured no faster on an H100)
    share_prompt_forward: bool | None = None
    random_init: bool = False  # build from the config at `path` with random weights (throughput work)
    override_config: dict[str, Any] = field(factory=dict)
    architecture: str | None = None  # filled from the model's config.json when it can be read


@attrs.frozen(kw_only=True)
class OptimConfig:
    lr: float = 1e-6
    weight_decay: float = 0.01
    betas: list[float] = field(factory=lambda: [0.9, 0.999])
    eps: float = 1e-8
    lr_warmup_steps: int = 0
    lr_warmup_steps_ratio: float = 0.0
    lr_scheduler: str = field(default="constant", validator=attrs.validators.in_(("constant", "cosine", "linear")))
    min_lr_ratio: float = 0.0
    grad_clip: float = 1.0


@attrs.frozen(kw_only=True)
class RolloutConfig:
    name: str = "hf"
    n: int = 4
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    do_sample: bool = True
    tensor_model_parallel_size: int = 1
    gpu_memory_utilization: float = 0.5
    log_prob_micro_batch_size_per_gpu: int | None = None
    generation_batch_size: int | None = None  # sequences generated per engine call (None: all at once)
    calculate_log_probs: bool = False
    enable_sleep: bool = True
    stop: list[str] = field(factory=list)
    val_temperature: float = 0.0
    val_n: int = 1
    engine_kwargs: dict[str, Any] = field(factory=dict)


@attrs.frozen(kw_only=True)
class TrainBackendConfig:
    name: str = "fsdp"
    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    sequence_parallel_size: int = 1
    options: dict[str, Any] = field(factory=dict)  # backend-specific knobs, passed through


@attrs.frozen(kw_only=True)
class ActorConfig:
    ppo_mini_batch_size: int = 8  # prompts
    ppo_micro_batch_size_per_gpu: int = 4  # sequences
    log_prob_micro_batch_size_per_gpu: int | None = None
    ppo_epochs: int = 1
    shuffle: bool = False
    # None: skip the old-log-prob pass when the update is on-policy and the backend allows it
    recompute_old_log_prob: bool | None = None
    policy_loss: str = "ppo_clip"
    policy_loss_options: dict[str, Any] = field(factory=dict)  # passed to the policy loss as `options`
    clip_ratio: float = 0.2
    clip_ratio_low: float | None = None
    clip_ratio_high: float | None = None
    clip_ratio_c: float = 3.0
    loss_agg_mode: str = "token-mean"
    entropy_coeff: float = 0.0
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.001
    kl_loss_type: str = "low_var_kl"
    optim: OptimConfig = field(factory=OptimConfig)


@attrs.frozen(kw_only=True)
class CriticConfig:
    enable: bool | None = None  # None: on when the estimator needs a critic
    model_path: str | None = None  # None: the actor's model
    ppo_mini_batch_size: int | None = None  # None: the actor's
    ppo_micro_batch_size_per_gpu: int | None = None
    ppo_epochs: int | None = None
    cliprange_value: float = 0.5
    loss_agg_mode: str = "token-mean"
    optim: OptimConfig = field(factory=lambda: OptimConfig(lr=1e-5))


@attrs.frozen(kw_only=True)
class RefConfig:
    enable: bool | None = None  # None: on when a KL term is used
    log_prob_micro_batch_size_per_gpu: int | None = None


@attrs.frozen(kw_only=True)
class KLControlConfig:
    type: str = field(default="fixed", validator=attrs.validators.in_(("fixed", "adaptive")))
    kl_coef: float = 0.001
    target_kl: float = 0.1
    horizon: int = 10000


@attrs.frozen(kw_only=True)
class AlgorithmConfig:
    adv_estimator: str = "grpo"
    gamma: float = 1.0
    lam: float = 1.0
    norm_adv_by_std_in_grpo: bool = True
    use_kl_in_reward: bool = False
    kl_penalty: str = "kl"
    kl_ctrl: KLControlConfig = field(factory=KLControlConfig)
    options: dict[str, Any] = field(factory=dict)


@attrs.frozen(kw_only=True)
class CustomRewardConfig:
    path: str | None = None
    name: str = "compute_score"


@attrs.frozen(kw_only=True)
class RewardConfig:
    name: str | None = None  # None: pick by each sample's data_source
    custom: CustomRewardConfig = field(factory=CustomRewardConfig)
    num_workers: int = 0  # 0: score in-process; >0: a process pool
    timeout_s: float = 10.0
    on_error: str = field(default="raise", validator=attrs.validators.in_(("raise", "skip")))
    kwargs: dict[str, Any] = field(factory=dict)


@attrs.frozen(kw_only=True)
class TrainerConfig:
    device: str = field(default="auto", validator=attrs.validators.in_(("auto", "cpu", "cuda")))
    nnodes: int = 1
    n_gpus_per_node: int = 1  # on CPU: worker processes
    placement: str = field(default="local", validator=attrs.validators.in_(("local", "ray")))
    total_epochs: int = 1
    total_training_steps: int | None = None
    save_freq: int = -1
    test_freq: int = -1
    val_before_train: bool = True
    max_ckpt_to_keep: int | None = 2
    resume: bool = True
    loggers: list[str] = field(factory=lambda: ["console", "jsonl"])
    project_name: str = "rl-core"
    experiment_name: str = "run"
    output_dir: str = "outputs/run"
    seed: int = 0
    torch_threads: int | None = None


@attrs.frozen(kw_only=True)
class RayConfig:
    """Used when ``trainer.placement=ray`` (docs/ray.md)."""

    # null: the cluster in $RAY_ADDRESS (set by `ray job submit`), else start a local one;
    # "auto": the cluster started on this machine with `ray start`; or "host:port" of the head
    address: str | None = None
    runtime_env: dict[str, Any] = field(factory=dict)  # passed to ray.init as is: env_vars, pip, working_dir, ...
    namespace: str = "rl-core"
    cpus_per_worker: float = 1.0  # CPUs each worker reserves (its placement-group bundle)
    num_cpus: int | None = None  # a local start only: CPUs Ray may use (null: all)
    dashboard_host: str = "127.0.0.1"  # a local start only; 0.0.0.0 opens the dashboard to the network
    collective_timeout_s: float = 600.0  # torch.distributed timeout of the workers' group
    start_timeout_s: float = 300.0  # waiting for the cluster to have room for every worker


@attrs.frozen(kw_only=True)
class RunConfig:
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
    ray: RayConfig = field(factory=RayConfig)
