"""The hybrid worker: one process's actor, reference, critic and rollout engines.

Colocated, as in verl's hybrid engine: each worker holds the train backend's
roles and a rollout engine, and weight sync is an in-memory copy from the
actor to the rollout engine of the same process. A critic or reference model
given devices of its own (``critic.n_gpus_per_node``, ``ref.n_gpus_per_node``)
lives in workers that hold only that role (:func:`worker_roles`,
:mod:`rl_core.placement.pools`). The placement layer
(:mod:`rl_core.placement`) creates one worker per rank and calls its methods (the
:class:`~rl_core.placement.contract.WorkerMethod` table lists them);
nothing here knows whether it runs in-process, in a spawned process or in a
Ray actor.
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
from rl_core.util.profiling import StepProfiler
from rl_core.train_engine.engine import build_role_engine
from rl_core.async_rl.transfer import TransferGroup
from rl_core.async_rl.transfer import receive_weights
from rl_core.async_rl.transfer import send_weights
from rl_core.placement.rendezvous import Rendezvous
from rl_core.rewards.model_role import RewardModelRole
from rl_core.rollout.supervisor import EngineSupervisor
from rl_core.weight_sync_check import load_adapter_verified, load_verified
from rl_core.rollout.exact import apply_determinism


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
        section = getattr(config, role)
        if section.enable and section.n_gpus_per_node is None:
            roles.append(role)
    return tuple(roles)


class HybridWorker:
    def __init__(self, stack, context: WorkerContext, roles: tuple[str, ...] | None = None) -> None:
        self.stack = stack
        context = attrs.evolve(context, features=getattr(stack, "features", {}))  # the Plan's features (FeatureCard), for the engines
        self.context = context
        config = stack.config
        self.roles = worker_roles(config, rollout=getattr(stack, "needs_rollout", True)) if roles is None else tuple(roles)
        apply_determinism(config)  # trainer.deterministic (rl_core.rollout.exact): before this process's first CUDA op
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
        if "reward_model" in self.roles:  # a learned reward model / judge (rl_core.rewards.model_role)

            self.reward_model = RewardModelRole(stack, context, colocated="actor" in self.roles)
        self._convert = stack.converter.load() if stack.converter is not None else None
        self._sleeping = False
        self._step_peak = 0.0  # CUDA: the step's peak allocated bytes before the last phase reset (_phase_peak)
        self._weight_version = -1  # the policy version the rollout engine holds (syncs so far - 1)
        self._transfer = None  # the train -> rollout broadcast group of split pools (rl_core.async_rl.transfer)
        self._rendezvous = None  # its rendezvous while the group forms (train rank 0)
        self._lora_sync = lora_sync_mode(config, self.rollout) if self.actor is not None else None
        self._base_sent = False
        self.profiler = StepProfiler.for_worker(config, context.rank, context.device)  # profiler.* (rl_core.util.profiling)
        if self.rollout is not None and self.actor is not None:  # start from the actor's exact weights (random-init models, dtype casts, ...)
            self.sync_weights()

    # ----------------------------------------------------------------- rollout
    def generate(self, batch: Batch, params: SamplingParams, receive_version: int | None = None) -> Batch:
        """``receive_version``: a rollout pool of its own first receives that policy version (the train pool sends
        it in the background: rl_core.async_rl); the receipt rides back in ``meta["weight_receipt"]``."""
        receipt = None if receive_version is None else self.receive_weights(receive_version)
        if self._sleeping:
            self.rollout.wake_up()
            self._sleeping = False
        if params.seed is not None:
            # one stream per rollout replica: the ranks of a TP group must sample alike
            replica = self.context.rank // self.stack.sizes.rollout_tp
            params = _with_seed(params, params.seed + 7919 * replica)
        start = time.perf_counter()
        out = self._engines.generate(batch, params)
        self.rollout = self._engines.engine  # a replacement, after a recovery
        out.meta["policy_version"] = self._weight_version  # the weights that sampled it (rl_core.async_rl)
        if self.actor is None:  # a rollout pool of its own: every sample carries its version, and the time it took
            out["policy_version"] = torch.full((len(out),), self._weight_version, dtype=torch.long)
            out.meta["rollout_seconds"] = time.perf_counter() - start
            if receipt is not None:
                out.meta["weight_receipt"] = receipt
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
        if self.rollout is None or self.actor is None:  # split pools: the weights travel by send / receive_weights
            return 0.0
        start = time.perf_counter()
        if self._sleeping:
            self.rollout.wake_up()
            self._sleeping = False

        self._weight_version += 1
        name = self.stack.config.rollout.name
        if self._lora_sync == "adapter":  # LoRA through the engine's LoRA API: the frozen base once, then the adapters
            if not self._base_sent:
                load_verified(self.rollout, self.actor.named_base_weights(), None, engine_name=name, version=self._weight_version,
                              load=getattr(self.rollout, "load_base_weights", None))  # an engine may keep the frozen base (hf)
                self._base_sent = True
            # in the dtype the engine holds adapters in (e.g. vLLM's bf16 LoRA slots): half the bytes, the same values
            tensors, peft_config = self.actor.lora_adapter(getattr(self.rollout, "adapter_dtype", None))
            load_adapter_verified(self.rollout, tensors, peft_config, self.actor.sample_weights, engine_name=name, version=self._weight_version)
            return time.perf_counter() - start
        weights = self.actor.named_weights()
        if self._convert is not None:
            weights = self._convert(weights, self.stack.config)
        load_verified(self.rollout, weights, self.actor.sample_weights if self._convert is None else None, engine_name=self.stack.config.rollout.name, version=self._weight_version)
        return time.perf_counter() - start

    # ------------------------------------------------- split pools (rl_core.async_rl)
    def open_weight_rendezvous(self, host: str | None, opens: bool) -> str | None:
        """Train pool (``opens`` on its rank 0): open the transfer group's rendezvous; its address for the others.
        ``host``: this node's address when the group spans nodes (a TCP store there), None: a FileStore here."""

        if not opens:
            return None
        self._rendezvous = Rendezvous(host)
        return self._rendezvous.address

    def join_weight_group(self, address: str, rank: int | None, size: int, timeout_s: float, bind: str | None = None) -> None:
        """Join the train -> rollout broadcast group (train rank 0 and every rollout worker; ``rank`` None: not a
        member); ``bind``: this worker's node address when the group spans nodes (None: loopback)."""

        if rank is None:
            self._transfer = None
            return
        opened, self._rendezvous = self._rendezvous, None
        self._transfer = TransferGroup(address, rank, size, timeout_s=timeout_s, device=self.context.device, bind=bind, opened=opened)

    def send_weights(self, version: int, bucket_bytes: int, background: bool = False) -> dict[str, Any]:
        """Train pool: send the actor's weights as policy ``version`` (a report for the controller's check);
        ``background``: copied now, broadcast from a thread while the next step runs (rl_core.async_rl)."""

        weights = self.actor.named_weights()
        if self._convert is not None:
            weights = self._convert(weights, self.stack.config)
        # the trainer's own view is in its names: checked against what was sent only without a converter (as sync_weights)
        return send_weights(self._transfer, weights, version=version, bucket_bytes=bucket_bytes, background=background,
                            trainer_sample=self.actor.sample_weights if self._convert is None else None, engine_name=self.stack.config.rollout.name)

    def receive_weights(self, version: int) -> dict[str, Any]:
        """Rollout pool: receive policy ``version`` into the engine; what the engine holds comes back to be checked."""

        if self._sleeping:
            self.rollout.wake_up()
            self._sleeping = False
        report = receive_weights(self._transfer, self.rollout, version=version, engine_name=self.stack.config.rollout.name)
        self._weight_version = version
        return report

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
        """On CUDA: the block's peak allocated memory and its device-level peak (GiB, both appended to the yielded
        list); the step's peak for :meth:`peak_memory_gb` kept (what came before is remembered, then reset).

        The device-level peak is the device memory in use when the block starts (``cudaMemGetInfo``: every
        allocator, every process) plus what torch's caching allocator reserved beyond its start during the block.
        It differs from the allocated peak while a colocated engine sleeps through cuMem (vLLM's sleep mode): the
        engine's weights and KV cache are unmapped from the device but their tensors stay allocated in torch's
        books, so ``max_memory_allocated`` still counts them (the 7B anchor: 36.3 GiB) though the device does not."""
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
        """Close the transfer group, its rendezvous and every engine; one that raises does not keep the others running."""
        closers = [self._transfer.close] if self._transfer is not None else []
        if self._rendezvous is not None:
            closers.append(self._rendezvous.close)
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


