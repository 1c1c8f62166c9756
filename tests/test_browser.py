"""The dashboard in a real browser (Debian's Chromium driven by Playwright).

Opens the page, runs an example, checks that every plot rendered and that the
trajectory's slider replays the decoding, times click → all plots rendered,
and saves screenshots to ``out/screenshots/`` for a human to look at.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "out" / "screenshots"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
]  # fmt: skip
PLOT = "#{id} .js-plotly-plot"


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.fail("Debian's chromium is not installed: ./run_tests.sh installs it (apt-get install chromium)")
    return path


@pytest.fixture(scope="module")
def page(app_url):
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        page.goto(app_url, wait_until="networkidle")
        yield page
        browser.close()


def plot_data(page, elem_id: str):
    return page.evaluate(f"() => document.querySelector('{PLOT.format(id=elem_id)}').data.map(t => t.z || t.y)")


def wait_plot(page, elem_id: str, timeout: float = 60_000) -> None:
    page.wait_for_function(
        f"() => {{ const el = document.querySelector('{PLOT.format(id=elem_id)}'); return el && el.data && el.data.length > 0; }}",
        timeout=timeout,
    )


def test_run_an_example_and_replay_the_trajectory(page):
    examples = json.loads((ROOT / "assets" / "examples.json").read_text())
    from playwright.sync_api import expect

    team = next(e for e in examples if e.startswith("Pick two"))
    page.get_by_text(team[:40]).first.click()
    expect(page.locator("#prompt textarea")).to_have_value(team, timeout=15_000)
    # The page opens on a saved comparison, whose note is in the status line; a
    # finished run empties it (while a run is pending, the progress overlay fills it).
    expect(page.locator("#status")).to_contain_text("saved run", timeout=15_000)
    page.screenshot(path=str(SHOTS / "01-start.png"), full_page=True)

    start = time.perf_counter()
    page.click("#run")
    page.wait_for_function("() => document.querySelector('#status').innerText.trim() === ''", timeout=60_000)
    expect(page.locator("#text-s2d2")).to_contain_text("team", timeout=5_000)
    wait_plot(page, "plot-trajectory-s2d2")
    wait_plot(page, "plot-trajectory-baseline")
    rendered = {"trajectory": time.perf_counter() - start}
    for tab, elem_id in (("Residual energy", "plot-energy"), ("Router", "plot-router"), ("Cost", "plot-cost")):
        page.get_by_role("tab", name=tab).click()
        wait_plot(page, elem_id)
        rendered[tab] = time.perf_counter() - start
    page.get_by_role("tab", name="Table").click()
    page.wait_for_selector("#stats-table table", timeout=30_000)
    total = time.perf_counter() - start
    (ROOT / "out").mkdir(exist_ok=True)
    (ROOT / "out" / "browser_timing.json").write_text(
        json.dumps({"click_to_all_plots_s": total, "steps": rendered}, indent=2)
    )
    print(f"\nclick → all plots rendered: {total:.2f}s ({rendered})")
    assert page.locator("#text-s2d2 .tok").count() > 5
    page.screenshot(path=str(SHOTS / "02-table.png"), full_page=True)

    page.get_by_role("tab", name="Trajectory").click()
    wait_plot(page, "plot-trajectory-s2d2")
    page.screenshot(path=str(SHOTS / "03-results.png"), full_page=True)
    before = plot_data(page, "plot-trajectory-s2d2")[0]
    rail = page.locator("#plot-trajectory-s2d2 .slider-rail-touch-rect").first
    rail.scroll_into_view_if_needed()
    box = rail.bounding_box()
    page.mouse.click(box["x"] + 3, box["y"] + box["height"] / 2)
    page.wait_for_timeout(500)
    after = plot_data(page, "plot-trajectory-s2d2")[0]
    assert after != before, "moving the slider to the first step must change the sequence strip"
    page.locator("#plot-trajectory-s2d2").screenshot(path=str(SHOTS / "04-trajectory-step0.png"))
    for tab, name in (("Residual energy", "05-energy"), ("Router", "06-router"), ("Cost", "07-cost")):
        page.get_by_role("tab", name=tab).click()
        page.wait_for_timeout(300)
        page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def test_bad_input_shows_a_message_in_the_page(page):
    page.get_by_role("tab", name="Compare").click()
    page.locator("#prompt textarea").fill("")
    page.click("#run")
    page.wait_for_selector("#status .status-error", timeout=30_000)
    assert "empty" in page.locator("#status").inner_text()
    page.screenshot(path=str(SHOTS / "08-error.png"))


def test_how_it_works_has_the_diagram(page):
    page.get_by_role("tab", name="How it works").click()
    page.wait_for_selector(".how svg", timeout=10_000)
    assert page.locator(".how svg rect").count() >= 24
    page.screenshot(path=str(SHOTS / "09-how.png"), full_page=True)
