"""Start an SGLang server on the CPU with a dLLM algorithm, wait for it, send it token ids, stop it.

Used by the tests and the benchmark; the command it runs is the CPU recipe of
docs/SERVING.md. Requests go to ``/generate`` with token ids (the server skips
its tokenizer): what comes back is the output token ids.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def ships_config_code(model: str) -> bool:
    """Whether the checkpoint names a config class of its own in ``auto_map`` (an LLaDA2 export does:
    transformers has no ``llada2_moe``), which SGLang reads only under ``--trust-remote-code``."""
    config = Path(model) / "config.json"
    return config.is_file() and "AutoConfig" in (json.loads(config.read_text()).get("auto_map") or {})


KV_TOKENS = 65536


def launch_command(
    python: str, model: str, algorithm: str, config: str | None, port: int, max_running: int
) -> list[str]:
    """SGLang's launch on a CPU: plain PyTorch attention, no CUDA graphs, float32, token ids in and out; the
    checkpoint's own config class is trusted where it ships one (:func:`ships_config_code`).

    On a CPU SGLang sizes its KV pool from the machine's free memory measured before and after loading the
    weights, and refuses to start when other processes took more than the static fraction in between (two
    launches at once did, with 0.1): a fraction of 0.3 tolerates that, and the pool is capped at
    ``KV_TOKENS`` tokens, far more than these servers hold at once. ``--sleep-on-idle``: without it an idle
    scheduler polls its sockets in a busy loop, one whole core per server (measured with ``top``: 107% of a
    core while no request was in flight, 0% with it), which slows every other process on the machine."""
    command = [python, "-m", "sglang.launch_server", "--model-path", model, "--device", "cpu",
               "--attention-backend", "torch_native", "--disable-cuda-graph", "--skip-tokenizer-init",
               "--mem-fraction-static", "0.3", "--max-total-tokens", str(KV_TOKENS), "--dtype", "float32",
               "--sleep-on-idle", "--host", "127.0.0.1", "--port", str(port),
               "--dllm-algorithm", algorithm, "--max-running-requests", str(max_running)]  # fmt: skip
    command += ["--trust-remote-code"] if ships_config_code(model) else []
    return command + (["--dllm-algorithm-config", config] if config else [])


class SGLangServer:
    """One server process; ``log`` keeps everything it prints; ``extra_args`` go to the launch as they are
    (``--no-dllm-fdfo``: SGLang's synchronous dLLM scheduling instead of first-done-first-out)."""

    def __init__(
        self,
        python: str,
        model: str,
        algorithm: str,
        config: str | None,
        log: Path,
        max_running: int = 16,
        environment: dict | None = None,
        extra_args: tuple[str, ...] = (),
    ):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = Path(log)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "SGLANG_PLUGINS": "s2d2", **(environment or {})}
        with self.log.open("w") as sink:
            self.process = subprocess.Popen(
                launch_command(python, model, algorithm, config, self.port, max_running) + list(extra_args),
                stdout=sink,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_healthy(self, timeout: float = 600.0) -> None:
        """Poll ``/health`` until it answers 200; fail at once if the process ends, with its log's tail."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the SGLang server exited ({self.process.returncode}):\n{self.log_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=5) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(1.0)
        raise TimeoutError(f"the SGLang server was not healthy within {timeout:.0f} s:\n{self.log_text()[-3000:]}")

    def exit_code(self, timeout: float) -> int:
        """Wait for a server that should refuse to start; its exit status."""
        return self.process.wait(timeout=timeout)

    def generate(self, input_ids: list[int], sampling_params: dict, timeout: float = 600.0) -> list[int]:
        """The output token ids of one request."""
        return self.generate_with_id(input_ids, sampling_params, timeout)[0]

    def generate_with_id(self, input_ids: list[int], sampling_params: dict, timeout: float = 600.0):
        """``(output token ids, request id)`` of one request: the id names its served trace (``trace_dir``)."""
        body = json.dumps({"input_ids": input_ids, "sampling_params": sampling_params}).encode()
        request = urllib.request.Request(f"{self.url}/generate", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answer = json.loads(response.read())
        return answer["output_ids"], answer["meta_info"]["id"]

    def generate_many(self, prompts: list[list[int]], params: list[dict], concurrency: int) -> list[list[int]]:
        """Every request sent with ``concurrency`` in flight at once (so they share batches); outputs in order."""
        with ThreadPoolExecutor(concurrency) as pool:
            return list(pool.map(self.generate, prompts, params))

    def flush_cache(self) -> None:
        """Empty SGLang's prefix cache (it keeps the KV of every prompt block it has seen), so that a measured
        pass over prompts served before starts as the first one did."""
        request = urllib.request.Request(f"{self.url}/flush_cache", b"", method="POST")
        try:
            urllib.request.urlopen(request, timeout=60).close()
        except urllib.error.HTTPError as refusal:  # SGLang answers 400 while requests are running
            raise RuntimeError(f"SGLang did not flush its cache: {refusal.read().decode()}") from None

    def stop(self) -> None:
        """End the server and every process it started, at once.

        SIGKILL to the whole process group: SGLang has no graceful path for a signal. On SIGTERM its launcher
        sees the scheduler die, treats it as a crash and sleeps 5 s "to let GPU activity settle" before it
        cleans up (6.1 s to stop an idle CPU server, measured); a server holds nothing on disk to flush."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def __enter__(self) -> SGLangServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
