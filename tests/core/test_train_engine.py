"""rl_core.train_engine: the LR schedule, the batch-size arithmetic, and core's driver over a toy backend.

The fsdp and megatron plugins run the driver through the train conformance suite; the toy
backend here checks, with the core alone, what a backend gets from it: the mini-batch loop, loss
weighting that makes micro-batching invisible, the LR schedule and the numerical guard.
"""

from __future__ import annotations

import ast
import math
from pathlib import Path

import attrs
import pytest
import torch
from rl_core.backends import WorkerContext
from rl_core.batch import Batch
from rl_core.config.schema import ActorConfig, CriticConfig, DataConfig, ModelConfig, OptimConfig, RefConfig, RunConfig, TrainerConfig
from rl_core.train_engine.backend import Heads, TrainBackend, build_adamw
from rl_core.train_engine.engine import RoleEngine
from rl_core.train_engine.batch_sizes import TrainSizeError, inference_micro, mini_micro_epochs, split_sizes
from rl_core.train_engine.lr_schedule import LRSchedule
from rl_core.train_engine.guard import NonFiniteError


# -------------------------------------------------------------- schedule
def test_schedule_values_by_hand():
    lin = LRSchedule(OptimConfig(lr_warmup_steps_ratio=0.25, lr_scheduler="linear", min_lr_ratio=0.0), total_steps=8)
    # warmup int(0.25 * 8) = 2 steps: 1/2, 2/2; then linear from 1 at k=2 to 0 at k=8: 1 - (k - 2) / 6
    assert [lin(k) for k in range(8)] == pytest.approx([0.5, 1.0, 1.0, 5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6])
    const = LRSchedule(OptimConfig(lr_warmup_steps=3))
    assert [const(k) for k in range(5)] == pytest.approx([1 / 3, 2 / 3, 1.0, 1.0, 1.0])
    cos = LRSchedule(OptimConfig(lr_scheduler="cosine"), total_steps=None)
    assert cos(0) == 1.0
    with pytest.raises(ValueError, match="set_total_steps"):
        cos(1)


def test_absolute_min_lr_by_hand():
    """optim.min_lr (verl's Megatron min_lr): lr 1e-3 decays to 1e-4 over 4 updates, megatron-core's
    min_lr + coeff * (lr - min_lr): linear coeff 1 - k/4, cosine coeff (1 + cos(pi k/4)) / 2."""
    import torch

    expect = {"linear": [1e-3, 7.75e-4, 5.5e-4, 3.25e-4, 1e-4, 1e-4], "cosine": [1e-3, 8.68198052e-4, 5.5e-4, 2.31801948e-4, 1e-4, 1e-4]}
    for kind, lrs in expect.items():
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, LRSchedule(OptimConfig(lr=1e-3, min_lr=1e-4, lr_scheduler=kind), total_steps=4))
        seen = []
        for _ in lrs:
            seen.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        assert seen == pytest.approx(lrs, rel=1e-7), kind
    from rl_core.config.rules import check_config

    problems = check_config(_config(optim=OptimConfig(lr=1e-6, min_lr=2e-6)))
    assert [p.key for p in problems] == ["actor.optim.min_lr"] and "above actor.optim.lr" in problems[0].what
    problems = check_config(_config(optim=OptimConfig(lr=1e-6, min_lr=1e-7, min_lr_ratio=0.1)))
    assert [p.key for p in problems] == ["actor.optim.min_lr"] and "both set" in problems[0].what


# ----------------------------------------------------------- batch sizes
def _config(*, micro: int = 1, critic: CriticConfig | None = None, **actor) -> RunConfig:
    return RunConfig(
        model=ModelConfig(path="unused"),
        data=DataConfig(train_batch_size=4),
        actor=ActorConfig(ppo_mini_batch_size=2, ppo_micro_batch_size_per_gpu=micro, **actor),
        critic=critic or CriticConfig(enable=True),
        trainer=TrainerConfig(total_training_steps=4, seed=0),
    )


def test_critic_sizes_fall_back_to_the_actors():
    cfg = _config(micro=2, ppo_epochs=3)
    assert mini_micro_epochs(cfg, "critic") == mini_micro_epochs(cfg, "actor") == (2, 2, 3)
    cfg = _config(micro=2, critic=CriticConfig(ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=1, ppo_epochs=1))
    assert mini_micro_epochs(cfg, "critic") == (4, 1, 1)


