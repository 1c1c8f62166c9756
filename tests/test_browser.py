"""The dashboard in a real browser (Debian's Chromium driven by Playwright).

Opens the page, runs an example, checks that the runs stream and every plot
rendered, that ▶ Play animates the trajectory to its last step by itself, that
the narration follows the slider, that the lockstep replay finishes S2D2 before
AR, and that a phone-width page cuts nothing off. Each test gets a fresh page
opened on the saved comparison, and waits for states of the page, never for a
fixed time. Times click → first streamed update and click → all plots rendered
on the browser's clock (printed and saved, not asserted), and saves screenshots
to ``out/screenshots/`` for a human to look at.
"""

from __future__ import annotations

import json
import re
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
def browser():
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser, app_url):
    """A fresh page (its own browser context and app session) opened on the saved comparison, so no test
    depends on what another one left in the page."""
    from playwright.sync_api import expect

    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    page = context.new_page()
    page.goto(app_url, wait_until="networkidle")
    expect(page.locator("#status")).to_contain_text("saved run", timeout=30_000)
    yield page
    context.close()


def plot_data(page, elem_id: str):
    return page.evaluate(f"() => document.querySelector('{PLOT.format(id=elem_id)}').data.map(t => t.z || t.y)")


def wait_plot(page, elem_id: str, timeout: float = 60_000) -> None:
    page.wait_for_function(
        f"() => {{ const el = document.querySelector('{PLOT.format(id=elem_id)}'); return el && el.data && el.data.length > 0; }}",
        timeout=timeout,
    )


def wait_player(page, elem_id: str) -> None:
    """Until the player script has taken the figure now in the plot (its frames added)."""
    page.wait_for_function(
        f"""() => {{ const d = document.querySelector('{PLOT.format(id=elem_id)}');
            return d && d.layout.meta && d._s2d2Meta === d.layout.meta.s2d2
                && ((d._transitionData || {{}})._frames || []).length > 0; }}""",
        timeout=30_000,
    )


def slider_active(page, elem_id: str) -> int:
    return page.evaluate(f"() => document.querySelector('{PLOT.format(id=elem_id)}')._fullLayout.sliders[0].active")


