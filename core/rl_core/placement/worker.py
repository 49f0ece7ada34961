"""The hybrid worker: one process's actor, reference, critic and rollout engines, colocated as in verl's hybrid engine
(weight sync is an in-memory copy). A role with devices of its own lives in workers holding only it
(:func:`worker_roles`). The placement calls the ``WorkerMethod`` table's methods; nothing here knows where it runs.
"""

from __future__ import annotations

import contextlib
import random
import time
from typing import Any

import attrs
import numpy as np
import torch

from rl_core.backends import SamplingParams, WorkerContext, engine_metrics_prefix
from rl_core.batch import Batch
from rl_core.train_engine.engine import build_role_engine
from rl_core.rollout.supervisor import EngineSupervisor
from rl_core.weight_sync_check import load_verified
from rl_core.util.determinism import apply_determinism


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def worker_roles(config, pool: str = "main", *, rollout: bool = True) -> tuple[str, ...]:
    """The roles the workers of ``pool`` hold: ``main`` (the actor, the rollout, and every enabled role without a
    pool of its own, colocated as in verl's hybrid engine) or a role's own pool (``critic``, ``ref``).
    ``rollout=False``: no rollout engine (a run kind that generates nothing, ``Plan.needs_rollout``)."""
    if pool != "main":
        return (pool,)
    roles = ["actor"] if config.rollout.n_gpus_per_node is not None or not rollout else ["actor", "rollout"]
    for role in ("ref", "critic", "reward_model"):
        section = getattr(config, role, None)  # reward_model: rl-reward-model's section
        if section is not None and section.enable and section.n_gpus_per_node is None:
            roles.append(role)
    return tuple(roles)