def test_inference_micro_batch_precedence():
    cfg = _config(micro=2)
    assert [inference_micro(cfg, r) for r in ("actor", "ref", "critic")] == [2, 2, 2]
    cfg = _config(micro=2, log_prob_micro_batch_size_per_gpu=3)
    assert [inference_micro(cfg, r) for r in ("actor", "ref", "critic")] == [3, 3, 2]
    cfg = attrs.evolve(cfg, ref=RefConfig(log_prob_micro_batch_size_per_gpu=5))
    assert [inference_micro(cfg, r) for r in ("actor", "ref")] == [3, 5]


def test_split_sizes_and_their_errors():
    assert split_sizes(_config(micro=2), "actor", 8) == (2, 4, 2, 1)
    with pytest.raises(TrainSizeError, match=r"7 sequences cannot be split into 2 mini-batches .* 7 % 2 = 1"):
        split_sizes(_config(), "actor", 7)
    with pytest.raises(TrainSizeError, match=r"actor.ppo_micro_batch_size_per_gpu=3 does not divide .* valid values: 1, 2, 4"):
        split_sizes(_config(micro=3), "actor", 8)
    with pytest.raises(TrainSizeError, match=r"critic.ppo_mini_batch_size=3 \(4 % 3 = 1\)"):
        split_sizes(_config(critic=CriticConfig(ppo_mini_batch_size=3)), "critic", 8)


# ------------------------------------------------------ the driver, a toy backend
class ToyCritic(TrainBackend):
    """A critic whose 'model' is a per-token embedding of width 1: everything else is core's."""

    name = "toy"

    def __init__(self, config: RunConfig, role: str = "critic") -> None:
        super().__init__(role, config, WorkerContext())
        self.model = torch.nn.Embedding(16, 1)
        with torch.no_grad():
            self.model.weight.copy_(torch.linspace(-1, 1, 16).unsqueeze(-1))
        self.optimizer = build_adamw(self.model, config, role)

    def all_reduce(self, value: torch.Tensor, op: str, over: str = "data") -> torch.Tensor:
        return value  # one rank

    def forward(self, x, *, temperature, with_entropy, entropy_grad, training) -> Heads:
        R = x["responses"].shape[1]
        return Heads(values=self.model(x["input_ids"][:, -R:]).squeeze(-1))

    def backward(self, loss, weight):
        (loss * weight).backward()

    def reduce_and_clip(self, max_norm):
        return float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), math.inf))

    def named_weights(self):
        return iter(self.model.state_dict().items())

    def save_hf(self, path):
        raise NotImplementedError

    def save_checkpoint(self, path, scheduler):
        raise NotImplementedError

    def load_checkpoint(self, path):
        raise NotImplementedError


def _critic_batch(rows: int = 8, R: int = 3) -> Batch:
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, 16, (rows, 2), generator=g)
    responses = torch.randint(0, 16, (rows, R), generator=g)
    response_mask = (torch.arange(R) < torch.arange(rows).remainder(R).add(1).unsqueeze(-1)).long()  # 1..R real tokens
    return Batch(
        {
            "input_ids": torch.cat([prompts, responses], 1),
            "attention_mask": torch.cat([torch.ones(rows, 2, dtype=torch.long), response_mask], 1),
            "responses": responses,
            "response_mask": response_mask,
            "values": 0.1 * torch.randn(rows, R, generator=g),
            "returns": torch.randn(rows, R, generator=g),
        },
        {},
        {},
    )


def _toy(micro: int, **optim) -> RoleEngine:
    optim = {"lr": 0.1, "lr_warmup_steps": 2, **optim}
    return RoleEngine(ToyCritic(_config(critic=CriticConfig(ppo_micro_batch_size_per_gpu=micro, optim=OptimConfig(**optim)))))


