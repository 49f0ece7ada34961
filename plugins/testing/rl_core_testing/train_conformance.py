"""Conformance tests every train backend runs (langchain standard-tests style).

A backend's test module subclasses :class:`TrainConformance` and names its
factory (the same dotted path as its :class:`~rl_core.cards.TrainCard`, returning
a :class:`~rl_core.train_engine.backend.TrainBackend`; spawned ranks import it by
name). Core's :class:`~rl_core.train_engine.engine.RoleEngine` drives it::

    from rl_core_testing.train_conformance import TrainConformance

    class TestMyTrainer(TrainConformance):
        factory = "my_pkg.engine:MyBackend"

What runs, on the same inputs for every backend (a tiny random Qwen2-shaped
model with tied embeddings, one synthetic PPO step of 4 prompts x 2 samples):

- log-probs / entropy of the actor and ref, and critic values, against a
  plain ``transformers`` forward pass (``logprob_atol``), on 1 process and
  on ``dist_world_size`` processes (``@pytest.mark.dist``);
- one actor update (2 epochs x 2 mini-batches, micro-batches, KL loss and
  entropy bonus on) and one critic update: the loss and grad norm on 1
  process equal those on 2 processes on the same global batch, and the
  1-process update equals a hand-written PyTorch reference that computes
  each whole mini-batch at once (so gradient accumulation and loss
  weighting are checked independently of the backend);
- weight sync: after ``rollout.load_weights(actor.named_weights())`` the
  rollout's log-probs of its sampled tokens equal the actor's (``sync_atol``);
- checkpoints: save on N processes, let them exit, load in fresh ones:
  weights bit-identical, and the next update gives bit-identical metrics
  and weights (optimizer and scheduler restored). Engines with a
  ``local_state_dict()`` method also get their model / optimizer /
  scheduler state compared tensor by tensor;
- ``save_hf`` writes a folder ``transformers`` loads to the same weights;
- the LR schedule (warmup + cosine) against hand-computed values;
- the shared update loop on this backend: ``actor.use_dynamic_bsz`` (micro-batches
  by a token budget) gives the same update as fixed micro-batches, and
  zero-advantage rows are left out of the forwards with the same update;
- clear errors: missing model path, micro-batch not dividing, unknown role.

How the step is split over ranks (as the controller does): rank ``r`` gets
the ``r``-th contiguous chunk of the step and cuts it into consecutive
mini-batches; the 1-process run gets the same global mini-batches
(:func:`single_rank_order`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import attrs
import pytest
import torch
from rl_core.backends import SamplingParams, TrainEngine, WorkerContext
from rl_core.batch import Batch
from rl_core.cards import load_object
from rl_core.config.schema import (
    ActorConfig,
    CriticConfig,
    DataConfig,
    ModelConfig,
    OptimConfig,
    RolloutConfig,
    RunConfig,
    TrainerConfig,
)
from rl_core.train_engine.backend import TrainBackend
from rl_core.train_engine.engine import RoleEngine, build_role_engine

from rl_core_testing.adam_weights import assert_adam_weights_close, zero_grad_in_exact_arithmetic
from rl_core_testing.distributed import run_distributed
from rl_core_testing.distributed import torch_threads as _threads
from rl_core_testing.rollout_conformance import prompt_batch, reference_model
from rl_core_testing.tiny_model import PAD_ID, make_tiny_model_dir

PROMPTS_PER_STEP = 4
N_SAMPLES = 2
MINI_PROMPTS = 2
PROMPT_LEN = 8
RESPONSE_LEN = 6


# ----------------------------------------------------------------- inputs
def default_config(model_dir: str | Path, **overrides: Any) -> RunConfig:
    """The suite's run config: 4 prompts x 2 samples, 2 mini-batches, micro-batches of 1, 2 epochs."""
    cfg = RunConfig(
        model=ModelConfig(path=str(model_dir)),
        data=DataConfig(train_batch_size=PROMPTS_PER_STEP, max_prompt_length=32, max_response_length=RESPONSE_LEN),
        rollout=RolloutConfig(n=N_SAMPLES, temperature=1.0),
        actor=ActorConfig(
            ppo_mini_batch_size=MINI_PROMPTS,
            ppo_micro_batch_size_per_gpu=1,
            log_prob_micro_batch_size_per_gpu=3,
            ppo_epochs=2,
            clip_ratio_low=0.2,
            clip_ratio_high=0.2,
            entropy_coeff=0.01,
            use_kl_loss=True,
            kl_loss_coef=0.1,
            optim=OptimConfig(lr=1e-3, lr_warmup_steps=1, lr_scheduler="cosine", min_lr_ratio=0.1, grad_clip=1.0, weight_decay=0.01),
        ),
        critic=CriticConfig(
            enable=True, ppo_mini_batch_size=MINI_PROMPTS, ppo_micro_batch_size_per_gpu=1, ppo_epochs=1, optim=OptimConfig(lr=1e-3)
        ),
        trainer=TrainerConfig(total_training_steps=4, seed=0),
    )
    return attrs.evolve(cfg, **overrides) if overrides else cfg