def test_run_an_example_and_replay_the_trajectory(page):
    from playwright.sync_api import expect

    examples = json.loads((ROOT / "assets" / "examples.json").read_text())
    # The page opens on the saved run, its prompt in the box.
    expect(page.locator("#prompt textarea")).to_have_value(examples[0]["prompt"], timeout=15_000)
    expect(page.locator("#status")).to_contain_text("saved run", timeout=15_000)
    page.screenshot(path=str(SHOTS / "01-start.png"), full_page=True)

    team = next(e for e in examples if e["prompt"].startswith("Pick three"))
    page.get_by_text(team["prompt"][:40]).first.click()
    expect(page.locator("#prompt textarea")).to_have_value(team["prompt"], timeout=15_000)
    # Every status the run shows, in order, each with the browser's time (one clock for every duration).
    page.evaluate(
        """() => { window.__statuses = []; const box = document.querySelector('#status');
            new MutationObserver(() => window.__statuses.push([box.innerText.trim(), performance.now()]))
            .observe(box, {childList: true, subtree: true, characterData: true}); }"""
    )
    since_click = "(t) => (performance.now() - t) / 1000"
    clicked = page.evaluate("() => performance.now()")
    page.click("#run")
    page.wait_for_function("() => document.querySelector('#status').innerText.trim() === ''", timeout=60_000)
    expect(page.locator("#text-s2d2")).to_contain_text("team", timeout=5_000)
    wait_plot(page, "plot-trajectory-s2d2")
    wait_plot(page, "plot-trajectory-baseline")
    rendered = {"trajectory": page.evaluate(since_click, clicked)}
    statuses = page.evaluate("() => window.__statuses")
    streamed = [at for text, at in statuses if text.startswith("Decoding")]
    # Streaming works: the page showed a run's partial text before the finished results cleared the status.
    assert streamed and statuses[-1][0] == "", statuses
    first_stream = (streamed[0] - clicked) / 1000
    for tab, elem_id in (("Residual energy", "plot-energy"), ("Router", "plot-router"), ("Cost", "plot-cost")):
        page.get_by_role("tab", name=tab).click()
        wait_plot(page, elem_id)
        rendered[tab] = page.evaluate(since_click, clicked)
    page.get_by_role("tab", name="Table").click()
    page.wait_for_selector("#stats-table table", timeout=30_000)
    total = page.evaluate(since_click, clicked)
    (ROOT / "out").mkdir(exist_ok=True)
    timing = {"click_to_first_streamed_update_s": first_stream, "click_to_all_plots_s": total, "steps": rendered}
    (ROOT / "out" / "browser_timing.json").write_text(json.dumps(timing, indent=2))
    print(
        f"\nclick → first streamed update: {first_stream:.2f}s; click → all plots rendered: {total:.2f}s ({rendered})"
    )
    assert page.locator("#text-s2d2 .tok").count() > 5
    page.screenshot(path=str(SHOTS / "02-table.png"), full_page=True)

    page.get_by_role("tab", name="Trajectory").click()
    wait_plot(page, "plot-trajectory-s2d2")
    wait_player(page, "plot-trajectory-s2d2")
    page.screenshot(path=str(SHOTS / "03-results.png"), full_page=True)
    steps = len(plot_data(page, "plot-trajectory-s2d2")[1])
    assert slider_active(page, "plot-trajectory-s2d2") == steps - 1

    # The slider still replays, and the sentence follows it: step 0 of S2D2 verifies the first drafts.
    before = plot_data(page, "plot-trajectory-s2d2")[0]
    rail = page.locator("#plot-trajectory-s2d2 .slider-rail-touch-rect").first
    rail.scroll_into_view_if_needed()
    box = rail.bounding_box()
    page.mouse.click(box["x"] + 3, box["y"] + box["height"] / 2)
    expect(page.locator("#player-s2d2 .narration")).to_contain_text(
        "step 0 (block 0): the drafter proposed", timeout=5_000
    )
    expect(page.locator("#player-s2d2 .narration")).to_contain_text("the verifier accepted")
    after = plot_data(page, "plot-trajectory-s2d2")[0]
    assert after != before, "moving the slider to the first step must change the sequence strip"
    assert page.locator("#text-s2d2 .tok-future").count() > 0, "the text shows only what step 0 committed"
    page.locator("#plot-trajectory-s2d2").screenshot(path=str(SHOTS / "04-trajectory-step0.png"))

    # ▶ Play from step 0 advances to the last step by itself, the slider following.
    page.evaluate(
        f"""() => {{ window.__sliderSeen = [];
            document.querySelector('{PLOT.format(id="plot-trajectory-s2d2")}').on('plotly_animated',
                (e) => window.__sliderSeen.push(document.querySelector('{PLOT.format(id="plot-trajectory-s2d2")}')._fullLayout.sliders[0].active)); }}"""
    )
    page.click("#player-s2d2 .play-button")
    expect(page.locator("#player-s2d2 .play-button")).to_have_text("❚❚ Pause")
    expect(page.locator("#player-s2d2 .play-button")).to_have_text("▶ Play", timeout=60_000 + 1_000 * steps)
    assert slider_active(page, "plot-trajectory-s2d2") == steps - 1, "Play ends on the last step"
    seen = set(page.evaluate("() => window.__sliderSeen"))
    assert len(seen) >= min(steps, 2), f"the slider followed Play through {sorted(seen)}"
    expect(page.locator("#player-s2d2 .narration")).to_contain_text(f"step {steps - 1} (block ")
    assert page.locator("#text-s2d2 .tok-future").count() == 0

    # The lockstep replay: S2D2 finishes while AR is still writing.
    page.click(".play-all-button")
    page.wait_for_function(
        "() => document.querySelector('.player-all .clock').innerText.includes('finished: S2D2')", timeout=30_000
    )
    ar_hidden = page.locator("#text-ar .tok-future").count()
    page.screenshot(path=str(SHOTS / "05-lockstep.png"), full_page=True)
    assert ar_hidden > 0, "when S2D2 is done, AR still has tokens to write"
    page.wait_for_function(
        "() => document.querySelector('.play-all-button').innerText.includes('Play all')", timeout=60_000
    )
    for tab, elem_id, name in (
        ("Residual energy", "plot-energy", "06-energy"),
        ("Router", "plot-router", "07-router"),
        ("Cost", "plot-cost", "08-cost"),
    ):
        page.get_by_role("tab", name=tab).click()
        expect(page.locator(f"#{elem_id}")).to_be_visible()
        wait_plot(page, elem_id)
        page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


