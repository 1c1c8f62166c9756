"""The dashboard through its API (gradio_client against a launched server) and its handlers."""

from __future__ import annotations

import json
import socket
import urllib.request

import pytest
from gradio_client import Client

from components import ui
from components.bundle import bundle_json, load_bundle_file
from components.runner import RUN_NAMES, build_configs, defaults, resolve
from components.views import VIEWS
from s2d2.decode import generate
from s2d2.trace import RESAMPLED
from helpers import decode_each

EXAMPLES = ui.examples()
PROMPTS = [e["prompt"] for e in EXAMPLES]
README = (ui.ASSETS.parent / "README.md").read_text()


@pytest.fixture(scope="module")
def client(app_url):
    return Client(app_url, verbose=False)


def test_only_compare_and_generate_are_in_the_api(client):
    endpoints = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    assert sorted(endpoints) == ["/compare", "/generate"]
    names = [p["parameter_name"] for p in endpoints["/compare"]["parameters"]]
    assert names[:3] == ["prompt", "model", "preset"]
    assert {"block_length", "acceptance", "seed", "allow_resample", "ratio_threshold"} <= set(names)


def test_compare_by_parameter_name_returns_traces_and_table(client):
    result = client.predict(prompt=PROMPTS[2], model="bundled", preset="sdar-b", max_new_tokens=32, api_name="/compare")
    assert list(result["runs"]) == list(RUN_NAMES)
    assert [row["run"] for row in result["table"]] == list(RUN_NAMES)
    s2d2 = result["runs"]["S2D2"]
    assert s2d2["model"] == "bundled" and s2d2["config"]["block_length"] == 16
    assert s2d2["config"]["verify"]["c"] == 0.0, "sdar-b's c = 0"
    assert "warm-up" in result["timing"]


def test_generate_one_method_by_name(client):
    result = client.predict(prompt=PROMPTS[3], method="dynamic", threshold=0.9, api_name="/generate")
    trace = result["trace"]
    assert trace["method"] == "dynamic" and trace["config"]["threshold"] == 0.9
    assert trace["text"].endswith("The answer is 6."), "the bundled model solves the fourth example"


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"seed": "abc"}, "seed must be int, got 'abc'"),
        ({"seed": 1.5}, "seed must be an integer"),
        ({"seed": -1}, "seed (Seed) must be in [0,"),
        ({"seed": 10**30}, "seed (Seed) must be in [0,"),
        ({"threshold": "nan"}, "must be a number, got NaN"),
        ({"preset": "sdar-z"}, "unknown preset 'sdar-z'"),
        ({"model": "/etc/passwd"}, "unknown model '/etc/passwd'"),
        ({"tau_on": -1.0, "tau_off": 0.0}, "tau_on > tau_off"),
        ({"block_length": 4, "steps": 8}, "steps must be between"),
    ],
)
def test_bad_api_input_gets_the_pages_one_line_message(client, settings, message):
    with pytest.raises(Exception) as err:
        client.predict(prompt=PROMPTS[0], api_name="/compare", **settings)
    assert message in str(err.value) and "Traceback" not in str(err.value)


def test_readme_client_example_runs_against_the_app(app_url):
    block = README.split("```python\n", 1)[1].split("```", 1)[0]
    lines = [line for line in block.splitlines() if line.strip()]
    assert len(lines) == 5, "the README promises a five-line example"
    code = block.replace("http://127.0.0.1:7860/", app_url)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    assert [row["run"] for row in scope["result"]["table"]] == list(RUN_NAMES)


def test_mcp_lists_the_two_tools(app_url):
    with urllib.request.urlopen(app_url + "gradio_api/mcp/schema", timeout=30) as response:
        tools = {tool["name"]: tool for tool in json.loads(response.read())}
    assert sorted(tools) == ["compare", "generate"]
    properties = tools["compare"]["inputSchema"]["properties"]
    assert {"prompt", "model", "preset", "block_length", "acceptance"} <= set(properties)


def page_values(**changes) -> list:
    """The settings panel's values in its order, as the page sends them."""
    values = {**defaults(), **changes}
    return [" ".join(map(str, v)) if isinstance(v, tuple) else v for v in (values[n] for n in ui.panel_order())]


def test_panel_controls_presets_and_handlers_share_one_order():
    import gradio as gr

    with gr.Blocks():
        _, panel = ui.settings_panel()
    assert panel.names() == ui.panel_order()
    updates = dict(zip(ui.panel_order(), ui.apply_preset("sdar-a")))
    assert updates["block_length"]["value"] == 4 and updates["threshold"]["value"] == 0.85
    assert updates["seed"] == gr.update(), "a preset keeps the sampling settings"


