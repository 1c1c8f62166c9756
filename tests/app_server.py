"""Start ``python app.py`` on a port held for it, for the API and browser tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class HeldPort:
    """A port no one else is handed until released, for a server that binds it with ``SO_REUSEADDR``.

    Releasing a probed port before the server binds it lets another process
    (a parallel test, another app) take it in between. Here the probe stays
    bound, with ``SO_REUSEADDR`` and never listening: the server (uvicorn under
    Gradio, torch's TCPStore under accelerate, both binding with ``SO_REUSEADDR``)
    can still bind and listen on it, while the kernel hands the port to no
    other ``bind``.
    """

    def __init__(self):
        self._socket = socket.socket()
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.port: int = self._socket.getsockname()[1]

    def release(self) -> None:
        self._socket.close()

    def __enter__(self) -> int:
        return self.port

    def __exit__(self, *exc) -> None:
        self.release()


class AppServer:
    """The real app in a subprocess, exactly as a user starts it."""

    def __init__(self, log_path: Path):
        self._hold = HeldPort()
        self.port = self._hold.port
        self.url = f"http://127.0.0.1:{self.port}/"
        env = {
            **os.environ,
            "GRADIO_SERVER_PORT": str(self.port),
            "GRADIO_SERVER_NAME": "127.0.0.1",
            "GRADIO_ANALYTICS_ENABLED": "False",
            "HF_HUB_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
            "S2D2_LOG_LEVEL": "DEBUG",  # a line per forward: forward_starts() reads them
        }
        self.log = open(log_path, "w")
        self.process = subprocess.Popen(
            [sys.executable, "app.py"], cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT
        )

    def wait_ready(self, timeout: float = 120) -> None:
        """Until the app answers on its port; the port is released to it then (it listens there by now)."""
        try:
            self._answer_within(timeout)
        finally:
            self._hold.release()

    def _answer_within(self, timeout: float) -> None:
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

    def forward_starts(self) -> list[float]:
        """When each model forward the app has run so far began (``time.time()``), from its log lines."""
        starts = []
        for line in Path(self.log.name).read_text(errors="replace").splitlines():
            created, _, rest = line.partition(" s2d2.forwards forward ")
            if rest:
                starts.append(float(created) - float(rest.rsplit(" ", 1)[1].rstrip("s")))
        return starts

    def stop(self) -> None:
        self._hold.release()
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()
