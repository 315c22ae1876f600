#!/usr/bin/env bash
# One prepared check for a lent GPU machine (no network there; about 15 minutes of device time in all):
# a short GRPO run of the demo recipe with rollout: hf and with rollout: vllm, same seed, and the table
# of step time, rollout tokens/s and reward. Results land in $OUT (or ./gpu_check) as JSON.
# Needs a venv with vllm and the package (`make test-vllm` on the GPU machine builds one when online).
set -euo pipefail
OUT=${OUT:-gpu_check}
mkdir -p "$OUT"
PY=${PY:-.venv-vllm/bin/python}
nvidia-smi --query-gpu=name,memory.total --format=csv | tee "$OUT/gpu.txt"
timeout 780 "$PY" bench/rollout_hf_vs_vllm.py --steps 3 --modes hf,vllm-weights --out "$OUT/rollout_hf_vs_vllm.json" \
  2>&1 | tail -20