@pytest.mark.parametrize(
    "model_id, words, shot",
    [
        ("bundled-fast-dllm-v2", "sub-block", "09-fast-dllm-example"),
        ("bundled-llada2", "editing pass", "09-llada2-example"),
    ],
)
def test_an_example_of_another_family_sets_its_model_and_narrates_its_mechanism(page, model_id, words, shot):
    """Fast-dLLM v2's narration names sub-blocks; LLaDA2's names the editing pass that rewrote a token."""
    from playwright.sync_api import expect

    from components.runner import preset_values
    from components.ui import BUNDLED_LABELS, examples

    example = next(e for e in examples() if e["model"] == model_id)
    page.get_by_text(example["prompt"][:40]).first.click()
    expect(page.locator("#prompt textarea")).to_have_value(example["prompt"], timeout=15_000)
    expect(page.locator("#model input")).to_have_value(BUNDLED_LABELS[model_id], timeout=5_000)
    expect(page.locator("#lesson textarea")).to_have_value(example["lesson"])
    # Run at once: the preset's settings reach the panel in a round trip of their own, and the run must
    # decode with the preset all the same (the Run handler applies it).
    page.click("#run")
    page.wait_for_function("() => document.querySelector('#status').innerText.trim() === ''", timeout=120_000)
    wait_plot(page, "plot-trajectory-s2d2")
    page.get_by_role("tab", name="Trajectory").click()
    players = page.locator("#player-s2d2 .narration, #player-baseline .narration")
    expect(players.filter(has_text=words).first).to_be_visible(timeout=10_000)
    settings = page.locator("#settings").get_by_text("Settings").first
    settings.click()  # the accordion renders its controls only while open
    threshold = str(preset_values(example["preset"])["threshold"])
    expect(page.locator("#set-threshold input[type=number]")).to_have_value(threshold, timeout=5_000)
    page.screenshot(path=str(SHOTS / f"{shot}.png"), full_page=True)


def test_a_phone_wide_page_cuts_nothing_off(page):
    from playwright.sync_api import expect

    page.set_viewport_size({"width": 420, "height": 900})
    page.locator("#settings").get_by_text("Settings").first.click()
    page.locator("#advanced-settings").get_by_text("Advanced settings").first.click()
    expect(page.locator("#advanced-settings .settings-row").first).to_be_visible(timeout=10_000)
    # Laid out at the new width: the page no longer holds the desktop layout's width.
    page.wait_for_function("() => document.documentElement.clientWidth <= 421")
    overflow = page.evaluate(
        """() => [...document.querySelectorAll('#settings *, #plot-trajectory-s2d2 .main-svg, .run-text, .player')]
            .filter(e => e.offsetParent !== null && e.getBoundingClientRect().right > window.innerWidth + 1)
            .map(e => (e.id || e.className || e.tagName).toString().slice(0, 60))"""
    )
    page.screenshot(path=str(SHOTS / "10-phone.png"), full_page=True)
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 421
    assert overflow == [], overflow


def test_bad_input_shows_a_message_in_the_page(page):
    page.locator("#prompt textarea").fill("")
    page.click("#run")
    page.wait_for_selector("#status .status-error", timeout=30_000)
    assert "empty" in page.locator("#status").inner_text()
    page.screenshot(path=str(SHOTS / "09-error.png"))


def test_how_it_works_has_the_diagram(page):
    page.get_by_role("tab", name="How it works").click()
    page.wait_for_selector(".how svg", timeout=10_000)
    assert page.locator(".how svg rect").count() >= 24
    page.screenshot(path=str(SHOTS / "11-how.png"), full_page=True)


# -- the token inspector -------------------------------------------------------------------

