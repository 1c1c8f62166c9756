#!/usr/bin/env bash
# Train the three bundled models at once on one CUDA GPU, each inside a wall-clock budget:
#
#   - SDAR version 3: version 2's weights (assets/model at the commit that ships version 2) trained on
#     chains, arith and team, block lengths up to 32, 512 positions;
#   - Fast-dLLM v2: stage 1 a plain causal LM on the task suite, stage 2 Fast-dLLM v2's block-diffusion
#     adaptation of it (40% / 60% of the budget);
#   - LLaDA2.x: LLaDA2's block-diffusion objective with token-to-token editing.
#
# Each run fixes its step count after its first 100 steps from the speed it measured
# (`--time-budget`; the number lands in the checkpoint's train_config.json, where `--steps N`
# reproduces the run without a budget on any machine) and builds its batches in worker processes
# (`--loader-workers`), since on a GPU drawing a batch in Python takes as long as the step.
#
#   scripts/train_gpu.sh   # PYTHON=... the interpreter, RUNS=... the output folder, BUDGET=seconds per model,
#                          # DEVICE=... the torch device (default cuda)
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
runs=${RUNS:-runs}
budget=${BUDGET:-450}
mix=(--family-weights chains=0.5,arith=0.2,team=0.3 --batch-by-family --max-positions 512)
blocks=(--block-lengths 1,2,4,8,16,32 --block-weights 0.25,0.05,0.15,0.15,0.2,0.2)
gpu=(--device "${DEVICE:-cuda}" --loader-workers 3 --steps 100000 --checkpoint-every 500 --eval-every 0)
mkdir -p "$runs"

sdar() {
  "$python" -m s2d2.training.train --out "$runs/bundled-v3-gpu" --init-from assets/model "${mix[@]}" "${blocks[@]}" \
    --batch-size 64 --lr 1e-3 --warmup 100 --min-lr 2e-5 --seed 7 --time-budget "$budget" "${gpu[@]}"
}

fastdllm() {
  "$python" -m s2d2.training.train --family fastdllm --objective causal --out "$runs/fastdllm-ar" \
    --tokenizer-from assets/model "${mix[@]}" --batch-size 64 --lr 2e-3 --warmup 200 --min-lr 1e-4 --seed 11 \
    --time-budget "$((budget * 2 / 5))" "${gpu[@]}"
  "$python" -m s2d2.training.train --family fastdllm --out "$runs/fastdllm" --init-from "$runs/fastdllm-ar/checkpoint" \
    "${mix[@]}" --bd-size 32 --batch-size 32 --lr 1e-3 --warmup 100 --min-lr 5e-5 --causal-context 0.5 --seed 12 \
    --time-budget "$((budget * 3 / 5 - 15))" "${gpu[@]}"
}

llada2() {
  "$python" -m s2d2.training.train --family llada2 --out "$runs/llada2" --tokenizer-from assets/model "${mix[@]}" \
    "${blocks[@]}" --edit-rate 0.1 --batch-size 32 --lr 2e-3 --warmup 200 --min-lr 1e-4 --seed 13 \
    --time-budget "$budget" "${gpu[@]}"
}

sdar >"$runs/sdar.log" 2>&1 &
fastdllm >"$runs/fastdllm.log" 2>&1 &
llada2 >"$runs/llada2.log" 2>&1 &
status=0
for job in $(jobs -p); do wait "$job" || status=1; done
for name in sdar fastdllm llada2; do
  echo "== $name"
  grep -aE "(model:|done:|time budget|initialised|Traceback|Error)" "$runs/$name.log" || true
done
exit $status