def test_micro_batching_does_not_change_the_update():
    """Each micro-batch's loss weighted by its share of the mini-batch's tokens: one micro-batch or four, one gradient."""
    batch = _critic_batch()
    whole, split = _toy(micro=4), _toy(micro=1)
    for _ in range(2):
        a, b = whole.update(batch), split.update(batch)
        assert set(a) == set(b) >= {"loss", "grad_norm", "lr", "critic/vf_loss"}
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-6) and a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-6)
    torch.testing.assert_close(whole.model.weight, split.model.weight, rtol=1e-6, atol=1e-7)
    assert [whole.update(batch)["lr"] for _ in range(2)] == pytest.approx([0.1, 0.1])  # warmup of 2 was 0.05, 0.1


def test_warmup_and_a_later_total():
    engine = _toy(micro=2, lr_scheduler="linear", min_lr_ratio=0.0, lr_warmup_steps=1)
    batch = _critic_batch()
    assert engine.update(batch)["lr"] == pytest.approx(0.1)  # warmup step 1 of 1
    engine.set_total_steps(3)  # decay to 0 over updates 1..3
    assert [engine.update(batch)["lr"] for _ in range(2)] == pytest.approx([0.1, 0.05])


class SavingToy(ToyCritic):
    """The toy critic with a checkpoint: model, the optimizer it is given (None: none saved), scheduler."""

    def save_checkpoint(self, path, scheduler):
        state = {"model": self.model.state_dict(), "scheduler": scheduler}
        if self.optimizer is not None:
            state["optim"] = self.optimizer.state_dict()
        torch.save(state, f"{path}.pt")

    def load_checkpoint(self, path):
        state = torch.load(f"{path}.pt", weights_only=True)
        self.model.load_state_dict(state["model"])
        if self.optimizer is not None:
            self.optimizer.load_state_dict(state["optim"])
        return state["scheduler"]


def test_checkpoint_contents(tmp_path):
    """trainer.save_contents / load_contents (verl's checkpoint.*): without optimizer nothing of AdamW is saved and a
    resume starts it fresh; without extra the LR schedule is put at the resumed step (the same lr as a full resume)."""
    import attrs

    def engine(*contents):
        cfg = _config(critic=CriticConfig(ppo_micro_batch_size_per_gpu=2, optim=OptimConfig(lr=0.1, lr_warmup_steps=4)))
        return RoleEngine(SavingToy(attrs.evolve(cfg, trainer=attrs.evolve(cfg.trainer, save_contents=list(contents)))))

    batch = _critic_batch()
    runs = {}
    for contents in (("model", "optimizer", "extra"), ("model", "extra"), ("model",)):
        a = engine(*contents)
        a.update(batch), a.update(batch)
        a.save_checkpoint(str(tmp_path / "-".join(contents)))
        saved = torch.load(tmp_path / f"{'-'.join(contents)}.pt", weights_only=True)
        assert ("optim" in saved) is ("optimizer" in contents) and (saved["scheduler"] is not None) is ("extra" in contents)
        b = engine(*contents)
        b.load_checkpoint(str(tmp_path / "-".join(contents)), [c for c in contents], step=2)
        assert torch.equal(b.model.weight, a.model.weight)
        assert bool(b.optimizer.state) is ("optimizer" in contents)  # AdamW fresh without it
        runs[contents] = b.update(batch)["lr"]  # update 3 of a 4-step warmup: 0.075 however the schedule was restored
    assert list(runs.values()) == pytest.approx([0.075] * 3)
    c = engine("model", "optimizer", "extra")  # load_contents leaves the optimizer of a full checkpoint out
    c.load_checkpoint(str(tmp_path / "model-optimizer-extra"), ["model", "extra"], step=2)
    assert not c.optimizer.state and c.update(batch)["lr"] == pytest.approx(0.075)


def test_a_non_finite_loss_stops_before_the_step():
    engine = _toy(micro=2)
    batch = _critic_batch()
    returns = batch.tensors["returns"].clone()
    returns[3, 0] = float("nan")
    batch["returns"] = returns
    before = engine.model.weight.detach().clone()
    with pytest.raises(NonFiniteError, match="non-finite loss .* stage 'update_critic', role 'critic', rank 0"):
        engine.update(batch)
    assert torch.equal(engine.model.weight, before)


