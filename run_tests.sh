#!/usr/bin/env bash
# The test command: sets up what the tests need on a fresh machine, then runs them.
#   ./run_tests.sh            (extra arguments go to pytest)
set -euo pipefail
cd "$(dirname "$0")"

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.requirements.sha
want=$(cat requirements.txt requirements-dev.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -r requirements.txt -r requirements-dev.txt
  # The project itself, editable: the `s2d2` command and the lm-eval entry point (tests/test_package.py).
  .venv/bin/python -m pip install --quiet --no-deps -e .
  echo "$want" > "$stamp"
fi

# SGLang's own environment for the plugin's live-server tests (tests/test_sglang.py): SGLang pins its own torch
# and transformers, so it cannot share .venv. It is the user's recipe (docs/SERVING.md): the project's sglang extra.
sglang_stamp=.venv-sglang/.requirements.sha
sglang_want=$(cat pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat "$sglang_stamp" 2>/dev/null)" != "$sglang_want" ]; then
  [ -x .venv-sglang/bin/python ] || python3 -m venv .venv-sglang
  .venv-sglang/bin/python -m pip install --quiet -e ".[sglang]"
  echo "$sglang_want" > "$sglang_stamp"
fi

# Debian's Chromium for the real-browser test of the dashboard.
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then apt=(apt-get); else apt=(sudo apt-get); fi
  "${apt[@]}" update -qq && DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -qq chromium >/dev/null
fi

export HF_HUB_OFFLINE=1 GRADIO_ANALYTICS_ENABLED=False TOKENIZERS_PARALLELISM=false
# One worker per core, each module whole on one worker (tests/conftest.py); -n 0 runs in this process.
exec .venv/bin/python -m pytest -q -n auto --dist loadfile "$@"