def _positions(attention_mask: torch.Tensor, R: int) -> torch.Tensor:
    P = attention_mask.shape[1] - R
    prompt_pos = (attention_mask[:, :P].long().cumsum(-1) - 1).clamp(min=0)
    return torch.cat([prompt_pos, prompt_pos[:, -1:] + torch.arange(1, R + 1)], dim=1)


def make_step_batch(model_dir: str | Path, *, rows: int = PROMPTS_PER_STEP * N_SAMPLES, seed: int = 0) -> Batch:
    """A synthetic PPO step: left-padded prompts, responses of different lengths, and the update fields.

    ``old_log_probs`` are the model's own log-probs plus a little noise (so
    PPO ratios sit near 1 and some clip); ``ref_log_prob`` likewise.
    """
    g = torch.Generator().manual_seed(seed)
    P, R = PROMPT_LEN, RESPONSE_LEN
    prompts = torch.randint(3, 259, (rows, P), generator=g)
    prompt_mask = torch.ones(rows, P, dtype=torch.long)
    for i in range(rows):
        prompts[i, : i % 4] = PAD_ID
        prompt_mask[i, : i % 4] = 0
    responses = torch.randint(3, 259, (rows, R), generator=g)
    response_mask = torch.zeros(rows, R, dtype=torch.long)
    for i in range(rows):
        length = R if i % 3 == 0 else 1 + (i * 5) % R
        response_mask[i, :length] = 1
        responses[i, length:] = PAD_ID
    attention_mask = torch.cat([prompt_mask, response_mask], 1)
    input_ids = torch.cat([prompts, responses], 1)
    batch = Batch(
        {
            "prompts": prompts,
            "responses": responses,
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": _positions(attention_mask, R),
            "response_mask": response_mask,
        },
        {"uid": [f"u{i // N_SAMPLES}" for i in range(rows)]},
        {"temperature": 1.0},
    )
    ref = reference_model(model_dir)
    lp = _ref_log_probs(ref, batch)
    batch["old_log_probs"] = (lp + 0.05 * torch.randn(rows, R, generator=g)) * response_mask
    batch["ref_log_prob"] = (lp + 0.1 * torch.randn(rows, R, generator=g)) * response_mask
    batch["advantages"] = torch.randn(rows, R, generator=g) * response_mask
    batch["values"] = 0.1 * torch.randn(rows, R, generator=g) * response_mask
    batch["returns"] = torch.randn(rows, R, generator=g) * response_mask
    return batch


@torch.no_grad()
def _ref_log_probs(model, batch: Batch, temperature: float = 1.0, with_entropy: bool = False):
    t = batch.tensors
    R = t["responses"].shape[1]
    logits = model(input_ids=t["input_ids"], attention_mask=t["attention_mask"], position_ids=t["position_ids"]).logits
    logits = logits[:, -R - 1 : -1].float() / temperature
    lp = torch.log_softmax(logits, -1).gather(-1, t["responses"].unsqueeze(-1)).squeeze(-1)
    if not with_entropy:
        return lp
    p = torch.softmax(logits, -1)
    return lp, -(p * torch.log_softmax(logits, -1)).sum(-1)


def rank_shard(batch: Batch, rank: int, world: int) -> Batch:
    """Rank ``rank``'s contiguous chunk of the step (what the controller sends it)."""
    return batch.chunk(world)[rank]


def single_rank_order(batch: Batch, world: int, n_mini: int) -> Batch:
    """The step reordered so one rank's consecutive mini-batches equal the global mini-batches of ``world`` ranks."""
    per_rank = len(batch) // world
    mini = per_rank // n_mini
    idx = [r * per_rank + k * mini + j for k in range(n_mini) for r in range(world) for j in range(mini)]
    return batch.index(idx)