def test_a_picked_preset_decides_the_run_even_before_the_panel_shows_it():
    """Clicking Run straight after an example sends the panel's old values with the new preset."""
    stale = page_values(max_new_tokens=8)
    *_, export = final(ui.run_comparison(None, "bundled", PROMPTS[0], "sdar-a", *stale))
    traces = load_bundle_file(export["value"])
    s2d2 = traces["S2D2"].config
    assert (s2d2["block_length"], s2d2["threshold"]) == (4, 0.85), "the preset's values, not the panel's"
    assert (defaults()["block_length"], defaults()["threshold"]) != (4, 0.85)
    assert all(t.config["max_new_tokens"] == 8 for t in traces.values()), "settings the preset leaves are kept"
    *_, export = final(ui.run_comparison(None, "bundled", PROMPTS[0], "custom", *stale))
    assert load_bundle_file(export["value"])["S2D2"].config["block_length"] == defaults()["block_length"]


def final(generator) -> list:
    *_, last = generator
    return last


def test_page_streams_then_shows_every_result():
    updates = list(ui.run_comparison(None, "bundled", PROMPTS[2], "custom", *page_values()))
    streamed, last = updates[:-1], updates[-1]
    assert streamed and all("Decoding" in u[0] or "timing them" in u[0] for u in streamed)
    assert {name for u in streamed for name in RUN_NAMES if f"Decoding {name}" in u[0]} == set(RUN_NAMES)
    status, shown = last[0], dict(zip((view.key for view in VIEWS), last[1:]))
    assert status == "" and "S2D2" in shown["headline"] and "Play all" in shown["player_all"]
    assert all('class="tok tok-' in shown[f"text:{name}"] for name in RUN_NAMES)


@pytest.mark.parametrize(
    "prompt, changes, message",
    [
        ("   ", {}, "prompt is empty"),
        ("x" * 5000, {}, "limit is 4000"),
        (PROMPTS[0], {"seed": 1.5}, "seed must be an integer"),
        (PROMPTS[0], {"tau_on": -1.0, "tau_off": 0.0}, "tau_on &gt; tau_off"),
    ],
)
def test_bad_page_input_gives_the_same_message(prompt, changes, message):
    status, *_ = final(ui.run_comparison(None, "bundled", prompt, "custom", *page_values(**changes)))
    assert "status-error" in status and message in status


def test_unknown_model_gives_a_clear_message():
    status, *_ = final(ui.run_comparison(None, "nobody/nothing-here", PROMPTS[0], "custom", *page_values()))
    assert "status-error" in status and "unknown model" in status


def test_cancel_stops_a_running_decode():
    class Request:
        session_hash = "cancel-test"

    stream = ui.run_comparison(Request(), "bundled", PROMPTS[1], "custom", *page_values())
    first = next(stream)
    assert "Decoding" in first[0]
    assert "cancel-test" in ui._CANCELS
    ui.cancel_run(Request())
    last = final(stream)
    assert "Cancelled" in last[0]
    assert "cancel-test" not in ui._CANCELS, "a finished run's cancel event is dropped"
    final(ui.run_comparison(Request(), "bundled", "   ", "custom", *page_values()))
    assert "cancel-test" not in ui._CANCELS, "so is a run refused for bad input"


def test_replay_renders_a_saved_comparison_without_a_model(tmp_path):
    traces = decode_each(ui.MODELS.get("bundled"), PROMPTS[2], build_configs(resolve(given={"max_new_tokens": 24})))
    path = tmp_path / "saved.json"
    path.write_text(bundle_json(traces))
    status, headline, *rest = ui.replay(str(path))
    assert "no model was run" in status and "S2D2" in headline
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema_version": 999, "runs": {}}))
    status, *_ = ui.replay(str(bad))
    assert "Cannot replay" in status and "schema version 999" in status


def test_page_opens_on_the_saved_run_with_its_prompt():
    values = ui.startup()
    assert values[-2] == PROMPTS[0] and values[-1] == EXAMPLES[0]["lesson"]
    saved = json.loads(ui.DEMO_COMPARISON.read_text())
    assert {run["prompt"] for run in saved["runs"].values()} == {PROMPTS[0]}


def test_the_lesson_box_describes_only_the_prompt_in_the_box():
    assert ui.lesson_for(PROMPTS[1]) == EXAMPLES[1]["lesson"]
    assert ui.lesson_for("  " + PROMPTS[1] + " ") == EXAMPLES[1]["lesson"]
    assert ui.lesson_for(PROMPTS[1] + " And one more?") == ui.OWN_PROMPT
    assert ui.lesson_for("") == ""


def test_each_bundled_model_has_its_own_examples():
    assert {e["model"] for e in EXAMPLES} == set(ui.BUNDLED_LABELS)
    assert EXAMPLES[0]["model"] == "bundled", "the page opens on the default model's first example"