CELL = """([sel, x, y]) => {
    const div = document.querySelector(sel), layout = div._fullLayout, box = div.getBoundingClientRect();
    return {x: box.left + layout.xaxis2._offset + layout.xaxis2.d2p(x), y: box.top + layout.yaxis2._offset + layout.yaxis2.d2p(y)};
}"""


def click_cell(page, elem_id: str, position: int, step: int) -> None:
    """A real mouse click on grid cell (position, step) of a trajectory figure."""
    page.locator(f"#{elem_id}").scroll_into_view_if_needed()
    point = page.evaluate(CELL, [PLOT.format(id=elem_id), position, step])
    page.mouse.click(point["x"], point["y"])


def first_rejection(trace):
    from s2d2.trace import RESAMPLED

    return next(
        (i, p)
        for i, s in enumerate(trace.steps)
        for p in s.positions
        if p.outcome == RESAMPLED and p.position < len(trace.output_ids)
    )


def check_rejection_panel(page, trace, require_detail: bool, missing: str = "before schema version 4") -> None:
    """The S2D2 inspector at the run's first rejection names the verifier's choice and the test's numbers
    (and, where the trace has no top-k, says why: ``missing``)."""
    from playwright.sync_api import expect

    from components.palette import display_token
    from s2d2.decisions import has_detail

    index, record = first_rejection(trace)
    click_cell(page, "plot-trajectory-s2d2", record.position, index)
    panel = page.locator(f'#inspector-s2d2 .inspector[data-position="{record.position}"][data-step="{index}"]')
    expect(panel).to_be_visible(timeout=10_000)
    committed = f"‘{display_token(trace.text_of(record.committed))}’"
    verdict = panel.locator(".insp-test").first.inner_text()
    if trace.config["verify"]["acceptance"] == "greedy":
        # Greedy corrects with the verifier's argmax: its top token is the committed one.
        assert f"argmax {committed} ≠ draft" in verdict and f"rejected, {committed} committed" in verdict, verdict
    else:
        assert f"u = {record.u:.2f} ≥ min(1, q/p) = {record.accept_probability:.2f}: rejected" in verdict, verdict
    numbers = panel.locator(".insp-numbers").inner_text()
    assert f"{record.q:.3f}" in numbers and f"{record.ratio:.2f}" in numbers and f"{record.energy:+.2f}" in numbers
    if has_detail(trace):
        q_bars = panel.locator(".insp-dist").nth(1)
        assert q_bars.locator(".insp-dist-title").inner_text().startswith("q")
        top = q_bars.locator(".insp-token").first.inner_text()
        if trace.config["verify"]["acceptance"] == "greedy":
            assert f"‘{top}’" == committed.replace("\n", "⏎"), (top, committed)
        assert panel.locator(".insp-mark-committed").count() >= 1
        assert "residual (q − p)+" in panel.inner_text()
    else:
        assert not require_detail, "a freshly decoded comparison records the top-k"
        expect(panel.locator(".insp-missing")).to_contain_text(missing)


def test_inspector_explains_a_rejection_on_the_saved_comparison(page, app_url, tmp_path):
    """The opening comparison (whatever version it was saved with), then a freshly saved one replayed."""
    from gradio_client import Client
    from playwright.sync_api import expect

    from components.bundle import bundle_json, load_bundle, load_bundle_file
    from components.ui import DEMO_COMPARISON

    wait_plot(page, "plot-trajectory-s2d2")
    wait_player(page, "plot-trajectory-s2d2")
    expect(page.locator("#inspector-s2d2 .inspector-closed")).to_be_visible()
    check_rejection_panel(page, load_bundle_file(DEMO_COMPARISON)["S2D2"], require_detail=False)

    first = json.loads((ROOT / "assets" / "examples.json").read_text())[0]
    result = Client(app_url, verbose=False).predict(prompt=first["prompt"], preset=first["preset"], api_name="/compare")
    fresh = load_bundle(json.dumps({"runs": result["runs"]}))
    saved = tmp_path / "fresh-comparison.json"
    saved.write_text(bundle_json(fresh))
    with page.expect_file_chooser() as chooser:
        page.click("#replay")
    chooser.value.set_files(str(saved))
    expect(page.locator("#status")).to_contain_text("Replaying a saved comparison", timeout=30_000)
    expect(page.locator("#inspector-s2d2 .inspector-closed")).to_be_visible(timeout=10_000)
    wait_player(page, "plot-trajectory-s2d2")
    check_rejection_panel(page, fresh["S2D2"], require_detail=True)
    page.locator("#plot-trajectory-s2d2").scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "12-inspector-rejection.png"))

    # The arrow keys move the inspector: → to the next position, ↓ to the next step.
    index, record = first_rejection(fresh["S2D2"])
    page.keyboard.press("ArrowRight")
    expect(page.locator(f'#inspector-s2d2 .inspector[data-position="{record.position + 1}"]')).to_be_visible()
    page.keyboard.press("ArrowDown")
    expect(page.locator(f'#inspector-s2d2 .inspector[data-step="{index + 1}"]')).to_be_visible()
    page.locator("#inspector-s2d2 .insp-close").click()
    expect(page.locator("#inspector-s2d2 .inspector-closed")).to_be_visible()