# ------------------------------------------------------ what each rank runs
def _weights(engine) -> dict[str, torch.Tensor]:
    return {name: t.detach().clone().cpu() for name, t in engine.named_weights()}


def _local_state(engine) -> Any:
    fn = getattr(engine, "local_state_dict", None)
    return fn() if fn is not None else None


def _shard(step: Batch, config: RunConfig, rank: int, world: int, mimic_world: int) -> Batch:
    n_mini = config.data.train_batch_size // config.actor.ppo_mini_batch_size
    return rank_shard(step, rank, world) if world > 1 else single_rank_order(step, mimic_world, n_mini)


def run_step(
    rank: int,
    world: int,
    factory: str,
    rollout_factory: str | None,
    config: RunConfig,
    step: Batch,
    prompts: Batch,
    workdir: str,
    mimic_world: int = 2,
    device: str = "cpu",
) -> dict[str, Any]:
    """Everything the suite checks on one rank; runs in-process (world 1, no process group) or spawned.

    With ``world == 1`` the step is reordered to the global mini-batches of
    ``mimic_world`` ranks (:func:`single_rank_order`).
    """
    make = load_object(factory)
    ctx = WorkerContext(rank=rank, world_size=world, device=device, seed=config.trainer.seed)
    shard = _shard(step, config, rank, world, mimic_world)
    out: dict[str, Any] = {}

    actor = build_role_engine(make, "actor", config, ctx)
    out["is_train_engine"] = isinstance(actor, TrainEngine) and isinstance(actor.backend, TrainBackend)
    out["actor_log_probs"] = actor.compute_log_prob(shard, temperature=1.0, with_entropy=True)
    out["actor_log_probs_t07"] = actor.compute_log_prob(shard, temperature=0.7)["log_probs"]
    out["actor_metrics"] = actor.update(shard)
    out["actor_weights_1"] = _weights(actor)
    # checkpoint, then carry on as if nothing happened
    actor.save_checkpoint(str(Path(workdir) / "ckpt" / "actor"))
    out["actor_state_1"] = _local_state(actor)
    out["actor_metrics_2"] = actor.update(shard)
    out["actor_weights_2"] = _weights(actor)
    actor.save_hf(str(Path(workdir) / "hf"))

    # weight sync into the rollout engine of this process
    if rollout_factory is not None:
        rollout = load_object(rollout_factory)(config, ctx)
        rollout.load_weights(actor.named_weights())
        mine = rank_shard(prompts, rank, world) if world > 1 else prompts
        gen = rollout.generate(mine, SamplingParams(n=2, max_new_tokens=8, temperature=1.0, logprobs=True, seed=100 + rank))
        out["sync"] = {
            "rollout": gen.tensors["rollout_log_probs"],
            "actor": actor.compute_log_prob(gen, temperature=1.0)["log_probs"],
            "mask": gen.tensors["response_mask"],
        }
        rollout.shutdown()
    actor.shutdown()

    ref = build_role_engine(make, "ref", config, ctx)
    out["ref_log_probs"] = ref.compute_log_prob(shard, temperature=1.0)["log_probs"]
    ref.shutdown()

    critic = build_role_engine(make, "critic", config, ctx)
    out["critic_weights_0"] = _weights(critic)
    out["values"] = critic.compute_values(shard)
    out["critic_metrics"] = critic.update(shard)
    critic.shutdown()
    return out


def run_resume(
    rank: int, world: int, factory: str, config: RunConfig, step: Batch, workdir: str, mimic_world: int = 2, device: str = "cpu"
) -> dict[str, Any]:
    """Fresh processes: load the checkpoint :func:`run_step` saved and take the next update."""
    make = load_object(factory)
    ctx = WorkerContext(rank=rank, world_size=world, device=device, seed=config.trainer.seed)
    shard = _shard(step, config, rank, world, mimic_world)
    actor = build_role_engine(make, "actor", config, ctx)
    actor.load_checkpoint(str(Path(workdir) / "ckpt" / "actor"))
    out = {"weights_loaded": _weights(actor), "state_loaded": _local_state(actor)}
    out["metrics_2"] = actor.update(shard)
    out["weights_2"] = _weights(actor)
    actor.shutdown()
    return out


