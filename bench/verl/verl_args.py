"""verl's command line (Hydra overrides for ``python -m verl.trainer.main_ppo``) for the benchmark workloads.

    python bench/verl/verl_args.py reference --model /tmp/verl_models/ref --data .gpu/gsm8k/train.parquet [--steps 10]

prints one override a line (bench/verl/run_verl_gpu.sh reads them into the command). The workloads are the ones
rl-core runs (bench/reference/grpo_reference.yaml and issue 35's scale workload), set the way verl spells them:

- GRPO, one GPU, one node, Ray local; verl's vLLM rollout (its default async server mode), its FSDP actor
  (verl's defaults otherwise: fp32 master weights with bf16 compute, torch.compile of its log-prob functions,
  the old log-probs recomputed by the actor, balance_batch, 8 agent-loop and 8 reward workers);
- no KL (neither loss nor reward), no entropy bonus, one optimizer step per rollout (mini batch = the batch);
- the coin reward (bench/reference/coin_reward.py) as verl's custom reward function, the same file rl-core loads;
- prompts over the prompt length are filtered, as rl-core filters them;
- attention: sdpa and no padding removal, because verl's default (flash_attention_2, with remove-padding) needs the
  flash-attn package, which has no wheel for this torch on PyPI (verl's own extra points at a private build).

``--extra KEY=VALUE`` (repeatable) appends overrides (a later one wins in Hydra).
"""

from __future__ import annotations

import argparse
import os

WORKLOADS = {
    # bench/reference/grpo_reference.yaml
    "reference": dict(batch=8, n=8, prompt=128, response=256, micro=64, grad_ckpt=False, lr=1e-6, gpu_mem=0.5),
    # issue 35: 1.5B shape, 32 prompts x 8, 128 + 1024, gradient checkpointing
    "scale": dict(batch=32, n=8, prompt=128, response=1024, micro=16, grad_ckpt=True, lr=1e-6, gpu_mem=0.5),
}


def overrides(workload: str, model: str, data: str, steps: int, name: str, reward: str) -> list[str]:
    w = WORKLOADS[workload]
    rows = w["batch"] * w["n"]
    return [
        "algorithm.adv_estimator=grpo",
        "algorithm.use_kl_in_reward=False",
        f"data.train_files={data}",
        f"data.val_files={data}",
        "data.val_max_samples=16",
        f"data.train_batch_size={w['batch']}",
        f"data.max_prompt_length={w['prompt']}",
        f"data.max_response_length={w['response']}",
        "data.filter_overlong_prompts=True",
        "data.truncation=error",
        f"actor_rollout_ref.model.path={model}",
        "actor_rollout_ref.model.use_remove_padding=False",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        f"actor_rollout_ref.model.enable_gradient_checkpointing={w['grad_ckpt']}",
        f"actor_rollout_ref.actor.optim.lr={w['lr']}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={w['batch']}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={min(w['micro'], rows)}",
        "actor_rollout_ref.actor.ppo_epochs=1",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.actor.entropy_coeff=0",
        "actor_rollout_ref.actor.fsdp_config.param_offload=False",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        f"actor_rollout_ref.rollout.gpu_memory_utilization={w['gpu_mem']}",
        f"actor_rollout_ref.rollout.n={w['n']}",
        "actor_rollout_ref.rollout.temperature=1.0",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={min(w['micro'], rows)}",
        f"reward.custom_reward_function.path={reward}",
        "reward.custom_reward_function.name=compute_score",
        "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1",
        f"trainer.total_training_steps={steps}",
        "trainer.total_epochs=1",
        "trainer.val_before_train=False",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.logger=[console,file]",
        "trainer.project_name=rlcore_bench",
        f"trainer.experiment_name={name}",
        f"trainer.default_local_dir=/tmp/verl_ckpt/{name}",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload", choices=sorted(WORKLOADS))
    ap.add_argument("--model", required=True, help="model folder with weights (bench/verl/make_weights.py)")
    ap.add_argument("--data", required=True, help="verl-format parquet (rlcore data gsm8k)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--reward", default="bench/reference/coin_reward.py", help="reward file (made absolute: Ray's workers may run elsewhere)")
    ap.add_argument("--name", default=None, help="experiment name (default: verl_WORKLOAD)")
    ap.add_argument("--extra", action="append", default=[], help="KEY=VALUE appended after the workload's overrides")
    args = ap.parse_args()
    for line in overrides(args.workload, args.model, args.data, args.steps, args.name or f"verl_{args.workload}", os.path.abspath(args.reward)) + args.extra:
        print(line)


if __name__ == "__main__":
    main()