SERVED_TRACE = ROOT / "tests" / "data" / "served_trace.json"


def test_a_served_trace_replays_with_every_view(page):
    """A trajectory an SGLang server wrote (``trace_dir``) opens in Replay: every view draws, and the inspector
    reads its first rejection's test with that request's numbers, saying no top-k was recorded.

    ``tests/data/served_trace.json`` was written by a CPU server of ``export --model bundled`` with the YAML
    ``preset: exact, block_size: 16, acceptance: stochastic, trace_dir: ...``, for the 11th chains problem
    of ``heldout_problems(30)`` sent as its chat prompt at temperature 1 with ``sampling_seed`` 17: exact
    speculative sampling, two rejections resampled from the residual."""
    from playwright.sync_api import expect

    from components.bundle import load_bundle_file

    trace = load_bundle_file(SERVED_TRACE)["S2D2"]
    assert trace.summary.rejections >= 1 and trace.exactness["exact"] and trace.config["sampling"]["temperature"] == 1
    with page.expect_file_chooser() as chooser:
        page.click("#replay")
    chooser.value.set_files(str(SERVED_TRACE))
    expect(page.locator("#status")).to_contain_text("Replaying a saved comparison (S2D2)", timeout=30_000)
    wait_player(page, "plot-trajectory-s2d2")
    expect(page.locator("#text-s2d2")).to_contain_text(trace.text.split(".")[0])
    check_rejection_panel(page, trace, require_detail=False, missing="trace_top_k = 0")
    for tab, elem_id in (("Residual energy", "plot-energy"), ("Router", "plot-router"), ("Cost", "plot-cost")):
        page.get_by_role("tab", name=tab).click()
        wait_plot(page, elem_id)
    page.screenshot(path=str(SHOTS / "22-served-trace.png"))


def test_inspector_reads_a_baseline_commit_against_its_threshold(page):
    from playwright.sync_api import expect

    from components.bundle import load_bundle_file
    from components.ui import DEMO_COMPARISON
    from s2d2.trace import THRESHOLD

    wait_plot(page, "plot-trajectory-baseline")
    wait_player(page, "plot-trajectory-baseline")
    baseline = load_bundle_file(DEMO_COMPARISON)["Baseline"]
    index, record = next(
        (i, p) for i, s in enumerate(baseline.steps) for p in s.positions
        if p.outcome == THRESHOLD and p.position < len(baseline.output_ids)
    )  # fmt: skip
    click_cell(page, "plot-trajectory-baseline", record.position, index)
    panel = page.locator(f'#inspector-baseline .inspector[data-position="{record.position}"]')
    expect(panel).to_be_visible(timeout=10_000)
    rule = panel.locator(".insp-rule").inner_text()
    tau = baseline.config["threshold"]
    assert f"confidence p = {record.p:.3f}" in rule and f"τ = {tau:g}" in rule, rule
    assert (">" if record.p > tau else "≤") in rule
    expect(panel.locator(".insp-threshold")).to_have_count(1)
    page.locator("#plot-trajectory-baseline").scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "13-inspector-baseline.png"))

    # A token of the S2D2 text opens the S2D2 inspector at the step that committed it.
    token = page.locator("#text-s2d2 .tok").nth(2)
    token.click()
    expect(
        page.locator(f'#inspector-s2d2 .inspector[data-position="{token.get_attribute("data-pos")}"]')
    ).to_be_visible()


