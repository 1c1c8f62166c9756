"""``accelerate launch`` with 2 CPU processes, for the sharded benchmark and lm-eval tests."""

from __future__ import annotations

import subprocess
import sys

from app_server import ROOT, HeldPort


def launch_two_processes(module_args: list[str], env: dict[str, str]) -> None:
    """Run ``python -m <module_args>`` under ``accelerate launch`` on a rendezvous port held for the launch (the
    default 29500 may still be held by an earlier launch), failing with the launcher's own error output, not a
    bare exit code."""
    with HeldPort() as port:
        command = [
            sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
            "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
            "--main_process_port", str(port), "-m", *module_args,
        ]  # fmt: skip
        done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"accelerate launch exited {done.returncode}:\n{done.stderr[-4000:]}"
