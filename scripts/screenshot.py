"""The README's picture: the dashboard as a visitor first sees it, on the saved comparison it opens on.

    .venv/bin/python scripts/screenshot.py                 # -> docs/screenshot.png
    .venv/bin/python scripts/screenshot.py --out page.png --width 1440 --top '#title'

Starts ``app.py`` on a free local port (bundled model, offline), opens it in headless Chromium
(Debian's ``chromium``, as the browser test uses) through Playwright, waits until the opening
comparison's trajectories are drawn and saves the page from ``--top`` (the comparison's headline) to
``--bottom`` (S2D2's trajectory).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARGIN = 12  # pixels kept around the clipped region
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_serving(url: str, server: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"app.py exited with status {server.returncode}")
        try:
            urllib.request.urlopen(url, timeout=5)
            return
        except OSError:
            time.sleep(1)
    raise SystemExit(f"app.py did not answer at {url} within {timeout:.0f} s")


def take(url: str, out: Path, width: int, top: str, bottom: str) -> None:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        raise SystemExit("Debian's chromium is not installed (apt-get install chromium)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": width, "height": 900})
        page.goto(url, wait_until="networkidle")
        page.wait_for_selector(f"{bottom} .js-plotly-plot", timeout=120_000)
        page.wait_for_timeout(1500)  # let Plotly finish its first layout pass
        first = page.locator(top).bounding_box()
        last = page.locator(bottom).bounding_box()
        y = max(first["y"] - MARGIN, 0)
        clip = {"x": 0, "y": y, "width": width, "height": last["y"] + last["height"] + MARGIN - y}
        page.screenshot(path=str(out), full_page=True, clip=clip)
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="scripts/screenshot.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshot.png")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--top", default="#headline", help="the element the picture starts at")
    parser.add_argument("--bottom", default="#plot-trajectory-s2d2", help="the element the picture ends with")
    args = parser.parse_args()
    port = free_port()
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    server = subprocess.Popen([sys.executable, str(ROOT / "app.py")], cwd=ROOT, env=env)
    try:
        url = f"http://127.0.0.1:{port}/"
        wait_until_serving(url, server)
        take(url, args.out, args.width, args.top, args.bottom)
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(f"{args.out} ({args.out.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()
