#!/usr/bin/env bash
# Train the bundled Fast-dLLM v2 model (Qwen2 layout, 4.8M parameters, 18 MB fp32) on a CPU the way
# the real one is made: stage 1 a plain causal LM on the task suite, stage 2 Fast-dLLM v2's
# block-diffusion adaptation (complementary block masks, token shift, 32-token blocks; docs/TRAINING.md).
# Not run to the end on a CPU: the shipped weights (assets/model-fast-dllm-v2) are this recipe run on one GPU
# by scripts/train_gpu.sh, in 3,945 + 3,817 steps at batch 64 + 32.
#
# Budget: about 2 hours on two cores. Step times were measured with --threads 1 on a shared machine
# (the other core was training another model), 5 steps each at these flags: stage 1 about 2.2 s/step
# (batch 32), stage 2 about 8 s/step (batch 16 sequences, each run twice with complementary masks;
# chains batches are the slow ones). So stage 1 is 1000 steps (~40 min) and stage 2 600 steps
# (~80 min); with both cores free it should take less.
#
# Both stages pass --resume: running this script again after an interruption continues from the last
# checkpoint (every 50 steps) instead of starting over, and a finished stage is skipped. The last step
# scores AR greedy decoding on 500 held-out problems per family.
#
#   scripts/train_bundled_fastdllm.sh   # PYTHON=... the interpreter, RUNS=... the output folder, THREADS=N torch threads
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
runs=${RUNS:-runs}
threads=${THREADS:-0}  # 0: torch's default (every core)
data=(--family-weights chains=0.55,arith=0.2,team=0.25 --batch-by-family --max-positions 512 --bd-size 32)

# Stage 1: the autoregressive model Fast-dLLM v2 adapts (the real one starts from Qwen2.5-Instruct).
"$python" -m s2d2.training.train --family fastdllm --objective causal --out "$runs/fastdllm-ar" \
  --tokenizer-from assets/model "${data[@]}" --steps 1000 --batch-size 32 --lr 2e-3 --warmup 100 \
  --min-lr 1e-4 --seed 11 --checkpoint-every 50 --eval-every 250 --eval-problems 30 --threads "$threads" --resume

# Stage 2: the block-diffusion adaptation, from stage 1's weights and tokenizer.
"$python" -m s2d2.training.train --family fastdllm --out "$runs/fastdllm" --init-from "$runs/fastdllm-ar/checkpoint" \
  "${data[@]}" --steps 600 --batch-size 16 --lr 1e-3 --warmup 50 --min-lr 5e-5 --causal-context 0.5 \
  --seed 12 --checkpoint-every 50 --eval-every 200 --eval-problems 30 --threads "$threads" --resume

"$python" -m s2d2.study.evaluate --model "$runs/fastdllm/checkpoint" --problems 500 --methods AR