class HybridWorker:
    def __init__(self, stack, context: WorkerContext, roles: tuple[str, ...] | None = None) -> None:
        self.stack = stack
        # rollout.exact: the Plan's log-prob forward goes to every engine with its context (rl_core.cards.LogProbForwardCard);
        # so do the Plan's features (rl_core.plan.features: LoRA's hooks, rl-multimodal's / rl-routing-replay's objects)
        self.context = context = attrs.evolve(context, log_prob_forward=getattr(stack, "log_prob_forward", None), features=getattr(stack, "features", None))
        config = stack.config
        self.roles = worker_roles(config, rollout=getattr(stack, "needs_rollout", True)) if roles is None else tuple(roles)
        apply_determinism(config)  # trainer.deterministic (rl_core.util.determinism): before this process's first CUDA op
        seed_everything(config.trainer.seed + context.rank)
        make_train = stack.train.load()
        # LoRA (issue #32): the reference policy is the actor's model with its adapters off, not a second copy
        self.ref_from_actor = config.model.lora_rank > 0 and "ref" in self.roles and "actor" in self.roles
        engines = {
            role: build_role_engine(make_train, role, config, context, sizes=stack.sizes, policy_loss=stack.policy_loss_fn)
            for role in ("actor", "ref", "critic")
            if role in self.roles and not (role == "ref" and self.ref_from_actor)
        }
        self.actor, self.ref, self.critic = engines.get("actor"), engines.get("ref"), engines.get("critic")
        # the rollout engine gets the resolved agent runtime (rollout.multi_turn) with its context
        rollout_context = attrs.evolve(context, agent=stack.agent) if getattr(stack, "agent", None) is not None else context
        build_rollout = lambda: stack.rollout.load()(config, rollout_context)  # noqa: E731 - also the supervisor's rebuild
        self.rollout = build_rollout() if "rollout" in self.roles else None
        self._engines = None if self.rollout is None else EngineSupervisor(  # an engine that dies or hangs is replaced
            self.rollout, build=build_rollout,
            resync=self._resync_new_engine if "actor" in self.roles else None, name=config.rollout.name, rank=context.rank,
            timeout_s=config.rollout.engine_timeout_s, restarts=config.rollout.engine_restarts, window_s=config.rollout.engine_restart_window_s)
        self.reward_model = None
        if "reward_model" in self.roles:  # a learned reward model / judge: rl-reward-model's feature builds the role
            self.reward_model = stack.features["reward_model"].role(stack, context, colocated="actor" in self.roles)
        self._convert = stack.converter.load() if stack.converter is not None else None
        self._sleeping = False
        self._step_peak = 0.0  # CUDA: the step's peak allocated bytes before the last phase reset (_phase_peak)
        self._weight_version = -1  # the policy version the rollout engine holds (syncs so far - 1): weight_version
        # a rollout pool of its own: the Plan's worker extension (rl_core.placement.rollout_pool), e.g. the weight transfer
        make_extension = getattr(stack, "rollout_pool_worker_fn", None)
        self.extension = make_extension(self) if make_extension is not None else None
        self.extension_methods = frozenset(stack.rollout_pool.methods) if self.extension is not None else frozenset()
        # a feature's own weight sync (rl-lora's adapter sync: the frozen base once, then the adapters), None: the plain one
        make_sync = context.features.hook(config, "weight_sync") if self.actor is not None and context.features is not None else None
        self._feature_sync = make_sync(config, self.rollout) if make_sync is not None else None
        self._base_sent = False
        make_profiler = context.features.hook(config, "worker_profiler") if context.features is not None else None  # rl-profiling
        self.profiler = make_profiler(config, context.rank, context.device) if make_profiler is not None else None
        if self.rollout is not None and self.actor is not None:  # start from the actor's exact weights (random-init models, dtype casts, ...)
            self.sync_weights()

    @property
    def weight_version(self) -> int:
        """The policy version the rollout engine holds; a rollout pool's extension sets it when weights arrive."""
        return self._weight_version

    @weight_version.setter
    def weight_version(self, version: int) -> None:
        self._weight_version = version

    # ----------------------------------------------------------------- rollout
    def generate(self, batch: Batch, params: SamplingParams) -> Batch:
        if self._sleeping:
            self.rollout.wake_up()
            self._sleeping = False
        if params.seed is not None:
            # one stream per rollout replica: the ranks of a TP group must sample alike
            replica = self.context.rank // self.stack.sizes.rollout_tp
            params = attrs.evolve(params, seed=params.seed + 7919 * replica)
        start = time.perf_counter()
        out = self._engines.generate(batch, params)
        self.rollout = self._engines.engine  # a replacement, after a recovery
        out.meta["policy_version"] = self._weight_version  # the weights that sampled it (rl-async)
        if self.actor is None:  # a rollout pool of its own: every sample carries its version, and the time it took
            out["policy_version"] = torch.full((len(out),), self._weight_version, dtype=torch.long)
            out.meta["rollout_seconds"] = time.perf_counter() - start
        # a rollout pool of its own (no actor here) never sleeps: nothing else runs on its GPU, and a large engine
        # would pay a host round trip of its weights and the graph captures every step for memory nobody uses
        if self.stack.config.rollout.enable_sleep and self.context.device != "cpu" and self.actor is not None:
            self.rollout.sleep()
            self._sleeping = True
        return out

    def _resync_new_engine(self, engine: Any) -> None:
        """A replacement rollout engine (:class:`EngineSupervisor`) gets the actor's current weights, verified."""
        self.rollout, self._sleeping, self._base_sent = engine, False, False
        self._weight_version -= 1  # the same policy version again, in the new engine
        self.sync_weights()

    def sync_weights(self) -> float:
        """Load the actor's current weights into the rollout engine; returns seconds."""
        if self.rollout is None or self.actor is None:  # split pools: the weights travel by the extension's transfer
            return 0.0
        start = time.perf_counter()
        if self._sleeping:
            self.rollout.wake_up()
            self._sleeping = False
        self._weight_version += 1
        name = self.stack.config.rollout.name
        if self._feature_sync is not None:  # e.g. LoRA through the engine's LoRA API (rl-lora)
            self._feature_sync(self.rollout, self.actor, base=not self._base_sent, engine_name=name, version=self._weight_version)
            self._base_sent = True
            return time.perf_counter() - start
        weights = self.actor.named_weights()
        if self._convert is not None:
            weights = self._convert(weights, self.stack.config)
        load_verified(self.rollout, weights, self.actor.sample_weights if self._convert is None else None, engine_name=self.stack.config.rollout.name, version=self._weight_version)
        return time.perf_counter() - start

    # ------------------------------------------------------------------- roles
    def compute_log_prob(self, batch: Batch, temperature: float, with_entropy: bool) -> dict[str, torch.Tensor]:
        return self.actor.compute_log_prob(batch, temperature=temperature, with_entropy=with_entropy)

    def compute_ref_log_prob(self, batch: Batch, temperature: float) -> torch.Tensor:
        if self.ref_from_actor:
            return self.actor.compute_log_prob(batch, temperature=temperature, reference=True)["log_probs"]
        return self.ref.compute_log_prob(batch, temperature=temperature)["log_probs"]

    def compute_values(self, batch: Batch) -> torch.Tensor:
        return self.critic.compute_values(batch)

    def score_with_model(self, requests: list, rounds: int | None = None) -> list:
        """The reward model's outcomes for this worker's share of the step's requests (texts, not token ids)."""
        return self.reward_model.score(requests, rounds)

    def update_actor(self, batch: Batch, on_policy: bool = False, keep_log_probs: bool = False) -> dict[str, Any]:
        """``on_policy``: the loop skipped the old log-prob pass (one mini-batch, one epoch; ratio 1);
        ``keep_log_probs``: the update's own log-probs come back as ``actor/log_probs`` (+ ``actor/log_probs_computed``)."""
        with self._phase_peak() as peak:
            out = engine_metrics_prefix("actor", self.actor.update(batch, on_policy=on_policy, keep_log_probs=keep_log_probs))
        if peak:
            out["perf/update_actor_max_memory_allocated_gb"], out["perf/update_actor_device_peak_gb"] = peak
        return out

    @contextlib.contextmanager
    def _phase_peak(self):
        """On CUDA: the block's peak allocated memory and its device-level peak (GiB, appended to the yielded list); the
        step's peak for :meth:`peak_memory_gb` kept.

        The device-level peak (:func:`device_phase_peak`) differs from the allocated one while a colocated engine
        sleeps through cuMem (vLLM's sleep mode): its tensors stay allocated in torch's books, unmapped from the device."""
        got: list[float] = []
        if not self.context.device.startswith("cuda"):
            yield got
            return
        self._step_peak = max(self._step_peak, torch.cuda.max_memory_allocated())
        torch.cuda.reset_peak_memory_stats()
        free, total = torch.cuda.mem_get_info()
        reserved = torch.cuda.memory_reserved()
        try:
            yield got
        finally:
            phase = torch.cuda.max_memory_allocated()
            self._step_peak = max(self._step_peak, phase)
            got += [phase / 2**30, device_phase_peak(total - free, reserved, torch.cuda.max_memory_reserved()) / 2**30]

    def update_critic(self, batch: Batch) -> dict[str, float]:
        return engine_metrics_prefix("critic", self.critic.update(batch))

    def peak_memory_gb(self) -> float | None:
        """Peak accelerator memory since the last call (None on CPU); resets the peak."""
        if not self.context.device.startswith("cuda"):
            return None
        peak = max(self._step_peak, torch.cuda.max_memory_allocated()) / 2**30
        self._step_peak = 0.0
        torch.cuda.reset_peak_memory_stats()
        return peak

    def set_total_steps(self, total: int) -> None:
        for engine in self._train_engines():
            engine.set_total_steps(total)

    def profile_step(self, step: int | None) -> None:
        """profiler.*: record this step's calls of the chosen roles (None: stop recording)."""
        if self.profiler is not None:
            self.profiler.set_step(step)

    # ------------------------------------------------------------- persistence
    def save_checkpoint(self, path: str) -> None:
        for name, engine in self._named_trainables():
            engine.save_checkpoint(f"{path}/{name}")

    def load_checkpoint(self, path: str, contents: list[str] | None = None, step: int = 0) -> None:
        for name, engine in self._named_trainables():
            engine.load_checkpoint(f"{path}/{name}", contents, step)

    def save_hf(self, path: str) -> None:
        if self.actor is not None:
            self.actor.save_hf(path)

    def shutdown(self) -> None:
        """Close the rollout pool's extension and every engine; one that raises does not keep the others running."""
        closers = [self.extension.close] if hasattr(self.extension, "close") else []
        for engine in [*self._train_engines(), self.rollout, self.reward_model]:
            closer = getattr(engine, "shutdown", None) if engine is not None else None
            if closer is not None:
                closers.append(closer)
        first: BaseException | None = None
        for closer in closers:
            try:
                closer()
            except BaseException as exc:  # noqa: BLE001 - re-raised below, after the rest are closed
                first = first or exc
        if first is not None:
            raise first

    # ---------------------------------------------------------------- helpers
    def _train_engines(self) -> list[Any]:
        return [e for e in (self.actor, self.ref, self.critic) if e is not None]

    def _named_trainables(self) -> list[tuple[str, Any]]:
        return [(n, e) for n, e in (("actor", self.actor), ("critic", self.critic)) if e is not None]


def device_phase_peak(used_at_start: int, reserved_at_start: int, max_reserved: int) -> int:
    """Bytes in use on the device at a phase's peak: what was in use at its start plus what torch's caching allocator
    reserved beyond its start during the phase (new segments; blocks served from its cache were already counted)."""
    return used_at_start + max(0, max_reserved - reserved_at_start)