def test_editing_a_setting_by_hand_sets_the_preset_back_to_custom(page):
    """Otherwise Run would apply the preset the picker still shows over the hand-edited value."""
    from playwright.sync_api import expect

    from components.runner import preset_values
    from components.ui import examples
    from s2d2.config import PRESETS

    example = next(e for e in examples() if e["preset"] in PRESETS)
    page.get_by_text(example["prompt"][:40]).first.click()
    settings = page.locator("#settings").get_by_text("Settings").first
    settings.click()  # the accordion renders its controls (the preset picker too) only while open
    picked = re.compile(f"^{re.escape(example['preset'])}:")
    expect(page.locator("#preset input")).to_have_value(picked, timeout=5_000)
    threshold = page.locator("#set-threshold input[type=number]")
    expect(threshold).to_have_value(str(preset_values(example["preset"])["threshold"]), timeout=5_000)
    threshold.fill("0.61")
    threshold.press("Tab")
    expect(page.locator("#preset input")).to_have_value("custom (keep the settings below)", timeout=5_000)
    expect(threshold).to_have_value("0.61")
    settings.click()


# -- the visitor's own runs: sessions and Cancel ------------------------------------------------------------


def new_page(browser, app_url, width: int = 1440, height: int = 900):
    """A page in a browser context of its own (its own app session), opened on the saved comparison."""
    from playwright.sync_api import expect

    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.goto(app_url, wait_until="networkidle")
    expect(page.locator("#status")).to_contain_text("saved run", timeout=30_000)
    return page


def run_own_prompt(page, prompt: str) -> None:
    """Type a prompt, press Run, and wait for the finished results (the status clears)."""
    from playwright.sync_api import expect

    page.locator("#prompt textarea").fill(prompt)
    page.click("#run")
    expect(page.locator("#status .status-info")).to_have_count(1, timeout=30_000)
    page.wait_for_function("() => document.querySelector('#status').innerText.trim() === ''", timeout=120_000)


def inspected_first_token(page) -> tuple[str, str]:
    """Click S2D2's first token; return (the token as the text shows it, what the inspector says committed)."""
    from playwright.sync_api import expect

    token = page.locator("#text-s2d2 .tok").first
    shown = token.inner_text().strip()
    token.click()
    panel = page.locator(f'#inspector-s2d2 .inspector[data-position="{token.get_attribute("data-pos")}"]')
    expect(panel).to_be_visible(timeout=10_000)
    return shown, panel.locator(".insp-outcome").inner_text()


def test_each_page_inspects_its_own_live_runs(browser, app_url):
    """Five live runs of new prompts in two browser contexts, taking turns: every inspector answer comes from
    its own page's latest run (the first token of an arith answer is its prompt's first number)."""
    from s2d2.study.tasks import get_family

    shown_examples = {e["prompt"] for e in json.loads((ROOT / "assets" / "examples.json").read_text())}
    problems = [p for p in get_family("arith").problems("heldout", 40, seed=5) if p.prompt not in shown_examples]
    # Prompts whose answers start with different digits, so no run's first token passes for another's.
    starts = sorted({p.reference[0]: (p.reference.split()[0], p) for p in problems}.values())[:5]
    pages = [new_page(browser, app_url), new_page(browser, app_url)]
    latest: dict[int, str] = {}
    try:
        for i, (first_number, problem) in enumerate(starts):
            page = pages[i % 2]
            run_own_prompt(page, problem.prompt)
            latest[i % 2] = first_number
            for index, other in enumerate(pages):  # both pages, the one that did not just run too
                if index in latest:
                    shown, said = inspected_first_token(other)
                    assert latest[index].startswith(shown), (shown, latest[index])
                    assert f"‘{shown}’ committed" in said, (said, shown)
        pages[0].screenshot(path=str(SHOTS / "14-own-run-inspected.png"), full_page=False)
        what_if_on_the_open_token(pages[0])
        rewind_from_the_open_step(pages[0])
    finally:
        for page in pages:
            page.context.close()