def lora_sync_mode(config, rollout) -> str | None:
    """How LoRA weights reach ``rollout`` (rollout.lora_sync): ``adapter`` (the engine's LoRA API), ``merged``, or None
    (no LoRA, or no colocated engine). ``auto`` is ``adapter`` where the engine has ``load_adapter``."""
    if config.model.lora_rank == 0 or rollout is None:
        return None
    mode, able = config.rollout.lora_sync, hasattr(rollout, "load_adapter")
    if mode == "adapter" and not able:
        raise RuntimeError(f"rollout.lora_sync=adapter, but the {config.rollout.name} rollout engine has no LoRA adapter API "
                           "(load_adapter): set rollout.lora_sync=merged or auto")
    return "adapter" if mode == "adapter" or (mode == "auto" and able) else "merged"


def _with_seed(params: SamplingParams, seed: int) -> SamplingParams:
    import attrs

    return attrs.evolve(params, seed=seed)


def device_phase_peak(used_at_start: int, reserved_at_start: int, max_reserved: int) -> int:
    """Bytes in use on the device at a phase's peak: what was in use at its start plus what torch's caching allocator
    reserved beyond its start during the phase (new segments; blocks served from its cache were already counted)."""
    return used_at_start + max(0, max_reserved - reserved_at_start)
