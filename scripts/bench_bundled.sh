#!/usr/bin/env bash
# The benchmark grids of the three bundled models on this machine's CPU cores, one process per core:
#   SDAR (Table 1, Figure 3 over B, Figure 2)  -> docs/results/bundled
#   Fast-dLLM v2 (Table 2, Figure 3 over sub-block sizes) -> docs/results/bundled-fast-dllm-v2
#   LLaDA2.x (Table 3, Figure 3 over B)         -> docs/results/bundled-llada2
# Each grid first picks the dynamic baseline's τ per block size on a development split (--tune-dynamic).
# Each runs the paper-sized 500 problems per family: SDAR 72, Fast-dLLM v2 46 and LLaDA2 107 minutes on two
# cores. Nothing else may run meanwhile: the tables report wall time. s2d2.study.bench writes each table.md;
# python -m s2d2.study.report DIR rebuilds it from runs.csv and summary.json.
#
#   scripts/bench_bundled.sh   # PROBLEMS=... SDAR problems per family, FAST_PROBLEMS=... Fast-dLLM v2's,
#                              # LLADA2_PROBLEMS=... LLaDA2's
#   OUT=runs/grid-check scripts/bench_bundled.sh   # elsewhere, e.g. to compare a code change with
#                                                  # scripts/compare_runs.py docs/results runs/grid-check
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
launch=("$python" -m accelerate.commands.launch --multi_gpu --num_processes "${PROCESSES:-2}" --num_machines 1
  --mixed_precision no --dynamo_backend no -m s2d2.study.bench --families arith,team,chains --tune-dynamic)
problems=${PROBLEMS:-500}
fast_problems=${FAST_PROBLEMS:-500}
llada2_problems=${LLADA2_PROBLEMS:-500}
out=${OUT:-docs/results}

"${launch[@]}" --model bundled --grid paper --problems "$problems" --dev-problems 30 --out "$out/bundled"
"${launch[@]}" --model bundled-fast-dllm-v2 --grid fastdllm --problems "$fast_problems" --dev-problems 20 \
  --out "$out/bundled-fast-dllm-v2"
"${launch[@]}" --model bundled-llada2 --grid llada2 --problems "$llada2_problems" --dev-problems 20 \
  --out "$out/bundled-llada2"
for grid in bundled bundled-fast-dllm-v2 bundled-llada2; do
  "$python" -m components.benchmarks "$out/$grid"
done