def what_if_on_the_open_token(page) -> None:
    """The open S2D2 inspector offers the drafter's other candidates; a pick decodes the page's own run again
    with it forced, and the panel says what the verifier did with it and what it cost; Back returns."""
    from playwright.sync_api import expect

    panel = page.locator("#inspector-s2d2 .inspector")
    step, position = panel.get_attribute("data-step"), panel.get_attribute("data-position")
    candidate = panel.locator(".whatif-go").first
    forced = candidate.inner_text()
    candidate.click()
    answer = page.locator("#inspector-s2d2 .whatif")
    expect(answer).to_be_visible(timeout=30_000)
    expect(answer.locator(".insp-head")).to_contain_text(f"{forced} in place of")
    said = answer.inner_text()
    assert re.search(r"Verifier: .*(accepted|rejected)", said) and re.search(r"Cost: \d+ forwards", said), said
    assert "no exactness claim" in said
    page.locator("#inspector-s2d2").scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "20-what-if.png"), full_page=False)
    answer.locator(".whatif-back").click()
    back = page.locator(f'#inspector-s2d2 .inspector[data-step="{step}"][data-position="{position}"] .whatif-go')
    expect(back.first).to_be_visible(timeout=10_000)


def rewind_from_the_open_step(page) -> None:
    """The open S2D2 inspector's Rewind form: dynamic at another τ from this step decodes the page's own run again,
    and the panel says what changed, what it cost and that the new run is not exact; Back returns."""
    from playwright.sync_api import expect

    panel = page.locator("#inspector-s2d2 .inspector")
    step, position = panel.get_attribute("data-step"), panel.get_attribute("data-position")
    offer = panel.locator(".rewind-offer")
    offer.locator("summary").click()
    offer.locator('select[name="method"]').select_option("dynamic")
    tau = offer.locator('input[name="threshold"]')
    before = float(tau.input_value())
    after = 0.3 if before != 0.3 else 0.5
    tau.fill(str(after))
    offer.locator(".rewind-go").click()
    answer = page.locator("#inspector-s2d2 .rewound")
    expect(answer).to_be_visible(timeout=30_000)
    expect(answer.locator(".insp-head")).to_contain_text(
        f"from step {step}: method s2d2 → dynamic, τ {before} → {after}"
    )
    said = answer.inner_text()
    assert re.search(r"Cost: \d+ forwards", said) and "This run is not exact" in said, said
    page.locator("#inspector-s2d2").scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "21-rewind.png"), full_page=False)
    answer.locator(".whatif-back").click()
    back = page.locator(f'#inspector-s2d2 .inspector[data-step="{step}"][data-position="{position}"] .rewind-offer')
    expect(back.first).to_be_visible(timeout=10_000)


def test_cancel_stops_the_decode_on_the_server(browser, app_server):
    """A long LLaDA2 chains run: after Cancel no forward starts later than a second after the click."""
    from playwright.sync_api import expect

    from components.ui import examples
    from s2d2.study.tasks import get_family

    page = new_page(browser, app_server.url)
    try:
        llada2 = next(e for e in examples() if e["model"] == "bundled-llada2")
        page.get_by_text(llada2["prompt"][:40]).first.click()
        expect(page.locator("#prompt textarea")).to_have_value(llada2["prompt"], timeout=15_000)
        chains = get_family("chains").problems("heldout", 1, seed=3)[0]
        page.locator("#prompt textarea").fill(chains.prompt)
        before = len(app_server.forward_starts())
        page.click("#run")
        expect(page.locator("#status")).to_contain_text("Decoding", timeout=60_000)
        page.wait_for_timeout(1_500)
        clicked = time.time()
        page.click("#cancel")
        expect(page.locator("#status")).to_contain_text("Cancelled", timeout=5_000)
        page.wait_for_timeout(3_000)
        starts = app_server.forward_starts()[before:]
        assert any(t < clicked for t in starts), "the run was decoding when Cancel was clicked"
        late = [round(t - clicked, 2) for t in starts if t > clicked + 1.0]
        assert late == [], f"forwards started after Cancel (seconds after the click): {late}"
        page.screenshot(path=str(SHOTS / "15-cancelled.png"))
    finally:
        page.context.close()


