#!/usr/bin/env bash
# Reproduce version 2 of the bundled model (commit 0c19c62; assets/model is now version 3, scripts/train_gpu.sh)
# on a CPU in about 100 minutes on 2 cores.
#
# Version 2 is version 1's weights (kept in this repository's history at commit 43c3419) trained in
# two more stages on the current team family. Every stage passes --resume, so running this script
# again after an interruption continues from the last checkpoint (every 100 steps) instead of
# starting over, and a finished stage is skipped. The last step scores AR greedy decoding on 500
# held-out problems per family; the result is in runs/bundled-v2/checkpoint.
#
#   scripts/train_bundled.sh            # PYTHON=... to choose the interpreter, RUNS=... the output folder
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
runs=${RUNS:-runs}
v1_commit=43c3419

if [ ! -f "$runs/bundled-v1/model.safetensors" ]; then
  if ! git cat-file -e "$v1_commit^{commit}" 2>/dev/null; then
    echo "error: commit $v1_commit (version 1's weights) is not in this clone; run 'git fetch --unshallow' first" >&2
    exit 1
  fi
  mkdir -p "$runs/bundled-v1"
  git archive "$v1_commit" assets/model | tar -x -C "$runs/bundled-v1" --strip-components=2
fi

# Stage 1: 1,800 steps, 70% team batches, one family per batch (about 64 minutes).
"$python" -m s2d2.training.train --out "$runs/bundled-v2-stage1" --init-from "$runs/bundled-v1" --steps 1800 --lr 1e-3 \
  --warmup 100 --min-lr 5e-5 --family-weights arith=0.3,team=0.7 --batch-by-family \
  --checkpoint-every 100 --eval-every 200 --resume

# Stage 2: 1,000 steps at half the learning rate, 80% team batches, fresh data order (about 36 minutes).
"$python" -m s2d2.training.train --out "$runs/bundled-v2" --init-from "$runs/bundled-v2-stage1/checkpoint" --steps 1000 \
  --lr 5e-4 --warmup 50 --min-lr 2e-5 --family-weights arith=0.2,team=0.8 --batch-by-family --seed 3 \
  --checkpoint-every 100 --eval-every 250 --resume

"$python" -m s2d2.study.evaluate --model "$runs/bundled-v2/checkpoint" --problems 500 --methods AR
