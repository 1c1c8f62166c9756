"""Start ``python app.py`` on a free port for the API and browser tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AppServer:
    """The real app in a subprocess, exactly as a user starts it."""

    def __init__(self, log_path: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        env = {
            **os.environ,
            "GRADIO_SERVER_PORT": str(self.port),
            "GRADIO_SERVER_NAME": "127.0.0.1",
            "GRADIO_ANALYTICS_ENABLED": "False",
            "HF_HUB_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
        }
        self.log = open(log_path, "w")
        self.process = subprocess.Popen(
            [sys.executable, "app.py"], cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT
        )

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"app.py exited with {self.process.returncode}; see {self.log.name}")
            try:
                with urllib.request.urlopen(self.url, timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        raise TimeoutError(f"app.py did not answer on {self.url} within {timeout}s")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()
