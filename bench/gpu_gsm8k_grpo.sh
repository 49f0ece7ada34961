#!/usr/bin/env bash
# 5 GRPO steps of examples/gsm8k_grpo.yaml with a Qwen2.5-0.5B-shaped model (random weights) on one GPU.
# Needs: .gpu/qwen05b (config.json of Qwen2.5-0.5B's shape + a tokenizer), .gpu/gsm8k/{train,test}.parquet
# (from `rlcore data gsm8k`), rl-core and the plugins installed. Writes the timing table to $1;
# further arguments are extra key=value overrides.
set -euo pipefail
out=${1:-bench/results/gsm8k_grpo_h100.md}
shift || true
run=${RUN_DIR:-/tmp/gsm8k_grpo_bench}
rm -rf "$run"
python3 -m rl_core train examples/gsm8k_grpo.yaml --no-progress \
  model.path=.gpu/qwen05b model.random_init=true \
  "data.train_files=[.gpu/gsm8k/train.parquet]" "data.val_files=[.gpu/gsm8k/test.parquet]" \
  trainer.total_training_steps=5 trainer.test_freq=-1 trainer.save_freq=-1 trainer.val_before_train=false \
  trainer.output_dir="$run" "trainer.loggers=[console,jsonl]" "$@"
python3 bench/timing_table.py "$run/metrics.jsonl" > "$out"
cp "$run/metrics.jsonl" "${out%.md}.metrics.jsonl"
cat "$out"
