"""The single-controller loop::

    prompts --rollout--> responses --reward--> scores --old / ref log-probs, values--> --estimator--> advantages
            --critic / actor update--> new weights --weight sync--> rollout

The controller holds the loop and the data; workers (:mod:`rl_core.placement.worker`) hold the models, reached through
the :class:`~rl_core.placement.contract.Placement` protocol. Every stage is timed (``timing_s/<stage>``); checkpoints
and resume are :mod:`rl_core.trainer.saving`'s, validation :mod:`rl_core.trainer.validation`'s.
"""

from __future__ import annotations

import logging
import time
from contextlib import nullcontext
from typing import Any

import torch

from rl_core.algorithms.advantages import compute_advantage, group_index
from rl_core.algorithms.kl import apply_kl_penalty, kl_controller_from_config
from rl_core.backends import SamplingParams
from rl_core.batch import Batch
from rl_core.config.load import config_to_dict
from rl_core.util.console import phase
from rl_core.util.precision import precision_line
from rl_core.problems import ConfigError
from rl_core.plan.resolver import Plan
from rl_core.train_engine.guard import NonFiniteError, check_finite
from rl_core.checkpoints.kept import kept_checkpoint
from rl_core.trainer.metrics import batch_metrics, mean_of, throughput, timed
from rl_core.trainer.outputs import output_lock, write_config
from rl_core.trainer.saving import Saving
from rl_core.trainer.validation import Validation
from rl_core.trainer.progress import ProgressBar
from rl_core.trainer.log_prob_roles import LogProbRoles, needs_actor_log_probs
from rl_core.util.stopping import Interrupted, StopSignals, signal_name
from rl_core.util.user_paths import section_enabled
from rl_core.trainer.tracking import LoggerError, Tracker
from rl_core.placement.contract import Placement, WorkerMethod
from rl_core.placement.rollout_pool import RolloutPoolHandle
from rl_core.data.dataset import build_loaders, pad_token_id_of
from rl_core.modeling import load_tokenizer
from rl_core.observers import Observers, StepRollouts
from rl_core.placement import make_cluster
from rl_core.rewards.manager import RewardManager, scores_to_token_level
from rl_core.rollout import log_prob_decision
from rl_core.rollout.multi_turn import final_turn_mask, multi_turn_on, require_agent

# warn when the advantages have been all zero for this many steps in a row (nothing is learned)
ZERO_ADVANTAGE_STEPS = 3
# meta keys engines report as counters, summed over replicas and logged as metrics
COUNTER_PREFIXES = ("rollout/", "agent/")
# ... except durations (``rollout/weight_sync_s``, ``sleep_s``, ``wake_s``): every replica's engine does that work at the
# same time, so the step waits for the slowest: the largest over replicas, not the sum
DURATION_SUFFIX = "_s"

logger = logging.getLogger(__name__)


