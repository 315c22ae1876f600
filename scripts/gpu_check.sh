#!/usr/bin/env bash
# One prepared check for a lent GPU machine: torch, transformers and peft only (no textual, sqlite-utils or
# vLLM, no network; the repository is all that is brought along). Builds random-initialised models of
# SmolLM2-135M's shape and of a 1.5B-class shape there, runs 5 GRPO steps on each (HF rollouts, verifier,
# LoRA update, bf16 base weights), and reports step time, rollout tokens/s and peak CUDA memory.
# Results land in $OUT (default ./gpu_check) as JSON; the table is printed at the end.
#
#   scripts/gpu_check.sh            on the GPU machine (about 3-6 minutes expected; not yet measured)
#   scripts/gpu_check.sh --smoke    the same code on a tiny model on the CPU, 2 steps (tests/project/test_gpu_check.py)
#
# Where trl and datasets import, each shape also runs the same 5 steps through TRL's GRPOTrainer (same model,
# batch, LoRA, verifier). A bare machine lacks them: carry their wheels and the ones the image lacks
# (`pip download trl==1.16.0 datasets -d wheels`, then drop what the image has; pyarrow is the big one: its
# cp311 wheel is 55 MB of the 64 MiB, trl 0.9 MB, datasets 0.6 MB) and run
# `pip install --no-index --find-links wheels trl datasets` first. The JSON is written after every model, so a
# run cut off by the time limit keeps what it measured.
# If a vLLM venv exists (.venv-vllm, `make test-vllm` builds one when online) the HF-vs-vLLM rollout
# comparison runs after it.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_check}
PY=${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
mkdir -p "$OUT"
if [ "${1:-}" = "--smoke" ]; then
  exec "$PY" bench/gpu_check.py --smoke --out "$OUT/grpo_smoke.json"
fi
nvidia-smi --query-gpu=name,memory.total --format=csv | tee "$OUT/gpu.txt" || echo "no nvidia-smi" | tee "$OUT/gpu.txt"
"$PY" -c "import torch, transformers, peft; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), \
'transformers', transformers.__version__, 'peft', peft.__version__)" | tee "$OUT/versions.txt"
timeout 600 "$PY" bench/gpu_check.py --models smollm2-135m,1.5b --steps 5 --out "$OUT/grpo_random_init.json" 2>&1 \
  | grep -v Warning | tail -20
if [ -x .venv-vllm/bin/python ]; then
  timeout 300 .venv-vllm/bin/python bench/rollout_hf_vs_vllm.py --steps 3 --modes hf,vllm-weights \
    --out "$OUT/rollout_hf_vs_vllm.json" 2>&1 | tail -20
fi
