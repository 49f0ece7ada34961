"""Same samples, same update? rl-core's GRPO step against TRL's GRPOTrainer on identical batches (issue 18).

``bench/vs_trl_cpu.py`` found rl-core's greedy accuracy behind TRL's at step 5 under the same settings. This
harness takes sampling out of the comparison: TRL runs ``--steps`` steps of the reference settings
(``vs_trl_cpu.build_trl_trainer``, the very trainer the side-by-side runs) and records, for every step, the batch it
trained on (prompt and completion ids and masks, rewards, advantages), its per-token log-probs at the weights
before the step, its loss, its gradient norm before clipping, the clipped gradient handed to AdamW and the weights
after the step. rl-core then trains on exactly those batches through its real path: the trainer's reward scoring
and ``compute_advantage`` call (``rl_core.trainer.loop``), a ``HybridWorker`` built from the config the
side-by-side's ``rlcore-same`` run uses (``RoleEngine.update`` over ``FSDPBackend``: the shared-prompt forward, the chunked LM head, the
zero-advantage row skip, clipping, fused AdamW), then the weight sync into the rollout engine. Each step is
compared; rl-core continues from its own weights, so differences would accumulate over the steps.

    /work/trl-venv/bin/python bench/vs_trl_update.py record --seed 0 --steps 5   # TRL side (TRL venv)
    .venv/bin/python bench/vs_trl_update.py replay --seed 0 --out bench/results/vs_trl_cpu/update_s0.json
    .venv/bin/python bench/vs_trl_update.py evalcheck --seed 0 --out bench/results/vs_trl_cpu/evalcheck_s0.json

``evalcheck`` scores TRL's recorded weights after each step with both evaluations of the side-by-side (rl-core's
validation through the hf rollout, and the greedy HF ``generate`` of the TRL callback).

The data files come from ``vs_trl_cpu.py`` (``--work``, default /tmp/vs_trl_cpu; ``replay`` writes them if
missing, before ``record`` needs them: run ``replay --prepare-only`` first on a fresh machine). The dumps
(~1.1 GB per step) go to ``--dump`` (default /tmp/vs_trl_update).

The top level imports the standard library only, so the file loads in either venv.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

import vs_trl_cpu as side  # noqa: E402  (stdlib-only top level)


# ----------------------------------------------------------------------------- TRL side
def record(args: argparse.Namespace) -> None:
    import torch
    from transformers import TrainerCallback

    out = Path(args.dump) / f"s{args.seed}"
    out.mkdir(parents=True, exist_ok=True)
    rewards_seen: list[list[float]] = []

    def reward(completions, ground_truth, **kw):
        r = side.trl_reward(completions, ground_truth, **kw)
        rewards_seen.append(list(r))
        return r

    reward.__name__ = "reward"
    trainer, tok = side.build_trl_trainer(args.seed, Path(args.work), args.steps, reward=reward)
    model = trainer.model
    torch.save(_params(model), out / "weights-0.pt")
    info = {"generation_config": trainer.generation_config.to_dict(), "eos_token_ids": list(trainer.eos_token_ids),
            "pad_token_id": tok.pad_token_id, "sampling_check": _sampling_check(trainer, tok)}
    cur: dict = {}
    steps: list[dict] = []

    generate_and_score = trainer._generate_and_score_completions

    def recorded_generate(inputs):
        o = generate_and_score(inputs)
        ids = torch.cat([o["prompt_ids"], o["completion_ids"]], 1)
        mask = torch.cat([o["prompt_mask"], o["completion_mask"]], 1)
        with torch.no_grad():
            logps, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, o["completion_ids"].shape[1], batch_size=len(ids))
        cur.clear()
        cur.update({k: o[k].detach().clone() for k in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages")})
        cur.update(rewards=torch.tensor(rewards_seen[-1]), log_probs=logps.float(), ground_truth=[x["ground_truth"] for x in inputs],
                   model_training=model.training)
        return o

    trainer._generate_and_score_completions = recorded_generate

    compute_loss = trainer.compute_loss

    def recorded_loss(*a, **k):
        loss = compute_loss(*a, **k)
        cur["loss"] = float(loss.detach())
        return loss

    trainer.compute_loss = recorded_loss

    clip = trainer._clip_grad_norm

    def recorded_clip(m):
        norm = clip(m)
        cur["grad_norm"] = float(norm)
        return norm

    trainer._clip_grad_norm = recorded_clip

    class Dump(TrainerCallback):
        def on_pre_optimizer_step(self, a, state, control, **k):
            cur["grads"] = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
            cur["lr"] = trainer.optimizer.param_groups[0]["lr"]

        def on_optimizer_step(self, a, state, control, **k):
            k_ = state.global_step + 1
            grads = cur.pop("grads")
            torch.save(grads, out / f"grads-{k_}.pt")
            torch.save(_params(model), out / f"weights-{k_}.pt")
            torch.save(dict(cur), out / f"batch-{k_}.pt")
            steps.append({"step": k_, "loss": cur.get("loss"), "grad_norm": cur.get("grad_norm"), "lr": cur.get("lr"),
                          "rewards": cur["rewards"].tolist(), "advantages": cur["advantages"].tolist()})
            print(f"TRL step {k_}: loss {cur.get('loss'):.6g} grad_norm {cur.get('grad_norm'):.6g} reward {cur['rewards'].mean():.3f}", flush=True)

    trainer.add_callback(Dump())
    trainer.train()
    info.update(steps=steps, optimizer=repr(trainer.optimizer).replace("\n", " "), lr_scheduler=type(trainer.lr_scheduler).__name__)
    (out / "trl.json").write_text(json.dumps(info, indent=1) + "\n")


def _params(model) -> dict:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _sampling_check(trainer, tok) -> dict:
    """Does TRL's generate sample from the raw logits (temperature 1, no top-k / top-p)? Processed scores vs raw logits."""
    import torch

    text = tok.apply_chat_template([{"role": "system", "content": side.SYSTEM_PROMPT}, {"role": "user", "content": "What is 12 + 7?"}],
                                   add_generation_prompt=True, tokenize=False)
    enc = tok([text], return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        g = trainer.model.generate(**enc, generation_config=trainer.generation_config, output_scores=True, output_logits=True,
                                   return_dict_in_generate=True)
    diffs = [float((s - l).abs().max()) for s, l in zip(g.scores, g.logits)]
    inf = sum(int(torch.isinf(s).sum()) for s in g.scores)
    return {"max_abs_scores_minus_logits": max(diffs), "filtered_entries": inf, "tokens": len(diffs)}


# ----------------------------------------------------------------------------- rl-core side
def rlcore_worker(seed: int, work: Path, steps: int):
    """(worker, config): a HybridWorker from the ``rlcore-same`` run's config, as ``rlcore train`` builds it."""
    from rl_core.backends import WorkerContext
    from rl_core.cli.train_cmd import materialise_builtin_model
    from rl_core.config.load import load_config
    from rl_core.plugins import get_registry
    from rl_core.plan.resolver import resolve
    from rl_core.placement.worker import HybridWorker

    overrides = side.rlcore_overrides("rlcore-same", seed, work, steps, 5, work / "logs" / f"update-s{seed}")
    cfg = materialise_builtin_model(load_config(side.CONFIG, overrides))
    stack, problems = resolve(cfg, get_registry())
    if stack is None:
        raise SystemExit("config problems: " + "; ".join(p.render() for p in problems))
    worker = HybridWorker(stack, WorkerContext(seed=cfg.trainer.seed))
    worker.set_total_steps(steps)
    return worker, stack.config


def rlcore_batch(rec: dict, cfg, tokenizer):
    """The recorded TRL batch laid out as rl-core's rollout lays out its own (``rollout_batch``)."""
    import torch
    from rl_core.batch import Batch
    from rl_core.rollout.output import rollout_batch

    n, R = cfg.rollout.n, cfg.data.max_response_length
    p_ids, p_mask = rec["prompt_ids"], rec["prompt_mask"]
    rows = len(p_ids)
    for g in range(0, rows, n):  # TRL's rows come in groups of n with the same prompt (before its shuffle)
        assert (p_ids[g:g + n] == p_ids[g]).all() and (p_mask[g:g + n] == p_mask[g]).all()
    c_ids, c_mask = rec["completion_ids"], rec["completion_mask"]
    pad = tokenizer.pad_token_id
    responses = torch.full((rows, R), pad, dtype=torch.long)
    response_mask = torch.zeros((rows, R), dtype=torch.long)
    responses[:, : c_ids.shape[1]] = torch.where(c_mask.bool(), c_ids, torch.full_like(c_ids, pad))
    response_mask[:, : c_ids.shape[1]] = c_mask
    prompts = Batch({"input_ids": p_ids[::n], "attention_mask": p_mask[::n]},
                    {"uid": [f"p{i}" for i in range(rows // n)], "ground_truth": rec["ground_truth"][::n],
                     "data_source": ["reasoning_gym"] * (rows // n)})
    return prompts, rollout_batch(prompts, n, responses, response_mask)


def replay(args: argparse.Namespace) -> dict:
    import torch
    from rl_core.algorithms.advantages import compute_advantage, group_index
    from rl_core.modeling import load_tokenizer
    from rl_core.plugins import get_registry
    from rl_core.rewards.manager import RewardManager, scores_to_token_level

    work, dump = Path(args.work), Path(args.dump) / f"s{args.seed}"
    side.write_data(work, [args.seed])
    if args.prepare_only:
        return {}
    torch.manual_seed(0)
    worker, cfg = rlcore_worker(args.seed, work, args.steps)
    tokenizer = load_tokenizer(cfg.model.path)
    engine = worker.actor
    reward = RewardManager(cfg.reward, get_registry())
    trl_info = json.loads((dump / "trl.json").read_text())
    params = dict(engine.model.named_parameters())
    w0 = torch.load(dump / "weights-0.pt")
    report = {"seed": args.seed, "trl": {k: trl_info[k] for k in ("generation_config", "eos_token_ids", "sampling_check", "optimizer", "lr_scheduler")},
              "rlcore_optimizer": repr(engine.optimizer).replace("\n", " "),
              "initial_weights_max_abs_diff": max(float((params[k].detach() - v).abs().max()) for k, v in w0.items()),
              "same_parameter_names": sorted(params) == sorted(w0), "steps": []}
    captured: dict = {}

    def capture_grads(*_):  # after clipping, before AdamW (as TRL's on_pre_optimizer_step)
        captured["grads"] = {n: p.grad.detach().clone() for n, p in engine.model.named_parameters() if p.grad is not None}

    engine.optimizer.register_step_pre_hook(capture_grads)
    prev = {k: v.clone() for k, v in w0.items()}
    for k in range(1, args.steps + 1):
        rec = torch.load(dump / f"batch-{k}.pt")
        prompts, batch = rlcore_batch(rec, cfg, tokenizer)
        if k == 1:
            report["sampler_check"] = sampler_check(engine.model, prompts)
        own = rollout_check(worker, prompts, cfg, k, reward, tokenizer)
        mask = batch["response_mask"]
        # the trainer's reward and advantage path (rl_core.trainer.loop.Trainer.score / train_step)
        batch["response_text"] = [tokenizer.decode(ids[m.bool()].tolist(), skip_special_tokens=True) for ids, m in zip(batch["responses"], mask)]
        scores, _, _ = reward.score(batch)
        batch["token_level_scores"] = scores_to_token_level(scores, mask)
        batch["token_level_rewards"] = batch["token_level_scores"]
        adv, returns = compute_advantage(
            cfg.algorithm.adv_estimator, token_level_rewards=batch["token_level_rewards"], response_mask=mask,
            index=group_index(batch["uid"]), values=None, gamma=cfg.algorithm.gamma, lam=cfg.algorithm.lam, baseline_rewards=None,
            options={"norm_adv_by_std": cfg.algorithm.norm_adv_by_std_in_grpo, **cfg.algorithm.options},
        )
        batch["advantages"], batch["returns"] = adv, returns
        trl_adv = rec["advantages"].float()
        row_adv = adv[:, 0]
        lp = engine.compute_log_prob(batch, temperature=cfg.rollout.temperature)["log_probs"]
        L = rec["completion_mask"].shape[1]
        m = rec["completion_mask"].bool()
        lp_diff = (lp[:, :L] - rec["log_probs"]).abs()[m]
        metrics = worker.update_actor(batch)
        grads = captured.pop("grads")
        trl_grads = torch.load(dump / f"grads-{k}.pt")
        trl_w = torch.load(dump / f"weights-{k}.pt")
        trl_prev = w0 if k == 1 else torch.load(dump / f"weights-{k - 1}.pt")
        now = {n: p.detach() for n, p in engine.model.named_parameters()}
        worker.sync_weights()
        rollout_sd = worker.rollout.model.state_dict()
        row = {
            "step": k,
            "reward_trl": rec["rewards"].tolist(), "reward_rlcore": scores.tolist(),
            "advantage_max_abs_diff": float((row_adv - trl_adv).abs().max()),
            "advantage_nonzero_rows": int((trl_adv != 0).sum()),
            "logprob_max_abs_diff": float(lp_diff.max()), "logprob_mean_abs_diff": float(lp_diff.mean()),
            "response_tokens": int(m.sum()),
            "loss_trl": trl_info["steps"][k - 1]["loss"], "loss_rlcore": metrics["actor/loss"],
            "grad_norm_trl": trl_info["steps"][k - 1]["grad_norm"], "grad_norm_rlcore": metrics["actor/grad_norm"],
            "lr_trl": trl_info["steps"][k - 1]["lr"], "lr_rlcore": metrics["actor/lr"],
            **_vector_compare("clipped_grad", grads, trl_grads),
            **_vector_compare("update", {n: now[n] - prev[n] for n in now}, {n: trl_w[n] - trl_prev[n] for n in now}),
            "weights_max_abs_diff": max(float((now[n] - trl_w[n]).abs().max()) for n in now),
            "weights_diff_over_update_norm": _norm({n: now[n] - trl_w[n] for n in now}) / max(_norm({n: trl_w[n] - w0[n] for n in now}), 1e-30),
            "rollout_equals_actor": all(torch.equal(rollout_sd[n], now[n]) for n in now),
            **own,
        }
        report["steps"].append(row)
        prev = {n: v.clone() for n, v in now.items()}
        print(json.dumps({k2: (round(v, 8) if isinstance(v, float) else v) for k2, v in row.items() if not k2.startswith("reward_")}), flush=True)
    return report


def rollout_check(worker, prompts, cfg, k: int, reward, tokenizer) -> dict:
    """rl-core's own rollout on the step's prompts at the same weights: its log-probs against the trainer's."""
    from rl_core.backends import SamplingParams

    r = cfg.rollout
    params = SamplingParams(n=r.n, temperature=r.temperature, top_p=r.top_p, top_k=r.top_k, max_new_tokens=cfg.data.max_response_length,
                            seed=10_000 + k, logprobs=True)
    own = worker.generate(prompts, params)
    mask = own["response_mask"].bool()
    lp = worker.actor.compute_log_prob(own, temperature=r.temperature)["log_probs"]
    diff = (own["rollout_log_probs"] - lp).abs()[mask]
    own["response_text"] = [tokenizer.decode(ids[m].tolist(), skip_special_tokens=True) for ids, m in zip(own["responses"], mask)]
    scores, _, _ = reward.score(own)
    return {"own_rollout_logprob_max_abs_diff": float(diff.max()), "own_rollout_logprob_mean_abs_diff": float(diff.mean()),
            "own_rollout_tokens": int(mask.sum()), "own_rollout_reward": float(scores.float().mean())}


def sampler_check(model, prompts, draws: int = 200_000, top: int = 30) -> dict:
    """rl-core's sampler (``rl_core.rollout.hf._sample``) and ``torch.multinomial`` (HF generate's) on the real
    first-token distribution of the first prompt: chi-square of the counts of the ``top`` likeliest tokens and
    the rest against the exact probabilities (expected about the degrees of freedom, sd sqrt(2 df))."""
    import torch
    from rl_core.modeling import position_ids_from_mask
    from rl_core.rollout.hf import _sample

    ids, mask = prompts["input_ids"][:1], prompts["attention_mask"][:1]
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask)).logits[0, -1].float()
    probs = torch.softmax(logits, -1)
    order = probs.argsort(descending=True)[:top]
    expected = torch.cat([probs[order], (1 - probs[order].sum()).reshape(1)]).double() * draws
    g = torch.Generator().manual_seed(0)
    out = {"draws": draws, "buckets": top + 1, "top_token_prob": float(probs[order[0]])}
    for name, draw in (("rlcore_sample", lambda b: _sample(logits.expand(b, -1), greedy=False, temperature=1.0, top_k=-1, top_p=1.0,
                                                            generator=g, want_log_prob=False)[0]),
                       ("torch_multinomial", lambda b: torch.multinomial(probs.expand(b, -1), 1, generator=g).squeeze(1))):
        counts = torch.zeros(top + 1, dtype=torch.float64)
        for _ in range(draws // 1000):
            tok = draw(1000)
            hit = tok.unsqueeze(1) == order.unsqueeze(0)
            counts[:top] += hit.sum(0).double()
            counts[top] += float((~hit.any(1)).sum())
        out[f"{name}_chi2"] = float(((counts - expected) ** 2 / expected).sum())
    return out


def evalcheck(args: argparse.Namespace) -> dict:
    """Both evaluations on the same weights: TRL's recorded weights after each step, scored by rl-core's
    validation path (the hf rollout, greedy, through ``HybridWorker.generate`` and the reward manager, as
    ``Trainer.validate``) and by the side-by-side's TRL callback (HF ``generate``, greedy, batches of 50)."""
    import torch
    from rl_core.backends import SamplingParams
    from rl_core.data.dataset import build_loaders
    from rl_core.modeling import load_tokenizer
    from rl_core.rewards.manager import RewardManager
    from transformers import GenerationConfig

    sys.path.insert(0, str(ROOT / "plugins" / "reward_rule"))
    from rl_reward_rule.gsm8k import score

    from rl_core.plugins import get_registry

    work, dump = Path(args.work), Path(args.dump) / f"s{args.seed}"
    worker, cfg = rlcore_worker(args.seed, work, args.steps)
    tokenizer = load_tokenizer(cfg.model.path)
    _, val_loader, _ = build_loaders(cfg.data, tokenizer, seed=cfg.data.seed)
    reward = RewardManager(cfg.reward, get_registry())
    model = worker.actor.model
    greedy_params = SamplingParams(n=1, temperature=cfg.rollout.val_temperature, top_p=1.0, top_k=-1,
                                   max_new_tokens=cfg.data.max_response_length, greedy=True)
    val = side._read_jsonl(work / "data" / "val.jsonl")
    texts = [tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False) for r in val]
    golds = [r["reward_model"]["ground_truth"] for r in val]
    hf_greedy = GenerationConfig(max_new_tokens=side.NEW_TOKENS, do_sample=False, eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
                                 pad_token_id=tokenizer.pad_token_id, use_cache=True)
    rows = []
    for k in range(args.steps + 1):
        weights = torch.load(dump / f"weights-{k}.pt")
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(weights[n])
        worker.sync_weights()
        ours, outs_ours = [], []
        for prompts in val_loader.iterate_once():
            batch = worker.generate(prompts, greedy_params)
            batch["response_text"] = [tokenizer.decode(i[m.bool()].tolist(), skip_special_tokens=True)
                                      for i, m in zip(batch["responses"], batch["response_mask"])]
            sc, _, _ = reward.score(batch)
            ours += [float(x) for x in sc]
            outs_ours += list(batch["response_text"])
        model.eval()
        model.generation_config = hf_greedy
        tokenizer.padding_side = "left"
        hf, outs_hf = [], []
        with torch.no_grad():
            for i in range(0, len(texts), 50):
                enc = tokenizer(texts[i : i + 50], return_tensors="pt", padding=True, add_special_tokens=False)
                gen = model.generate(**enc)
                o = tokenizer.batch_decode(gen[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
                hf += [score(solution_str=x, ground_truth=g, method="flexible")["score"] for x, g in zip(o, golds[i : i + 50])]
                outs_hf += o
        model.train()
        row = {"step": k, "accuracy_rlcore_validation": sum(x >= 1 - 1e-6 for x in ours) / len(ours),
               "accuracy_hf_generate": sum(hf) / len(hf), "items": len(hf),
               "different_outputs": sum(a.strip() != b.strip() for a, b in zip(outs_ours, outs_hf))}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return {"seed": args.seed, "weights": "TRL's after each step (record)", "steps": rows}


def _norm(d: dict) -> float:
    return math.sqrt(sum(float(v.double().pow(2).sum()) for v in d.values()))


def _vector_compare(name: str, a: dict, b: dict) -> dict:
    """Norms, cosine and relative difference of two parameter-shaped dicts, and the parameter that differs most."""
    keys = sorted(set(a) & set(b))
    dot = sum(float((a[k].double() * b[k].double()).sum()) for k in keys)
    na, nb = _norm({k: a[k] for k in keys}), _norm({k: b[k] for k in keys})
    diff = _norm({k: a[k] - b[k] for k in keys})
    worst = max(keys, key=lambda k: float((a[k] - b[k]).double().norm()) / max(float(b[k].double().norm()), 1e-30))
    return {f"{name}_norm_rlcore": na, f"{name}_norm_trl": nb, f"{name}_cosine": dot / max(na * nb, 1e-300),
            f"{name}_rel_diff": diff / max(nb, 1e-300), f"{name}_worst_param": worst,
            f"{name}_worst_param_rel_diff": float((a[worst] - b[worst]).double().norm()) / max(float(b[worst].double().norm()), 1e-30),
            f"{name}_only_in_one": sorted(set(a) ^ set(b))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("record", "replay", "evalcheck"):
        p = sub.add_parser(name)
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--steps", type=int, default=5)
        p.add_argument("--work", type=Path, default=Path("/tmp/vs_trl_cpu"))
        p.add_argument("--dump", type=Path, default=Path("/tmp/vs_trl_update"))
        if name != "record":
            p.add_argument("--out", type=Path, help="write the comparison as JSON")
        if name == "replay":
            p.add_argument("--prepare-only", action="store_true", help="only write the data files record needs")
    args = ap.parse_args(argv)
    if args.cmd == "record":
        record(args)
        return 0
    report = replay(args) if args.cmd == "replay" else evalcheck(args)
    if args.out and report:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