class Trainer(Saving, Validation):
    def __init__(
        self, stack: Plan, *, cluster: Placement | None = None, progress: bool | None = None, resume_anyway: bool = False, stop: StopSignals | None = None
    ) -> None:
        self.stack = stack
        self.config = cfg = stack.config  # checked when the plan was built (rl_core.plan.checks): nothing is checked again
        self.sizes = stack.sizes
        self._open_output_dir(resume_anyway)
        self.tokenizer = load_tokenizer(cfg.model.tokenizer_path or cfg.model.path, trust_remote_code=cfg.model.trust_remote_code)
        self.log_prob_roles = LogProbRoles(stack, self.tokenizer)  # e.g. a distillation teacher (rl_core.plan.roles)
        tools = None
        if multi_turn_on(cfg):  # the tools' schemas go into the prompts (templates that render them)
            tools = require_agent(getattr(stack, "agent", None), "the trainer").tool_schemas()

        features = getattr(stack, "features", None)
        self.generated_rows = features.get("generated_data") if features is not None else None  # rl-data's data.*_generator
        # trainer.kind other than rl (rl_core.run_kind): the run kind's data, steps and validation over this loop
        self.kind = stack.run_kind_fn(self) if getattr(stack, "run_kind_fn", None) is not None else None
        if self.kind is not None:
            self.train_loader, self.val_loader, data_info = self.kind.loaders()
        else:
            vision = features.get("multimodal") if features is not None else None  # prompts with images (rl-multimodal; None: not installed)
            processor = vision.processor_for_model(cfg.model) if vision is not None else None  # None for a text-only model
            self.train_loader, self.val_loader, data_info = build_loaders(cfg.data, self.tokenizer, seed=cfg.data.seed, tools=tools, processor=processor,
                                                                          extra_rows=self.generated_rows, custom_rows=features.get("custom_dataset") if features is not None else None)
            problems = vision.stack_problems(stack, [self.train_loader.dataset, self.val_loader.dataset if self.val_loader else None]) if vision else []
            if problems:  # prompts with images and a backend (or algorithm) that cannot carry them
                raise ConfigError(problems)
        self.data_info = data_info
        self.total_steps = cfg.trainer.total_training_steps or cfg.trainer.total_epochs * len(self.train_loader)
        self.reward = RewardManager.for_stack(stack) if self.kind is None else None  # the resolver's reward function and cards
        # the plan's step hooks (rl_core.plan.step_hooks): reward shapers (e.g. reward.overlong_penalty) and the batch sampler
        self.reward_shapers = [s for s in (make(cfg) for _card, make in getattr(stack, "reward_shapers", ())) if s is not None]
        sampler = getattr(stack, "batch_sampler", None)
        self.batch_sampler = sampler[1](cfg) if sampler is not None else None
        self.kl_ctrl = kl_controller_from_config(cfg.algorithm.kl_ctrl) if cfg.algorithm.use_kl_in_reward else None
        self.tracker = Tracker(
            cfg.trainer.loggers, cfg.trainer.output_dir, cfg.trainer.project_name, cfg.trainer.experiment_name, config_to_dict(cfg),
            trackers=getattr(stack, "trackers", ()),  # the tracker cards' factories the plan loaded (tensorboard, wandb, ...)
        )
        self.progress_enabled = progress
        self.stop = stop or StopSignals()  # not installed: a bare Trainer (tests, notebooks) keeps the caller's handlers
        if cluster is None:
            cluster = make_cluster(stack)  # trainer.placement: local processes, or Ray actors
        self.cluster: Placement = cluster
        self.cluster.call(WorkerMethod.SET_TOTAL_STEPS, same_args=(self.total_steps,))
        self.step = 0
        self.correction = rollout_correction_of(stack)  # rl-rollout-correction (None: not installed, no rollout_corr/*)
        self.recompute_old_log_prob = needs_old_log_prob_pass(stack)
        # the rollout's log-probs on-policy without a correction: the mismatch metrics (rollout_corr/*) from the update
        # forward's own log-probs (the old policy's), not from a separate forward pass; on the steps that have them
        self.keep_update_log_probs = not self.recompute_old_log_prob and cfg.rollout.calculate_log_probs is not False
        self.zero_adv_steps = 0  # consecutive steps whose advantages were all zero
        self.pipeline = self._rollout_pipeline()  # a rollout pool of its own (Plan.rollout_pool: rl-async), else None
        # step observers (rl_core.observers, e.g. rl-traces): each step's rollouts and each validation's
        self.observers = Observers(getattr(stack, "observers", ()), cfg, cfg.trainer.output_dir)
        features = getattr(stack, "features", None)  # profiler.* (rl-profiling): the steps whose calls the workers record
        self.profiled_step = features.hook(cfg, "profiled_step") if features is not None else None

    def _rollout_pipeline(self):
        """The rollout pool's schedule (rollout.n_gpus_per_node; rl_core.placement.rollout_pool), started: version 0 synced."""
        if getattr(self.stack, "rollout_pool_fn", None) is None:
            return None
        pipeline = self.stack.rollout_pool_fn(RolloutPoolHandle(
            config=self.config, rollout=self.cluster.pool("rollout"), train=self.cluster.pool("main"), split=self._rollout_args,
            merge=self._merge_rollouts, draw=self.train_loader.next_batch, loader_state=self.train_loader.state_dict))
        try:
            pipeline.start()
        except BaseException:
            pipeline.close()
            self.cluster.close(force=True)  # workers blocked in the group's rendezvous would otherwise stay
            raise
        return pipeline

    # --------------------------------------------------------------- dispatch
    def _train_call(self, method: WorkerMethod, batch: Batch, *extra: Any) -> list[Any]:
        """Call ``method`` on each data-parallel rank of its role with that rank's shard of ``batch`` (a model-parallel group
        shares one); one result per data-parallel rank."""
        method = WorkerMethod.named(method)
        role = method.role
        reps = self._model_parallel(role)
        shards = batch.chunk(self.sizes.ranks(role)[1])
        per_rank = [(s, *extra) for s in shards for _ in range(reps)]
        return self.cluster.call(method, per_rank)[::reps]

    def _model_parallel(self, role: str) -> int:
        """Workers per data-parallel rank of ``role`` (train TP x PP)."""
        workers, dp = self.sizes.ranks(role)
        return workers // dp

    def _checked_cat(self, parts: list[torch.Tensor], mask: torch.Tensor, *, stage: str, role: str, tensor: str) -> torch.Tensor:
        """Concatenate per-rank results, stopping on a NaN / inf (named with the rank that sent it)."""
        reps = self._model_parallel(role)
        out = torch.cat(parts, dim=0)
        row_ranks = [i * reps for i, p in enumerate(parts) for _ in range(len(p))]
        check_finite(out, stage=stage, role=role, tensor=tensor, mask=mask, row_ranks=row_ranks)
        return out

    def generate(self, prompts: Batch, params: SamplingParams) -> Batch:
        if self.pipeline is not None:  # a generation in flight is answered first (its batch is kept)
            self.pipeline.drain()
        args, pad = self._rollout_args(prompts, params)
        return self._merge_rollouts(self.cluster.call(WorkerMethod.GENERATE, args), pad, params)

    def _rollout_args(self, prompts: Batch, params: SamplingParams) -> tuple[list[tuple], int]:
        """Per rollout rank: its replica's shard of ``prompts`` (padded to the replica count), and the padding."""
        replicas, tp = self.sizes.rollout_replicas, self.sizes.rollout_tp
        padded, pad = prompts.pad_to_divisor(replicas)
        shards = padded.chunk(replicas)
        return [(shards[r // tp], params) for r in range(self.sizes.ranks("rollout")[0])], pad

    def _merge_rollouts(self, results: list[Batch], pad: int, params: SamplingParams) -> Batch:
        results = results[:: self.sizes.rollout_tp]
        out = Batch.concat(results)
        # engines report counters (e.g. rollout/empty_responses, agent/tool_calls) in meta: sum them over replicas;
        # durations: the slowest replica's
        out.meta = {k: v for k, v in out.meta.items() if not k.startswith(COUNTER_PREFIXES)}
        for part in results:
            for k, v in part.meta.items():
                if k.startswith(COUNTER_PREFIXES):
                    out.meta[k] = max(out.meta.get(k, v), v) if k.endswith(DURATION_SUFFIX) else out.meta.get(k, 0) + v
        return out.unpad(pad * params.n)

    # ------------------------------------------------------------------- step
    def sampling(self, *, greedy: bool = False, step: int = 0) -> SamplingParams:
        r = self.config.rollout
        return SamplingParams(
            n=1 if greedy else r.n, temperature=r.val_temperature if greedy else r.temperature,
            top_p=1.0 if greedy else r.top_p, top_k=-1 if greedy else r.top_k,
            max_new_tokens=self.config.data.max_response_length, greedy=greedy or not r.do_sample,
            seed=self.config.trainer.seed * 1_000_003 + step,
            logprobs=log_prob_decision.wanted(self.config, step) and getattr(self.stack.rollout, "logprobs", True) is not False and not greedy,
            stop=tuple(r.stop),
        )

    def decode_responses(self, batch: Batch) -> list[str]:
        """Each row's ``solution_str``: its sampled tokens; for a multi-turn row (``extra_info["agent"]``) only those of
        its last assistant turn, the final answer (the whole conversation is in ``extra_info["messages"]``)."""
        masks = batch["response_mask"].bool()
        infos = batch.non_tensors.get("extra_info")
        if infos is not None and any(isinstance(i, dict) and "agent" in i for i in infos):
            final = final_turn_mask(masks)
            masks = torch.stack([final[r] if isinstance(i, dict) and "agent" in i else masks[r] for r, i in enumerate(infos)])
        return [self.tokenizer.decode(ids[m].tolist(), skip_special_tokens=True) for ids, m in zip(batch["responses"], masks)]

    def score_rows(self, batch: Batch, *, train: bool = True) -> tuple[torch.Tensor, dict[str, float], torch.Tensor, list[dict]]:
        """``(scores, metrics, scores before the reward shapers, the reward function's per-row dicts)``; training
        rewards (``train``) go through the plan's reward shapers (e.g. reward.overlong_penalty), validation scores do not."""
        batch["response_text"] = self.decode_responses(batch)
        seconds: list[float] = []
        model = (lambda rows: self._model_rewards(batch, rows, seconds)) if section_enabled(self.config, "reward_model") else None
        raw, metrics, extras = self.reward.score(batch, model=model)
        if seconds:
            metrics["timing_s/reward_model"] = sum(seconds)
        scores = raw
        for shaper in self.reward_shapers if train else ():
            scores, shaped_metrics = shaper(scores, batch)
            metrics.update(shaped_metrics)
        batch["token_level_scores"] = scores_to_token_level(scores, batch["response_mask"])
        return scores, metrics, raw, extras

    def _model_rewards(self, batch: Batch, rows, seconds: list[float]) -> dict[int, Any]:
        """The reward model's outcomes for ``rows``: texts (decoded with the policy's tokenizer) go to the workers
        that hold it, split evenly; each re-encodes them with the reward model's own tokenizer."""
        start = time.perf_counter()
        call = lambda shares: self.cluster.call(WorkerMethod.SCORE_WITH_MODEL, shares)  # noqa: E731
        out = self.stack.features["reward_model"].score(batch, rows, self.config, self.sizes.ranks("reward_model")[0], call)
        seconds.append(time.perf_counter() - start)
        return out

    def _generate_and_score(self, prompts: Batch, step: int, t: dict[str, float], metrics: dict[str, float]) -> Batch:
        """One round: generate and score ``prompts`` (the scores kept in ``self._scored``)."""
        with timed(t, "gen"):
            if self.pipeline is None:
                batch = self.generate(prompts, self.sampling(step=step))
            else:  # split pools: this step's batch (maybe generated during the last update), then the next one's start
                batch, async_metrics = self.pipeline.batch(step, self.sampling(step=step), trainer_version=step - 1)
                metrics.update(async_metrics)
                if step < self.total_steps:
                    self.pipeline.prefetch(step + 1, self.sampling(step=step + 1))
                else:  # no generation follows to take a sync sent in the background along: received during this step
                    self.pipeline.receive_pending()
            if "rollout_log_probs" in batch:
                check_finite(batch["rollout_log_probs"], stage="gen", role="rollout", tensor="rollout log-probs", mask=batch["response_mask"])
        with timed(t, "reward"):
            scores, reward_metrics, raw, extras = self.score_rows(batch)
            check_finite(scores, stage="reward", role="reward", tensor="reward scores")
            metrics.update(reward_metrics)
            metrics.update(self._reward_health(step, len(scores), reward_metrics))
        self._scored = (batch, scores, raw, extras)  # the step's observers get them (the last round's)
        return batch

    def _sampled_batch(self, prompts: Batch, step: int, t: dict[str, float], metrics: dict[str, float]) -> Batch:
        """The plan's batch sampler (e.g. algorithm.filter_groups, DAPO's dynamic sampling): the step's batch over rounds."""

        def run_round(p: Batch) -> tuple[StepRollouts, dict[str, float]]:
            got: dict[str, float] = {}
            batch = self._generate_and_score(p, step, t, got)
            _, scores, raw, extras = self._scored
            return StepRollouts(step=step, phase="train", batch=batch, scores=scores, raw_scores=raw, reward_extras=extras), got

        batch, sampled_metrics = self.batch_sampler(prompts, run_round=run_round, draw=self.train_loader.next_batch, step=step,
                                                    pad_token_id=pad_token_id_of(self.tokenizer), counters=COUNTER_PREFIXES)
        metrics.update(sampled_metrics)
        return batch

    def train_step(self, prompts: Batch, step: int) -> dict[str, float]:
        cfg = self.config
        t: dict[str, float] = {}
        metrics: dict[str, float] = {}
        with timed(t, "step"):
            if self.batch_sampler is not None:  # e.g. DAPO's dynamic sampling: rounds until enough groups differ
                batch = self._sampled_batch(prompts, step, t, metrics)
            else:
                batch = self._generate_and_score(prompts, step, t, metrics)
            mask = batch["response_mask"]
            baseline = None
            if self.stack.estimator.needs_greedy_baseline:
                with timed(t, "gen_baseline"):
                    greedy = self.generate(prompts, self.sampling(greedy=True, step=step))
                    baseline = self.score_rows(greedy)[0].repeat_interleave(cfg.rollout.n)
            if self.recompute_old_log_prob:
                with timed(t, "old_log_prob"):
                    parts = self._train_call(WorkerMethod.COMPUTE_LOG_PROB, batch, cfg.rollout.temperature, True)
                    batch["old_log_probs"] = self._checked_cat(
                        [p["log_probs"] for p in parts], mask, stage="old_log_prob", role="actor", tensor="log-probs"
                    )
                    entropy = torch.cat([p["entropy"] for p in parts])
                    if "routed_experts" in parts[0]:  # actor.router_replay=R2: the update replays this pass's routing
                        batch["routed_experts"] = torch.cat([p["routed_experts"] for p in parts])
                    mask = batch["response_mask"].float()
                    metrics["actor/entropy"] = ((entropy * mask).sum() / mask.sum().clamp(min=1)).item()
            if cfg.ref.enable:
                with timed(t, "ref"):
                    batch["ref_log_prob"] = self._checked_cat(
                        self._train_call(WorkerMethod.COMPUTE_REF_LOG_PROB, batch, cfg.rollout.temperature), mask,
                        stage="ref", role="ref", tensor="reference log-probs",
                    )
            self.log_prob_roles.compute(batch, cfg.rollout.temperature, t, metrics)  # a teacher's log-probs (rl_core.plan.roles)
            if cfg.critic.enable:
                with timed(t, "values"):
                    batch["values"] = self._checked_cat(self._train_call(WorkerMethod.COMPUTE_VALUES, batch), mask, stage="values", role="critic", tensor="values")
            with timed(t, "adv"):
                if self.kl_ctrl is not None:
                    rewards, kl_metrics = apply_kl_penalty(
                        batch["token_level_scores"], batch["old_log_probs"], batch["ref_log_prob"], batch["response_mask"],
                        self.kl_ctrl, cfg.algorithm.kl_penalty,
                    )
                    metrics.update(kl_metrics)
                else:
                    rewards = batch["token_level_scores"]
                batch["token_level_rewards"] = rewards
                if self.correction is not None and "rollout_log_probs" in batch.tensors.keys() and "old_log_probs" in batch.tensors.keys():
                    # rl-rollout-correction: IS weights for the policy loss (rollout_is_weights), rejection in the mask
                    metrics.update(self.correction.correct(batch, cfg))
                adv, returns = compute_advantage(
                    cfg.algorithm.adv_estimator, card=self.stack.estimator, fn=self.stack.estimator_fn,
                    token_level_rewards=rewards, response_mask=batch["response_mask"], index=group_index(batch["uid"]),
                    values=batch["values"] if cfg.critic.enable else None, gamma=cfg.algorithm.gamma, lam=cfg.algorithm.lam,
                    baseline_rewards=baseline,
                    options={"norm_adv_by_std": cfg.algorithm.norm_adv_by_std_in_grpo, **cfg.algorithm.options},
                    **self.log_prob_roles.for_estimator(batch),
                )
                check_finite(rewards, stage="adv", role="controller", tensor="token-level rewards", mask=mask)
                check_finite(adv, stage="adv", role="controller", tensor="advantages", mask=mask)
                check_finite(returns, stage="adv", role="controller", tensor="returns", mask=mask)
                batch["advantages"], batch["returns"] = adv, returns
                metrics.update(self._advantage_health(step, adv, mask))
            if cfg.critic.enable:
                with timed(t, "update_critic"):
                    metrics.update(_guard_update("critic", self._train_call(WorkerMethod.UPDATE_CRITIC, batch)))
            with timed(t, "update_actor"):
                keep = self.keep_update_log_probs and ("rollout_log_probs" in batch.tensors.keys() or bool(self.observers))  # their only readers
                per_rank = self._train_call(WorkerMethod.UPDATE_ACTOR, batch, not self.recompute_old_log_prob, keep)
                kept = _pop_kept_log_probs(per_rank) if keep else None
                metrics.update(_guard_update("actor", per_rank))
            if self.correction is not None and kept is not None and "rollout_log_probs" in batch.tensors.keys():
                metrics.update(self.correction.update_metrics(*kept, batch["rollout_log_probs"], batch["response_mask"], cfg))
            if self.observers:
                with timed(t, "observers"):
                    self._observe_step(step, batch, kept)
            metrics.update(self._mismatch_gap(step, batch, mask, kept))  # rl-rollout-correction: the share and the bound
            if self.pipeline is not None:  # the next step's generation (overlapping this update) finishes first
                with timed(t, "gen_overlap_wait"):
                    self.pipeline.drain()
            with timed(t, "sync_weights"):
                if self.pipeline is None:
                    self.cluster.call(WorkerMethod.SYNC_WEIGHTS)
                else:
                    self.pipeline.sync(step)
        metrics.update({k: float(v) for k, v in batch.meta.items() if k.startswith(COUNTER_PREFIXES)})
        if metrics.get("agent/trajectories"):  # multi-turn rollouts (rl_core.rollout.multi_turn): per-trajectory means
            metrics["agent/turns_mean"] = metrics["agent/turns"] / metrics["agent/trajectories"]
            metrics["agent/tool_calls_mean"] = metrics.get("agent/tool_calls", 0.0) / metrics["agent/trajectories"]
        metrics.update(batch_metrics(batch, cfg.data.max_response_length))
        metrics.update(throughput(batch, t["timing_s/step"], self.sizes.devices))
        metrics.update(t)
        peaks = [p for p in self.cluster.call(WorkerMethod.PEAK_MEMORY_GB) if p is not None]
        if peaks:
            metrics["perf/max_memory_allocated_gb"] = max(peaks)
        metrics["training/epoch"] = float(self.train_loader.state_dict().get("epoch", 0))
        return metrics

    def _observe_step(self, step: int, batch: Batch, kept: tuple[torch.Tensor, torch.Tensor] | None) -> None:
        """Hand the step's trained rows to the step observers (rl_core.observers)."""
        scored_batch, scores, raw, extras = self._scored
        if scored_batch is not batch:  # dynamic sampling kept some rows of several rounds: the scores the step trained on
            scores, raw, extras = batch["token_level_scores"].sum(-1), None, None
        trainer_lp = batch["old_log_probs"] if "old_log_probs" in batch.tensors.keys() else None
        if trainer_lp is None and kept is not None:  # the on-policy update's own, for the rows it computed
            trainer_lp = torch.where(kept[1].bool().unsqueeze(-1), kept[0], torch.full_like(kept[0], float("nan")))
        self.observers.call("on_rollouts", StepRollouts(
            step=step, phase="train", batch=batch, scores=scores, raw_scores=raw, reward_extras=extras, trainer_log_probs=trainer_lp,
            policy_version=step - 1, tokenizer=self.tokenizer, max_response_length=self.config.data.max_response_length))

    def _mismatch_gap(self, step: int, batch: Batch, mask: torch.Tensor, kept) -> dict[str, float]:
        """``rollout_corr/log_prob_gap_frac`` and rollout.mismatch.max_abs_diff's check (rl-rollout-correction's) of
        the rollout's log-probs against the trainer's: the old-log-prob pass's, else the on-policy update's own."""
        if self.correction is None or "rollout_log_probs" not in batch.tensors.keys():
            return {}
        if "old_log_probs" in batch.tensors.keys():
            trainer, valid = batch["old_log_probs"], mask.bool()
        elif kept is not None:
            trainer, valid = kept[0], mask.bool() & kept[1].unsqueeze(-1)
        else:
            return {}
        return self.correction.gap(step, trainer, valid, batch, self.config, self.tokenizer)

    # ---------------------------------------------------------------- health
    def _reward_health(self, step: int, n: int, reward_metrics: dict[str, float]) -> dict[str, float]:
        """``reward/all_failed`` (1 when no sample of the step got a real score), with a loud warning."""
        failed = int(reward_metrics.get("reward/timeouts", 0) + reward_metrics.get("reward/errors", 0))
        if n and failed >= n:
            logger.warning(
                "step %d: every one of the %d rewards failed (%d timeouts, %d errors) and scored 0: this step learns "
                "nothing; check the reward function (reward.on_error=raise shows the first error) or raise reward.timeout_s",
                step, n, int(reward_metrics.get("reward/timeouts", 0)), int(reward_metrics.get("reward/errors", 0)),
            )
            return {"reward/all_failed": 1.0}
        return {"reward/all_failed": 0.0}

    def _advantage_health(self, step: int, adv: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
        """``critic/advantages_all_zero``; warns once they have been all zero for ZERO_ADVANTAGE_STEPS steps."""
        zero = not bool((adv[mask.bool()] != 0).any())
        self.zero_adv_steps = self.zero_adv_steps + 1 if zero else 0
        if self.zero_adv_steps >= ZERO_ADVANTAGE_STEPS:
            logger.warning(
                "step %d: the advantages have been all zero for %d steps in a row: nothing is learned "
                "(every response of a group gets the same reward: too easy or too hard prompts, a constant reward, "
                "or rollout.n=1 with a group estimator)",
                step, self.zero_adv_steps,
            )
        return {"critic/advantages_all_zero": float(zero)}

    # ------------------------------------------------------------- run kinds
    def update_actor(self, batch: Batch) -> dict[str, float]:
        """A run kind's actor update (rl_core.run_kind.RunHandle): off-policy form, metrics averaged over ranks."""
        return _guard_update("actor", self._train_call(WorkerMethod.UPDATE_ACTOR, batch, False, False))

    def actor_log_probs(self, batch: Batch, temperature: float = 1.0) -> torch.Tensor:
        """A run kind's forward of the actor (rl_core.run_kind.RunHandle): per-token log-probs of the responses."""
        parts = self._train_call(WorkerMethod.COMPUTE_LOG_PROB, batch, temperature, False)
        return self._checked_cat([p["log_probs"] for p in parts], batch["response_mask"], stage="validate", role="actor", tensor="log-probs")

    # -------------------------------------------------------------------- fit
    def fit(self) -> dict[str, float]:
        cfg = self.config.trainer
        self.step = start = self.maybe_resume()
        # metrics.jsonl describes this run only: rows after the resumed step (all of them on a fresh
        # start, e.g. after a crash before the first checkpoint) belong to a run that is gone
        self.tracker.truncate_after(start if start > 0 else -1)
        self.observers.call("on_start", start)  # what they kept after the resumed step is gone too
        if self.config_diff and start > 0:
            print(
                f"resuming under a changed config (--resume-anyway); from step {start + 1} the run uses the new values:\n  "
                + "\n  ".join(self.config_diff),
                flush=True,
            )
        write_config(cfg.output_dir, config_to_dict(self.config))  # everything is validated and built by now
        last: dict[str, float] = {}
        if start == 0 and cfg.val_before_train and cfg.test_freq > 0 and self.val_loader is not None:
            with phase("validating before training" + (" (greedy, every held-out prompt)" if self.kind is None else "")):
                val = self.validate(step=0)
            self.tracker.log(val, step=0)
            self.observers.call("on_step_end", 0)
            last.update(val)
        bar = ProgressBar(self.total_steps, initial=start, enable=self.progress_enabled)
        try:
            for step in range(start + 1, self.total_steps + 1):
                self.stop.graceful = True  # a first signal from here on lets the step finish and saves it
                prompts = self.train_loader.next_batch() if self.pipeline is None else self.pipeline.prompts(step)
                profiled = self.profiled_step is not None and self.profiled_step(self.config, step)
                try:
                    if profiled:
                        self.cluster.call(WorkerMethod.PROFILE_STEP, same_args=(step,))
                    with phase(f"step {step} (the first step of a process also warms up / compiles)") if step == start + 1 else nullcontext():
                        metrics = self.train_step(prompts, step) if self.kind is None else self.kind.train_step(prompts, step)
                    if profiled:
                        self.cluster.call(WorkerMethod.PROFILE_STEP, same_args=(None,))
                except NonFiniteError as exc:
                    last_ckpt = self.ckpt.latest()
                    where = f"a rerun resumes from the last checkpoint, {last_ckpt[1]}" if last_ckpt else "there is no checkpoint yet, so a rerun starts over"
                    raise NonFiniteError(
                        f"step {step}: {exc}. Nothing of step {step} was saved and no hf_final was written; {where}.",
                        stage=exc.stage, role=exc.role, rank=exc.rank, tensor=exc.tensor,
                    ) from None
                stopping = self.stop.requested
                if cfg.test_freq > 0 and not stopping and (step % cfg.test_freq == 0 or step == self.total_steps):
                    metrics.update(self.validate(step=step))
                # Log before saving: a crash between the two resumes from the previous
                # checkpoint, which truncates this row away; the reverse order would lose it.
                try:
                    self.tracker.log(metrics, step=step)
                except LoggerError as exc:  # a full disk: say what is kept, and keep the step's state if nothing else is
                    raise LoggerError(f"{exc} {self._kept_after_failure(step)}") from None
                self.observers.call("on_step_end", step)  # before the checkpoint, as the metrics row
                bar.update(step, metrics)
                self.stop.graceful = False  # while saving, a signal stops at once (the save is then undone)
                if stopping or (cfg.save_freq > 0 and (step % cfg.save_freq == 0 or step == self.total_steps)):
                    saved = self.save_checkpoint(step)
                self.step = step
                last = metrics
                if stopping:
                    raise Interrupted(
                        stopping,
                        f"stopped by {signal_name(stopping)} after step {step} of {self.total_steps}: saved {kept_checkpoint(saved, cfg.output_dir)}; "
                        "run the same command to resume from it",
                    )
            self.stop.graceful = False
            self._save_final()
        except Interrupted as exc:
            if exc.message:
                raise
            raise Interrupted(exc.signum, self.interrupted_text(exc.signum)) from None
        finally:
            self.stop.graceful = False
            bar.close()
            self.tracker.close()
            self.observers.call("close")
        return last

    def close(self, force: bool = False) -> None:
        if getattr(self, "pipeline", None) is not None:
            self.pipeline.close()
        if self.reward is not None:
            self.reward.close()
        self.cluster.close(force=force)


def _guard_update(role: str, per_rank: list[dict[str, float]]) -> dict[str, float]:
    """A backend's update metrics, averaged; a non-finite loss stops the step (backends without their own guard)."""
    for rank, metrics in enumerate(per_rank):
        for key in (f"{role}/loss", f"{role}/grad_norm"):
            value = metrics.get(key)
            if value is not None:
                check_finite(torch.tensor([float(value)]), stage=f"update_{role}", role=role, tensor=key.split("/")[1], rank=rank)
    return mean_of(per_rank)


def _pop_kept_log_probs(per_rank: list[dict[str, Any]]) -> tuple[torch.Tensor, torch.Tensor]:
    """The on-policy update's own log-probs (``keep_log_probs``), taken out of each rank's metrics, in batch order."""
    values = [m.pop("actor/log_probs") for m in per_rank]
    computed = [m.pop("actor/log_probs_computed") for m in per_rank]
    return torch.cat(values), torch.cat(computed)


def rollout_correction_of(stack: Plan) -> Any:
    """The object of rl-rollout-correction's feature (``Plan.features``; None: not installed): what the loop calls for the
    ``rollout_corr/*`` metrics, the bound and the correction of each step's batch (docs/plugins.md)."""
    features = getattr(stack, "features", None)
    return features.get("rollout_correction") if features is not None else None


def needs_old_log_prob_pass(stack: Plan) -> bool:
    """Whether the step runs a separate forward pass for the old policy's log-probs: on-policy (one mini-batch, one
    epoch) a backend declaring ``on_policy_without_old_log_probs`` takes them from its update; KL-in-reward needs them first."""
    cfg = stack.config
    # the IS weights compare the rollout's log-probs with pi_old's: first, unless an on-policy update can weight each
    # row from its own forward (rl-rollout-correction's in_update: no rejection, no batch normalisation)
    correction = rollout_correction_of(stack)
    if correction is not None and correction.needs_old_log_prob_pass(cfg):
        return True
    # rollout.calculate_log_probs alone (the mismatch metrics, rollout_corr/*): on-policy, the update's own forward
    # gives pi_old's log-probs (Trainer.keep_update_log_probs); no pass for them
    if cfg.actor.recompute_old_log_prob is not None:
        return cfg.actor.recompute_old_log_prob
    if needs_actor_log_probs(stack) and not cfg.rollout.calculate_log_probs:  # the estimator reads them before the update
        return True
    on_policy = stack.sizes.actor_mini_batches == 1 and cfg.actor.ppo_epochs == 1
    return not (on_policy and stack.train.on_policy_without_old_log_probs and not cfg.algorithm.use_kl_in_reward)


def train(stack: Plan, **kwargs) -> dict[str, float]:
    """Build and run in the locked output folder; SIGINT / SIGTERM end it with :class:`~rl_core.util.stopping.Interrupted`."""
    with output_lock(stack.config.trainer.output_dir), StopSignals() as stop:
        try:
            with phase("loading the model(s) and starting the workers"):
                trainer = Trainer(stack, stop=stop, **kwargs)
        except Interrupted as exc:
            raise Interrupted(exc.signum, f"stopped by {signal_name(exc.signum)} while starting: nothing was trained or saved") from None
        stop.install()  # again: starting Ray replaces the SIGTERM handler
        finished = False
        try:
            result = trainer.fit()
            finished = True
            return result
        finally:
            trainer.close(force=not finished)  # after a failure or a signal the workers may be mid-call: no waiting


def describe_plan(stack: Plan) -> str:
    """What `rlcore train --dry-run` prints after the resolved sizes."""
    cfg = stack.config
    lines = [
        f"output dir: {cfg.trainer.output_dir}",
        f"steps: {cfg.trainer.total_training_steps or f'{cfg.trainer.total_epochs} epoch(s) of the training set'}",
        f"checkpoints: every {cfg.trainer.save_freq} steps" if cfg.trainer.save_freq > 0 else "checkpoints: only at the end (hf_final)",
        f"validation: every {cfg.trainer.test_freq} steps" if cfg.trainer.test_freq > 0 else "validation: off",
        f"roles: actor{' + ref' if cfg.ref.enable else ''}{' + critic' if cfg.critic.enable else ''}"
        f"{f' + reward model ({cfg.reward_model.name})' if section_enabled(cfg, 'reward_model') else ''}"
        + (f", rollout {stack.rollout.name}" if getattr(stack, "needs_rollout", True) else f" (trainer.kind={cfg.trainer.kind}: no rollout)"),
        "old log-probs: " + ("a separate forward pass" if needs_old_log_prob_pass(stack) else "taken from the on-policy update (one mini-batch, one epoch)"
                            + (", which applies the rollout-correction weights itself" if (c := rollout_correction_of(stack)) is not None and c.on(cfg) else ""))
        if getattr(stack, "needs_rollout", True) else f"loss: actor.policy_loss={cfg.actor.policy_loss}",
        f"precision: {precision_line(cfg.model.dtype, cfg.trainer.device)}",
    ]
    lines += [line for f in stack.features.on(cfg) if "plan_lines" in f.hooks for line in f.hooks["plan_lines"](stack)]  # rl-routing-replay's
    if "rollout" in stack.sizes.pools:  # a rollout pool of its own (rl-async; its config section "async")
        s = getattr(getattr(cfg, "async_", None), "max_staleness", 0)
        lines.append(
            f"rollout: {stack.sizes.pools['rollout'][0]} worker(s) of its own, weights sent after every update; "
            + ("synchronous (async.max_staleness=0)" if s == 0 else f"off-policy by up to {s} version(s): step k+1 generates during step k's update")
        )
    return "\n".join(lines)

