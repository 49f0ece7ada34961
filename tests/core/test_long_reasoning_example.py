"""examples/long_reasoning.yaml passes `rlcore check` (with a local model folder and data), and the memory estimate
budgets the rollout KV cache by its token count (16k-token trajectories) and the update by the token budget."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHAPE_1_5B = "{hidden_size: 1536, intermediate_size: 8960, num_hidden_layers: 28, num_attention_heads: 12, num_key_value_heads: 2, vocab_size: 151936, max_position_embeddings: 32768}"


def test_long_reasoning_example_checks_and_budgets_16k_tokens(tmp_path):
    from rl_core_testing.tiny_model import make_tiny_model_dir

    model = make_tiny_model_dir(tmp_path / "model", "qwen2")  # its tokenizer; the 1.5B shape comes from override_config
    data = ROOT / "tests" / "fixtures" / "data" / "tiny_gsm8k.jsonl"
    out = subprocess.run(
        [sys.executable, "-m", "rl_core", "check", str(ROOT / "examples" / "long_reasoning.yaml"), f"model.path={model}",
         f"data.train_files=[{data}]", f"data.val_files=[{data}]", f"model.override_config={SHAPE_1_5B}", "--skip-device-check"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = out.stdout
    assert "rollout KV cache: 32 sequences x 16,896 tokens" in text, text
    assert "update activations: 34,000 tokens per micro-batch per rank (actor.ppo_max_token_len_per_gpu)" in text, text
    assert "1544M parameters" in text
    assert "up to 34,000 tokens (actor.use_dynamic_bsz" in text, text  # the sizes table names the token budget, not 4 sequences
