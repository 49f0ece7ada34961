"""TRL's GRPOTrainer on the reference workload, for side-by-side step times (bench/reference/run_gpu.sh).

    python bench/reference/trl_grpo.py --model .gpu/qwen05b-gpt2 --data .gpu/gsm8k/train.parquet \
        --steps 10 --gradient-checkpointing 1 --out $OUT/trl_gc.json
    python bench/reference/trl_grpo.py ... --tiny --device cpu --steps 2      # CPU smoke run

Same workload as bench/reference/grpo_reference.yaml: the same model folder (random bf16 weights from its
config), the same tokenizer and prompts (GSM8K rows whose chat-templated prompt has at most 128 tokens),
8 prompts x 8 samples per step, 256 new tokens at temperature 1, beta 0, one optimizer step per
generation, lr 1e-6; HF generation (no vLLM). The reward is a coin per response, fixed by its text
(``coin_reward.py``, the same function rl-core's side scores with), so both sides run the whole update. Writes per-step wall times (CUDA
synchronised) and the peak memory to ``--out`` as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def prompts(data: str, tokenizer, max_len: int, limit: int) -> list[list[dict]]:
    import pyarrow.parquet as pq

    rows = pq.read_table(data, columns=["prompt"]).to_pylist()
    out = []
    for row in rows:
        msgs = [dict(m) for m in row["prompt"]]
        if len(tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)) <= max_len:
            out.append(msgs)
        if len(out) >= limit:
            break
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--gradient-checkpointing", type=int, default=1)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-prompt", type=int, default=128)
    ap.add_argument("--max-new", type=int, default=256)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="a 2-layer model of the same vocabulary (CPU smoke run)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--lora-rank", type=int, default=0, help="peft LoRA of this rank, alpha 2x, all linear layers (issue #32's anchor: 32)")
    args = ap.parse_args()

    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    tok = AutoTokenizer.from_pretrained(args.model)
    cfg = AutoConfig.from_pretrained(args.model)
    if args.tiny:
        cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers = 64, 128, 2
        cfg.num_attention_heads, cfg.num_key_value_heads = 4, 2
    torch.manual_seed(0)
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    with torch.device(args.device):  # random weights drawn where the model runs (a 7B model's CPU init takes minutes)
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    data = prompts(args.data, tok, args.max_prompt, args.prompts * (args.steps + 2))
    dataset = Dataset.from_list([{"prompt": p} for p in data])

    class StepTimes(TrainerCallback):
        def __init__(self):
            self.times: list[float] = []
            self._t = 0.0

        def _sync(self):
            if torch.cuda.is_available():
                torch.cuda.synchronize()

        def on_step_begin(self, *a, **k):
            self._sync()
            self._t = time.perf_counter()

        def on_step_end(self, *a, **k):
            self._sync()
            self.times.append(time.perf_counter() - self._t)

    timer = StepTimes()
    config = GRPOConfig(
        output_dir="/tmp/trl_reference",
        per_device_train_batch_size=args.prompts * args.n,
        num_generations=args.n,
        max_completion_length=args.max_new,
        temperature=1.0,
        beta=0.0,
        learning_rate=1e-6,
        num_iterations=1,
        steps_per_generation=1,
        gradient_checkpointing=bool(args.gradient_checkpointing),
        bf16=args.device == "cuda",
        use_cpu=args.device == "cpu",
        max_steps=args.steps,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        shuffle_dataset=False,
        use_vllm=False,
        seed=0,
    )

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from coin_reward import coin  # the reward rl-core's side uses (reward.custom.path in grpo_reference.yaml)

    def reward(completions, **kwargs):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [coin(t) for t in texts]

    peft_config = None
    if args.lora_rank:
        from peft import LoraConfig

        peft_config = LoraConfig(r=args.lora_rank, lora_alpha=2 * args.lora_rank, target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=dataset, processing_class=tok, callbacks=[timer],
                          peft_config=peft_config)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    trainer.train()
    lengths = [h.get("completions/mean_length") for h in trainer.state.log_history if "completions/mean_length" in h]
    result = {
        "trl": trl.__version__,
        "torch": torch.__version__,
        "gradient_checkpointing": bool(args.gradient_checkpointing),
        "lora_rank": args.lora_rank,
        "step_s": timer.times,
        "completion_mean_length": lengths,
        "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