def headline_in_view(page) -> bool:
    """Whether the headline's top is on screen (after the page scrolled itself there)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(
            "() => { const h = document.querySelector('#headline .headline'); const top = h && h.getBoundingClientRect().top;"
            " return h && !h.innerText.startsWith('Decoding') && top >= -2 && top < window.innerHeight - 80; }",
            timeout=10_000,
        )
    except PlaywrightTimeout:
        where = page.evaluate(
            "() => { const h = document.querySelector('#headline .headline'); return {top: h && h.getBoundingClientRect().top,"
            " height: window.innerHeight, scrollY: window.scrollY, headline: h && h.innerText.slice(0, 80),"
            " status: document.querySelector('#status').innerText.slice(0, 80)}; }"
        )
        raise AssertionError(f"the headline is not in view: {where}") from None
    return True


def test_a_learner_reaches_the_sampling_test_of_a_live_run_and_walks_through_it(browser, app_url):
    """The sampling example: a click says Run will decode it; Run brings the graded headline into view; its
    walk-through button (the second click) opens the step's numbers, and Next reaches the rejection's u and
    residual, outlined in the trajectory; the Speed-up tab draws the run on its curve."""
    from playwright.sync_api import expect

    from components.ui import examples

    example = next(e for e in examples() if e["shows"] == "sampling-test")
    page = new_page(browser, app_url)
    try:
        page.get_by_text(example["prompt"][:40]).first.click()
        expect(page.locator("#status")).to_contain_text("press Run to decode it live", timeout=10_000)
        page.click("#run")
        page.wait_for_function("() => document.querySelector('#status').innerText.trim() === ''", timeout=120_000)
        assert headline_in_view(page)
        headline = page.locator("#headline .headline")
        expect(headline).to_contain_text("Wrong answer from Baseline; right from AR and S2D2: the answer is 7")
        expect(page.locator("#text-baseline .grade-wrong")).to_have_count(1)
        page.screenshot(path=str(SHOTS / "16-after-run-1440.png"))
        headline.locator(".guide-start").click()
        guide = page.locator("#inspector-s2d2 .guide")
        expect(guide).to_contain_text("The drafter is the model in diffusion mode", timeout=10_000)
        expect(guide.locator("tr.guide-now").first).to_be_visible()
        for _ in range(4):
            if "fails" in guide.locator(".guide-text").inner_text():
                break
            part = guide.get_attribute("data-part")  # read before the click: its answer may come back at once
            guide.locator(".guide-go", has_text="Next ▶").click()
            page.wait_for_function("(n) => document.querySelector('#inspector-s2d2 .guide').dataset.part !== n",
                                   arg=part, timeout=10_000)  # fmt: skip
        said = guide.locator(".guide-text").inner_text()
        assert re.search(r"u = 0\.\d\d ≥ min\(1, q/p\) = 0\.00: rejected", said) and "residual (q − p)+" in said, said
        position = int(guide.get_attribute("data-positions"))
        page.wait_for_function(
            """(x) => { const d = document.querySelector('#plot-trajectory-s2d2 .js-plotly-plot');
                const s = d && d.layout.shapes && d.layout.shapes[d._s2d2Guide];
                return s && s.visible && Math.abs(s.x0 - (x - 0.5)) < 1e-6; }""",
            arg=position,
            timeout=10_000,
        )
        guide.scroll_into_view_if_needed()
        page.screenshot(path=str(SHOTS / "17-walk-through-rejection.png"))
        page.get_by_role("tab", name="Speed-up").click()
        wait_plot(page, "plot-speedup")
        expect(page.locator("#speedup-text")).to_contain_text("E[K]")
        page.screenshot(path=str(SHOTS / "18-speed-up.png"), full_page=False)
    finally:
        page.context.close()


def test_on_a_phone_run_scrolls_to_the_results(browser, app_url):
    page = new_page(browser, app_url, width=420, height=900)
    try:
        run_own_prompt(page, "Ben has 7 pens. He buys 5 more. How many pens does Ben have now?")
        assert headline_in_view(page)
        assert page.evaluate("() => window.scrollY") > 900, "the results sit below the examples on a phone"
        page.screenshot(path=str(SHOTS / "19-phone-after-run.png"))
    finally:
        page.context.close()