# ------------------------------------------------------------------ suite
class TrainConformance:
    """Base class: subclass it in a ``Test*`` class and set :attr:`factory`."""

    factory: str = ""  # "package.module:MyBackend": a TrainBackend factory, called as factory(role, config, context)
    rollout_factory: str | None = "rl_core.rollout.hf:factory"
    arch: str = "qwen2"
    logprob_atol: float = 1e-5
    torch_threads: int | None = 1
    sync_atol: float = 1e-4
    update_rtol: float = 1e-5
    dist_world_size: int = 2
    dist_timeout: float = 300.0
    multi_process: bool = True  # False: a one-process backend; the @pytest.mark.dist tests skip

    def make_config(self, model_dir: Path, **overrides: Any) -> RunConfig:
        return default_config(model_dir, **overrides)

    def engine(self, role: str, config: RunConfig, context: WorkerContext | None = None) -> RoleEngine:
        """Core's engine over this backend's factory, as the worker builds it."""
        return build_role_engine(load_object(self.factory), role, config, context or WorkerContext())

    # --------------------------------------------------------------- fixtures
    @pytest.fixture(scope="class", autouse=True)
    def _torch_threads(self):
        """``torch_threads`` intra-op threads in this process while the class runs (None: leave as is)."""
        with _threads(self.torch_threads):
            yield

    @pytest.fixture(scope="class")
    def model_dir(self, tmp_path_factory) -> Path:
        return make_tiny_model_dir(tmp_path_factory.mktemp("train_model"), self.arch, seed=0)

    @pytest.fixture(scope="class")
    def config(self, model_dir) -> RunConfig:
        return self.make_config(model_dir)

    @pytest.fixture(scope="class")
    def step(self, model_dir) -> Batch:
        return make_step_batch(model_dir)

    @pytest.fixture(scope="class")
    def prompts(self, model_dir) -> Batch:
        return prompt_batch(model_dir)

    @pytest.fixture(scope="class")
    def reference(self, model_dir):
        return reference_model(model_dir)

    @pytest.fixture(scope="class")
    def single(self, config, step, prompts, tmp_path_factory) -> dict[str, Any]:
        """:func:`run_step` in this process, without a process group."""
        work = tmp_path_factory.mktemp("single")
        out = run_step(0, 1, self.factory, self.rollout_factory, config, step, prompts, str(work), self.dist_world_size)
        out["workdir"] = work
        return out

    @pytest.fixture(scope="class")
    def dist(self, config, step, prompts, tmp_path_factory) -> list[dict[str, Any]]:
        """:func:`run_step` on ``dist_world_size`` spawned processes (gloo)."""
        if not self.multi_process:
            pytest.skip(f"{self.factory} runs in one process (multi_process = False)")
        work = tmp_path_factory.mktemp("dist")
        outs = run_distributed(
            run_step, self.dist_world_size, self.factory, self.rollout_factory, config, step, prompts, str(work), timeout=self.dist_timeout
        )
        for o in outs:
            o["workdir"] = work
        return outs

    @pytest.fixture(scope="class")
    def resumed(self, dist, config, step) -> list[dict[str, Any]]:
        """:func:`run_resume` on fresh processes, after the :func:`run_step` processes exited."""
        return run_distributed(run_resume, self.dist_world_size, self.factory, config, step, str(dist[0]["workdir"]), timeout=self.dist_timeout)

    # ------------------------------------------------------------- helpers
    def _n_mini(self, config) -> int:
        return config.data.train_batch_size // config.actor.ppo_mini_batch_size

    def _single_order(self, config, step) -> Batch:
        return single_rank_order(step, self.dist_world_size, self._n_mini(config))

    @staticmethod
    def _cat(dist, key, sub=None) -> torch.Tensor:
        parts = [d[key] if sub is None else d[key][sub] for d in dist]
        return torch.cat(parts)

    def _close(self, a: float, b: float, what: str) -> None:
        assert math.isfinite(a) and math.isfinite(b), f"{what}: {a} vs {b}"
        assert abs(a - b) <= self.update_rtol * max(1.0, abs(b)), f"{what}: {a} vs {b}"

    # -------------------------------------------------------- 1 process
    def test_engine_follows_the_protocol(self, single):
        assert single["is_train_engine"]

    def test_log_probs_match_transformers(self, single, config, step, reference):
        batch = self._single_order(config, step)
        mask = batch.tensors["response_mask"].bool()
        lp, ent = _ref_log_probs(reference, batch, with_entropy=True)
        got = single["actor_log_probs"]
        assert got["log_probs"].shape == mask.shape and got["entropy"].shape == mask.shape
        torch.testing.assert_close(got["log_probs"][mask], lp[mask], atol=self.logprob_atol, rtol=0)
        torch.testing.assert_close(got["entropy"][mask], ent[mask], atol=self.logprob_atol, rtol=0)
        lp07 = _ref_log_probs(reference, batch, temperature=0.7)
        torch.testing.assert_close(single["actor_log_probs_t07"][mask], lp07[mask], atol=self.logprob_atol, rtol=0)
        torch.testing.assert_close(single["ref_log_probs"][mask], lp[mask], atol=self.logprob_atol, rtol=0)

    def test_critic_values_match_transformers(self, single, config, step, model_dir):
        from transformers import AutoConfig, AutoModelForTokenClassification

        batch = self._single_order(config, step)
        hf_cfg = AutoConfig.from_pretrained(str(model_dir), num_labels=1, classifier_dropout=0.0)
        model = AutoModelForTokenClassification.from_config(hf_cfg)
        missing, unexpected = model.load_state_dict(single["critic_weights_0"], strict=False)
        assert not unexpected and all("lm_head" in m for m in missing), (missing, unexpected)
        model.eval()
        t = batch.tensors
        with torch.no_grad():
            out = model(input_ids=t["input_ids"], attention_mask=t["attention_mask"], position_ids=t["position_ids"]).logits
        ref = out[:, -RESPONSE_LEN - 1 : -1, 0]
        mask = t["response_mask"].bool()
        assert single["values"].shape == mask.shape
        torch.testing.assert_close(single["values"][mask], ref[mask], atol=self.logprob_atol, rtol=0)

    def test_update_matches_a_plain_pytorch_reference(self, single, config, step, model_dir, reference):
        """Whole mini-batches at once, no sharding, no micro-batches: same loss, grad norm and weights."""
        from rl_core.algorithms.actor_loss import compute_actor_loss
        from rl_core.algorithms.entropy import entropy_from_logits

        batch = self._single_order(config, step)
        a = config.actor
        model = reference_model(model_dir)
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=a.optim.lr, betas=tuple(a.optim.betas), eps=a.optim.eps, weight_decay=a.optim.weight_decay)
        n_mini = self._n_mini(config)
        losses, norms = [], []
        for _ in range(a.ppo_epochs):
            for mini in batch.chunk(n_mini):
                t = mini.tensors
                R = t["responses"].shape[1]
                logits = model(input_ids=t["input_ids"], attention_mask=t["attention_mask"], position_ids=t["position_ids"]).logits
                logits = logits[:, -R - 1 : -1].float()
                log_prob = torch.log_softmax(logits, -1).gather(-1, t["responses"].unsqueeze(-1)).squeeze(-1)
                loss, _ = compute_actor_loss(
                    log_prob=log_prob,
                    old_log_prob=t["old_log_probs"],
                    advantages=t["advantages"],
                    response_mask=t["response_mask"],
                    entropy=entropy_from_logits(logits),
                    ref_log_prob=t["ref_log_prob"],
                    cfg=a,
                )
                opt.zero_grad()
                loss.backward()
                norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), a.optim.grad_clip)))
                opt.step()
                losses.append(float(loss.detach()))
        m = single["actor_metrics"]
        self._close(m["loss"], sum(losses) / len(losses), "loss")
        self._close(m["grad_norm"], sum(norms) / len(norms), "grad_norm")
        assert m["lr"] == pytest.approx(a.optim.lr)  # warmup of 1 step: the first update runs at the full lr
        ref_weights = dict(model.state_dict())
        initial = dict(reference.state_dict())  # the class's untrained reference model: the weights both updates start from
        for name, w in single["actor_weights_1"].items():
            if zero_grad_in_exact_arithmetic(name):
                continue
            assert_adam_weights_close(w, ref_weights[name], initial[name], name=name, atol=1e-5, rtol=1e-4)

    def test_update_changes_the_weights(self, single, model_dir):
        ref = dict(reference_model(model_dir).state_dict())
        changed = [n for n, w in single["actor_weights_1"].items() if not torch.equal(w, ref[n])]
        assert len(changed) == len(single["actor_weights_1"])

    def test_weight_sync_rollout_matches_actor(self, single):
        if self.rollout_factory is None:
            pytest.skip("no rollout_factory")
        s = single["sync"]
        mask = s["mask"].bool()
        torch.testing.assert_close(s["rollout"][mask], s["actor"][mask], atol=self.sync_atol, rtol=0)

    def test_save_hf_loads_in_transformers(self, single):
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(str(single["workdir"] / "hf"), dtype=torch.float32)
        sd = model.state_dict()
        for name, w in single["actor_weights_2"].items():
            assert torch.equal(sd[name], w), name
        assert (single["workdir"] / "hf" / "tokenizer_config.json").is_file()

    def test_checkpoint_resume_is_bit_identical(self, single, config, step):
        """In this process: load the checkpoint the single run saved after its first update; the next update and
        weights equal the single run's second ones (optimizer, scheduler and RNG restored)."""
        after = run_resume(0, 1, self.factory, config, step, str(single["workdir"]), self.dist_world_size)
        for name, w in single["actor_weights_1"].items():
            assert torch.equal(after["weights_loaded"][name], w), f"{name} differs after load"
        assert after["metrics_2"] == single["actor_metrics_2"], "the update after resume differs"
        for name, w in single["actor_weights_2"].items():
            assert torch.equal(after["weights_2"][name], w), f"{name} differs after the resumed update"
        if single["actor_state_1"] is not None:
            _assert_equal_state(single["actor_state_1"], after["state_loaded"], "one process")

    # ----------------------------------------------------- N processes
    @pytest.mark.dist
    def test_dist_log_probs_match_transformers(self, dist, step, reference):
        mask = step.tensors["response_mask"].bool()
        lp, ent = _ref_log_probs(reference, step, with_entropy=True)
        got = self._cat(dist, "actor_log_probs", "log_probs")
        torch.testing.assert_close(got[mask], lp[mask], atol=self.logprob_atol, rtol=0)
        torch.testing.assert_close(self._cat(dist, "actor_log_probs", "entropy")[mask], ent[mask], atol=self.logprob_atol, rtol=0)
        torch.testing.assert_close(self._cat(dist, "ref_log_probs")[mask], lp[mask], atol=self.logprob_atol, rtol=0)

    @pytest.mark.dist
    def test_dist_update_equals_single_process(self, dist, single, reference):
        for d in dist:
            for key in ("loss", "grad_norm", "lr"):
                self._close(d["actor_metrics"][key], single["actor_metrics"][key], f"actor {key}")
                self._close(d["actor_metrics_2"][key], single["actor_metrics_2"][key], f"actor {key} (2nd update)")
            for key in ("loss", "grad_norm"):
                self._close(d["critic_metrics"][key], single["critic_metrics"][key], f"critic {key}")
        initial = dict(reference.state_dict())  # the class's untrained reference model: the weights both updates start from
        for name, w in single["actor_weights_1"].items():
            if zero_grad_in_exact_arithmetic(name):
                continue
            for d in dist:
                assert_adam_weights_close(d["actor_weights_1"][name], w, initial[name], name=name, atol=2e-6, rtol=1e-5)

    @pytest.mark.dist
    def test_dist_named_weights_identical_on_every_rank(self, dist):
        names = list(dist[0]["actor_weights_1"])
        for d in dist[1:]:
            assert list(d["actor_weights_1"]) == names
            for n in names:
                assert torch.equal(d["actor_weights_1"][n], dist[0]["actor_weights_1"][n]), n

    @pytest.mark.dist
    def test_dist_weight_sync_rollout_matches_actor(self, dist):
        if self.rollout_factory is None:
            pytest.skip("no rollout_factory")
        for rank, d in enumerate(dist):
            s = d["sync"]
            mask = s["mask"].bool()
            assert mask.any()
            torch.testing.assert_close(s["rollout"][mask], s["actor"][mask], atol=self.sync_atol, rtol=0, msg=lambda m, r=rank: f"rank {r}: {m}")

    @pytest.mark.dist
    def test_dist_save_hf_loads_in_transformers(self, dist):
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(str(dist[0]["workdir"] / "hf"), dtype=torch.float32)
        sd = model.state_dict()
        for name, w in dist[0]["actor_weights_2"].items():
            assert torch.equal(sd[name], w), name

    @pytest.mark.dist
    def test_dist_checkpoint_resume_is_bit_identical(self, dist, resumed):
        for rank, (before, after) in enumerate(zip(dist, resumed)):
            for name, w in before["actor_weights_1"].items():
                assert torch.equal(after["weights_loaded"][name], w), f"rank {rank}: {name} differs after load"
            assert after["metrics_2"] == before["actor_metrics_2"], f"rank {rank}: the update after resume differs"
            for name, w in before["actor_weights_2"].items():
                assert torch.equal(after["weights_2"][name], w), f"rank {rank}: {name} differs after the resumed update"
            if before["actor_state_1"] is not None:
                _assert_equal_state(before["actor_state_1"], after["state_loaded"], f"rank {rank}")

    # ----------------------------------------------------------- errors
    def test_missing_model_path_is_a_clear_error(self, config, tmp_path):
        missing = tmp_path / "no-such-model"
        bad = attrs.evolve(config, model=attrs.evolve(config.model, path=str(missing)))
        with pytest.raises(Exception) as err:
            load_object(self.factory)("actor", bad, WorkerContext())
        msg = str(err.value)
        assert str(missing) in msg and "rlcore model smollm2" in msg

    def test_unknown_role_is_a_clear_error(self, config):
        with pytest.raises(ValueError, match="critic_v2"):
            load_object(self.factory)("critic_v2", config, WorkerContext())

    def test_micro_batch_not_dividing_is_a_clear_error(self, config, step):
        bad = attrs.evolve(config, actor=attrs.evolve(config.actor, ppo_micro_batch_size_per_gpu=3))
        engine = self.engine("actor", bad)
        try:
            with pytest.raises(ValueError) as err:
                engine.update(step)
        finally:
            engine.shutdown()
        msg = str(err.value)
        # 8 sequences / 2 mini-batches = 4 per mini-batch, 4 % 3 = 1
        assert "ppo_micro_batch_size_per_gpu=3" in msg and "4 % 3 = 1" in msg, msg

    # ------------------------------------------------------------ schedule
    def test_lr_warmup_then_cosine(self, config, step):
        optim = OptimConfig(lr=1e-3, lr_warmup_steps=2, lr_scheduler="cosine", min_lr_ratio=0.1)
        cfg = attrs.evolve(
            config,
            actor=attrs.evolve(config.actor, ppo_epochs=1, ppo_mini_batch_size=PROMPTS_PER_STEP, ppo_micro_batch_size_per_gpu=8, optim=optim),
            trainer=attrs.evolve(config.trainer, total_training_steps=None),
        )
        engine = self.engine("actor", cfg)
        try:
            engine.set_total_steps(6)
            lrs = [engine.update(step)["lr"] for _ in range(6)]
        finally:
            engine.shutdown()
        # warmup (k + 1) / 2 for k < 2; then 0.1 + 0.9 * (1 + cos(pi * (k - 2) / 4)) / 2
        expected = [0.5e-3, 1e-3, 1e-3, 0.868198e-3, 0.55e-3, 0.231802e-3]
        assert lrs == pytest.approx(expected, rel=1e-5)


    # ----------------------------------------------- the shared update loop
    def _count_forwards(self, engine: RoleEngine) -> list[tuple[int, int]]:
        """``(rows, tokens)`` of every training forward ``engine`` runs from now on."""
        seen: list[tuple[int, int]] = []
        backend = engine.backend
        forward = type(backend).forward

        def counting(x, **kw):
            if kw.get("training"):
                seen.append((len(x["input_ids"]), int(x["attention_mask"].sum())))
            return forward(backend, x, **kw)

        backend.forward = counting
        return seen

    def _same_update(self, a: dict, b: dict, wa: RoleEngine, wb: RoleEngine) -> None:
        for key in ("loss", "grad_norm"):
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), key
        ea, eb = dict(wa.named_weights()), dict(wb.named_weights())
        for name in eb:
            torch.testing.assert_close(ea[name], eb[name], rtol=1e-5, atol=1e-6, msg=lambda m: f"{name}: {m}")

    def test_token_budget_micro_batches_give_the_same_update(self, config, step):
        """``actor.use_dynamic_bsz``: micro-batches of at most ``ppo_max_token_len_per_gpu`` tokens, weighted by their
        tokens, give the update of fixed micro-batches (the loop is core's, so every backend honours it)."""
        shard = self._single_order(config, step)
        budget = 36  # rows of 9 to 14 tokens: micro-batches of 2 or 3 rows, where the fixed size makes 2
        fixed = self.engine("actor", attrs.evolve(config, actor=attrs.evolve(config.actor, ppo_micro_batch_size_per_gpu=2)))
        dyn_cfg = attrs.evolve(config, actor=attrs.evolve(config.actor, use_dynamic_bsz=True, ppo_max_token_len_per_gpu=budget))
        dyn = self.engine("actor", dyn_cfg)
        try:
            seen = self._count_forwards(dyn)
            a, b = dyn.update(shard), fixed.update(shard)
            assert seen and all(tokens <= budget or rows == 1 for rows, tokens in seen), seen
            assert any(rows != 2 for rows, _ in seen), f"the token budget made the fixed size's micro-batches: {seen}"
            self._same_update(a, b, dyn, fixed)
        finally:
            fixed.shutdown()
            dyn.shutdown()

    @pytest.mark.parametrize("zero_rows", [[0, 1, 4, 5], list(range(8))])
    def test_zero_advantage_rows_left_out_give_the_same_update(self, config, step, zero_rows):
        """Rows with A = 0 everywhere add 0 to the loss and the gradient: leaving them out of the forwards changes
        neither the loss (its token count still includes them) nor the weights after 2 mini-batches x 2 epochs,
        also when every row is such a row (then AdamW steps on a zero gradient, as it would have)."""
        shard = self._single_order(config, step)
        adv = shard.tensors["advantages"].clone()
        adv[zero_rows] = 0.0
        shard["advantages"] = adv

        def pg_only(skip: bool) -> RunConfig:
            return attrs.evolve(config, actor=attrs.evolve(config.actor, entropy_coeff=0.0, use_kl_loss=False, skip_zero_advantage_rows=skip))

        skip, full = self.engine("actor", pg_only(True)), self.engine("actor", pg_only(False))
        try:
            seen = self._count_forwards(skip)
            a, b = skip.update(shard), full.update(shard)
            assert sum(rows for rows, _ in seen) == 2 * (len(shard) - len(zero_rows))  # 2 epochs over the rows with a signal
            if len(zero_rows) == len(shard):
                assert a["loss"] == 0.0 and a["grad_norm"] == 0.0
            self._same_update(a, b, skip, full)
        finally:
            skip.shutdown()
            full.shutdown()

    def test_on_policy_is_said_by_the_caller(self, config, step):
        """The loop says on-policy (it skipped the old log-prob pass; nothing is inferred from a missing key): then
        the old policy is the current one, the same update as old log-probs equal to the model's own. Off-policy
        without old log-probs, or on-policy over several mini-batches, is a clear error before any step."""
        from rl_core.train_engine.batch_sizes import TrainSizeError

        shard = self._single_order(config, step)
        one = attrs.evolve(config, actor=attrs.evolve(config.actor, ppo_epochs=1, ppo_mini_batch_size=PROMPTS_PER_STEP))
        told, given, several = self.engine("actor", one), self.engine("actor", one), self.engine("actor", config)
        try:
            without = shard.select(*[k for k in shard.keys() if k != "old_log_probs"])
            with pytest.raises(TrainSizeError, match="no 'old_log_probs'"):
                told.update(without)
            with pytest.raises(TrainSizeError, match="told it is on-policy.*2 mini-batches x 2 epochs"):
                several.update(without, on_policy=True)
            own = shard.select(*shard.keys())
            own["old_log_probs"] = given.compute_log_prob(shard, temperature=config.rollout.temperature)["log_probs"]
            initial = {name: w.clone() for name, w in told.named_weights()}
            a, b = told.update(without, on_policy=True), given.update(own)
            for key in ("loss", "grad_norm"):
                assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), key
            # the inference forward's log-probs equal the training forward's up to rounding: AdamW's first step
            # lets entries whose gradient is rounding noise differ (rl_core_testing.adam_weights)
            ea, eb = dict(told.named_weights()), dict(given.named_weights())
            for name, w in eb.items():
                if not zero_grad_in_exact_arithmetic(name):
                    assert_adam_weights_close(ea[name], w, initial[name], name=name, atol=1e-5, rtol=1e-4)
        finally:
            for engine in (told, given, several):
                engine.shutdown()


def _assert_equal_state(a: Any, b: Any, where: str, path: str = "") -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), f"{where}: {path} differs"
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{where}: {path} keys differ: {sorted(map(str, a))} vs {sorted(map(str, b))}"
        for k in a:
            _assert_equal_state(a[k], b[k], where, f"{path}/{k}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), f"{where}: {path} lengths differ"
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_equal_state(x, y, where, f"{path}/{i}")
    else:
        assert a == b, f"{where}: {path}: {a!r} != {b!r}"