def _rejected_in_a_sub_block(trace) -> bool:
    """A verifier rejection inside a sub-block smaller than the block: the Fast-dLLM v2 repair."""
    sub, block = trace.config.get("sub_block_length"), trace.config["block_length"]
    rejected = [s for s in trace.steps if s.accepted is not None and any(p.outcome == RESAMPLED for p in s.positions)]
    return bool(sub) and sub < block and bool(rejected)


def _edit_overrides_a_resample(trace) -> bool:
    """An editing pass rewrote a token that the verifier had committed earlier by resampling it."""
    resampled: set[int] = set()
    for step in trace.steps:
        if any(e.position in resampled for e in step.edits):
            return True
        resampled |= {p.position for p in step.positions if p.outcome == RESAMPLED}
    return False


@pytest.mark.parametrize("example", EXAMPLES, ids=[f"{e['model']}:{e['shows']}:{e['prompt'][:20]}" for e in EXAMPLES])
def test_every_example_shows_what_it_says(example):
    traces = decode_each(ui.MODELS.get(example["model"]), example["prompt"], build_configs(resolve(example["preset"])))
    ar, base, s2d2 = (traces[n] for n in RUN_NAMES)
    s = s2d2.summary
    assert s.generated_tokens >= 8, "the bundled model answers it"
    if example["shows"] in ("repair", "sub-block-repair"):
        assert base.output_ids != ar.output_ids and s.rejections >= 1 and s2d2.output_ids == ar.output_ids
        assert example["shows"] == "repair" or _rejected_in_a_sub_block(s2d2)
    elif example["shows"] == "edits-vs-verification":
        assert base.summary.edits >= 1 and base.output_ids != ar.output_ids
        assert s.rejections >= 1 and s2d2.output_ids == ar.output_ids
    elif example["shows"] == "edit-overrides-verifier":
        assert base.summary.edits >= 1 and _edit_overrides_a_resample(s2d2)
    elif example["shows"] == "all-accepted":
        assert s.verifications >= 1 and s.rejections == 0 and s2d2.output_ids == ar.output_ids
    elif example["shows"] == "sampling-test":
        assert s2d2.config["verify"]["acceptance"] == "stochastic" and base.output_ids != ar.output_ids
        tested = [p for step in s2d2.steps for p in step.positions if p.outcome == RESAMPLED]
        assert tested and all(p.u >= p.accept_probability for p in tested), "a draw u above min(1, q/p) rejected"
        assert tested[0].committed != tested[0].token and s2d2.output_ids == ar.output_ids
    else:
        assert example["shows"] == "router-skips" and s.verifications_skipped >= 1


def test_first_and_second_run_on_a_fresh_server_agree(tmp_path):
    """The first run of a fresh server decodes what the second does, at the same cost in forwards.

    Wall time is printed, not asserted: on a shared 2-core machine two timings
    of one run differ by more than any margin a test could hold without flaking.
    """
    from app_server import AppServer

    server = AppServer(tmp_path / "fresh.log")
    try:
        server.wait_ready()
        client = Client(server.url, verbose=False)
        tables = [client.predict(prompt=PROMPTS[1], api_name="/compare")["table"] for _ in range(2)]
    finally:
        server.stop()
    untimed = [[{k: v for k, v in row.items() if "wall" not in k and "tokens/s" not in k} for row in t] for t in tables]
    assert untimed[0] == untimed[1]
    speedups = [next(row["speedup vs AR (wall)"] for row in t if row["run"] == "S2D2") for t in tables]
    print(f"\nS2D2 wall-time speedup over AR, first and second run: {speedups}")
    # The server's counts are this process's decodes of the same prompt, and its speedup is their ratio.
    model = ui.MODELS.get("bundled")
    local = {name: generate(model, PROMPTS[1], config).summary for name, config in build_configs(resolve()).items()}
    assert [row["NFE"] for row in tables[0]] == [local[name].nfe for name in RUN_NAMES]
    s2d2 = next(row for row in tables[0] if row["run"] == "S2D2")
    assert s2d2["speedup vs AR (forwards)"] == round(local["S2D2"].tpf / local["AR"].tpf, 2)
    assert s2d2["speedup vs baseline (forwards)"] == round(local["S2D2"].tpf / local["Baseline"].tpf, 2)


def test_a_held_port_is_handed_to_no_other_bind_yet_a_server_can_listen_on_it():
    """The app's and accelerate's ports are held from the probe until the server takes them."""
    from app_server import HeldPort

    with HeldPort() as port:
        with socket.socket() as other, pytest.raises(OSError):
            other.bind(("127.0.0.1", port))
        with socket.socket() as server:
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind(("127.0.0.1", port))
            server.listen()
            assert server.getsockname()[1] == port
