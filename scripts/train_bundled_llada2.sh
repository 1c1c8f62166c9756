#!/usr/bin/env bash
# Train the bundled LLaDA2.x model (LLaDA2's MoE layout: 6 layers, the first dense, then 8 routed experts
# of which 2 per token plus a shared one; 6.4M parameters, 24 MB fp32) on a CPU with LLaDA2's block-diffusion objective
# plus token-to-token editing (10% of visible answer tokens corrupted; docs/TRAINING.md). Block sizes
# 1 to 32 are mixed as for the SDAR model, so AR decoding (block size 1) works on the same weights.
# Not run to the end on a CPU: the shipped weights (assets/model-llada2) are this recipe run on one GPU by
# scripts/train_gpu.sh, 2,542 steps at batch 32 (its model card says how).
#
# Budget: about 2 hours on two cores. The step time was measured with --threads 1 on a shared machine
# (the other core was training another model), 5 steps at these flags: about 8 s/step (batch 16
# sequences, each run twice with complementary masks). So 850 steps (~115 min); with both cores free
# it should take less.
#
# The run passes --resume: running this script again after an interruption continues from the last
# checkpoint (every 50 steps) instead of starting over. The last step scores AR greedy decoding on 500
# held-out problems per family.
#
#   scripts/train_bundled_llada2.sh   # PYTHON=... the interpreter, RUNS=... the output folder, THREADS=N torch threads
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
runs=${RUNS:-runs}
threads=${THREADS:-0}  # 0: torch's default (every core)

"$python" -m s2d2.training.train --family llada2 --out "$runs/llada2" --tokenizer-from assets/model \
  --family-weights chains=0.55,arith=0.2,team=0.25 --batch-by-family --max-positions 512 \
  --block-lengths 1,2,4,8,16,32 --block-weights 0.25,0.05,0.15,0.15,0.2,0.2 --edit-rate 0.1 \
  --steps 850 --batch-size 16 --lr 2e-3 --warmup 100 --min-lr 1e-4 --seed 13 \
  --checkpoint-every 50 --eval-every 250 --eval-problems 30 --threads "$threads" --resume

"$python" -m s2d2.study.evaluate --model "$runs/llada2/checkpoint" --problems 500 --methods AR