def test_the_driver_checks_roles_and_calls():
    with pytest.raises(TrainSizeError, match="unknown role 'judge': the toy train backend provides actor, critic, ref"):
        ToyCritic(_config(), role="judge")
    engine = _toy(micro=2)
    with pytest.raises(RuntimeError, match="compute_values"):
        engine.compute_log_prob(_critic_batch())
    values = engine.compute_values(_critic_batch(rows=5))
    assert values.shape == (5, 3) and values.dtype == torch.float32


def test_the_optional_members_have_safe_defaults():
    """A backend without LoRA, a sampled view or a local state: core's driver gets None (LoRA's base weights: a clear error)."""
    engine = _toy(micro=2)
    assert engine.lora_adapter() is None and engine.lora_adapter(torch.bfloat16) is None
    assert engine.sample_weights({"weight": torch.tensor([0, 1])}) is None
    assert engine.local_state_dict() is None
    with pytest.raises(NotImplementedError, match="the toy train backend has no LoRA base weights to send"):
        engine.named_base_weights()


# ------------------------------------------- the contract: every member core reads is declared
CORE = Path(__file__).resolve().parents[2] / "core" / "rl_core"


def _is_backend_annotation(node) -> bool:
    text = ast.unparse(node) if node is not None else ""
    return text.strip("'\"").split(".")[-1] == "TrainBackend"


def _backend_reads(tree: ast.AST) -> tuple[set[str], list[str]]:
    """``(attributes read or written on a train backend, getattr / hasattr probes of one)`` in ``tree``.

    A backend is ``<x>.backend`` (RoleEngine's), a parameter annotated ``TrainBackend``, or a name assigned from one."""
    members, probes = set(), []
    for fn in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        names = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs] if _is_backend_annotation(a.annotation)}

        def is_backend(node) -> bool:
            return (isinstance(node, ast.Attribute) and node.attr == "backend") or (isinstance(node, ast.Name) and node.id in names)

        for node in ast.walk(fn):  # names bound to a backend (b = self.backend)
            if isinstance(node, ast.Assign) and is_backend(node.value):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        for node in ast.walk(fn):
            if isinstance(node, ast.Attribute) and is_backend(node.value):
                members.add(node.attr)
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                  and node.args and is_backend(node.args[0])):
                probes.append(f"{node.func.id}({ast.unparse(node.args[0])}, ...) at line {node.lineno}")
    return members, probes


def _core_backend_reads() -> tuple[dict[str, set[str]], list[str]]:
    """Per core module that imports the train engine: what it reads on a backend; and every probe, with its file."""
    found, probes = {}, []
    for path in sorted(CORE.rglob("*.py")):
        if path == CORE / "train_engine" / "backend.py":
            continue  # the contract itself
        text = path.read_text()
        if "rl_core.train_engine" not in text and path.parent.name != "train_engine":
            continue
        members, found_probes = _backend_reads(ast.parse(text))
        if members:
            found[str(path.relative_to(CORE))] = members
        probes += [f"{path.relative_to(CORE)}: {p}" for p in found_probes]
    return found, probes


def test_the_scan_finds_backend_reads():
    members, probes = _backend_reads(ast.parse(
        "def f(b: TrainBackend):\n    b.declared()\n    getattr(b, 'x', None)\n"
        "def g(self):\n    c = self.backend\n    c.other = 1\n    return self.backend.third\n"
    ))
    assert members == {"declared", "other", "third"} and len(probes) == 1


def test_train_backend_declares_every_member_core_reads():
    """Every attribute core reads (or sets) on a backend is declared on TrainBackend (a method, or an annotated
    attribute), and core asks none of them by getattr / hasattr: a backend knows from the class what core calls."""
    found, probes = _core_backend_reads()
    assert not probes, "core probes backends instead of calling declared members:\n" + "\n".join(probes)
    read = set().union(*found.values())
    # the scan sees the driver and the update loop, and the members issue 46 found undeclared
    assert {"forward", "backward", "reduce_and_clip", "optimizer", "on_device", "lora_adapter", "named_base_weights",
            "sample_weights", "local_state_dict"} <= read, sorted(read)
    declared = {n for n in read if hasattr(TrainBackend, n) or n in TrainBackend.__annotations__}
    missing = {f"{n} (read in {', '.join(m for m, ms in found.items() if n in ms)})" for n in read - declared}
    assert not missing, f"TrainBackend does not declare: {sorted(missing)}"
