#!/usr/bin/env bash
# Stage 3 of the bundled LLaDA2.x model: continue the shipped weights (assets/model-llada2) on a CPU with
# more arithmetic. The GPU runs left it at 45% on arith and 43% on chains with AR greedy decoding, and
# its wrong answers are wrong sums ("20 + 7 = 26"), not wrong formats: it had seen too few additions.
# Same objective as before (LLaDA2's block diffusion plus token-to-token editing, block sizes 1 to 32);
# the data mix leans on arith, whose short sequences make the cheapest steps, and keeps chains and team
# so neither is forgotten. A fresh optimizer and a short cosine schedule at a lower peak than stage 1.
#
# STEPS is fixed (not a time budget) so the run is the same on any machine; the step time on two CPU
# cores was measured before choosing it (the model card says how long it took). --resume: running the
# script again after an interruption continues from the last checkpoint (every 50 steps).
#
#   scripts/continue_llada2_arith.sh   # PYTHON=... the interpreter, RUNS=... the output folder, STEPS=...
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
runs=${RUNS:-runs}
steps=${STEPS:-900}

"$python" -m s2d2.training.train --family llada2 --init-from assets/model-llada2 --out "$runs/llada2-arith" \
  --family-weights arith=0.5,chains=0.35,team=0.15 --batch-by-family --max-positions 512 \
  --block-lengths 1,2,4,8,16,32 --block-weights 0.25,0.05,0.15,0.15,0.2,0.2 --edit-rate 0.1 \
  --steps "$steps" --batch-size 32 --lr 6e-4 --warmup 30 --min-lr 3e-5 --seed 14 \
  --checkpoint-every 50 --eval-every 0 --threads 2 --resume

"$python" -m s2d2.study.evaluate --model "$runs/llada2-arith/checkpoint" --problems 60 --methods AR \
  --families arith,team,chains
