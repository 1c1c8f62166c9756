"""The dashboard through its API (gradio_client against a launched server) and its handlers."""

from __future__ import annotations

import json
import threading
from dataclasses import astuple
from pathlib import Path

import pytest
from gradio_client import Client

from components import ui
from components.bundle import bundle_json
from components.runner import RUN_NAMES, Settings
from s2d2.models import DEFAULT_MODEL

EXAMPLES = json.loads((Path(ui.ASSETS) / "examples.json").read_text())


def exported(value) -> dict:
    """The saved comparison behind the download button's value (a path, or an update carrying one)."""
    path = value["value"] if isinstance(value, dict) else value
    return json.loads(Path(path).read_text())


def call_run(client: Client, prompt: str, **changes):
    settings = Settings(**changes)
    return client.predict(DEFAULT_MODEL, prompt, *astuple(settings), api_name="/run_comparison")


@pytest.fixture(scope="module")
def client(app_url):
    return Client(app_url, verbose=False)


def test_api_run_returns_texts_table_and_figures(client):
    status, headline, *rest = call_run(client, EXAMPLES[0])
    texts, plots, table, export = rest[:3], rest[3:8], rest[8], rest[9]
    assert status == ""
    assert "S2D2" in headline and "forwards" in headline
    for text in texts:
        assert 'class="tok tok-' in text
    assert [row[0] for row in table["data"]] == list(RUN_NAMES)
    assert "speedup vs AR (forwards)" in table["headers"]
    for plot in plots:
        figure = json.loads(plot["plot"])
        assert figure["data"], "every figure has traces"
    trajectory = json.loads(plots[1]["plot"])
    assert len(trajectory["layout"]["sliders"][0]["steps"]) >= 1
    saved = exported(export)
    assert list(saved["runs"]) == list(RUN_NAMES)


def test_two_users_at_once_get_their_own_results(app_url):
    prompts = [EXAMPLES[0], EXAMPLES[3]]
    answers: dict[int, tuple] = {}

    def user(i: int) -> None:
        answers[i] = call_run(Client(app_url, verbose=False), prompts[i])

    threads = [threading.Thread(target=user, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    for i, prompt in enumerate(prompts):
        export = exported(answers[i][-1])
        assert {run["prompt"] for run in export["runs"].values()} == {prompt}


@pytest.mark.parametrize(
    "prompt, changes, message",
    [
        ("   ", {}, "prompt is empty"),
        ("x" * 5000, {}, "limit is 4000"),
        (EXAMPLES[0], {"tau_on": -1.0, "tau_off": 0.0}, "tau_on &gt; tau_off"),
        (EXAMPLES[0], {"block_length": 4, "steps": 8}, "steps must be between"),
    ],
)
def test_bad_input_gives_a_clear_message_not_a_traceback(client, prompt, changes, message):
    status, *rest = call_run(client, prompt, **changes)
    assert "status-error" in status and message in status
    assert "Traceback" not in status


def test_unknown_model_gives_a_clear_message():
    status, *_ = ui.run_comparison(
        "nobody/nothing-here", EXAMPLES[0], *astuple(Settings()), progress=lambda *a, **k: None
    )
    assert "status-error" in status and "cannot load" in status


def test_cancel_stops_a_running_decode():
    class Request:
        session_hash = "cancel-test"

    def progress(value, desc=""):
        if "S2D2" in desc or "Baseline" in desc:
            ui.cancel_run(Request())

    status, *rest = ui.run_comparison(
        DEFAULT_MODEL, EXAMPLES[0], *astuple(Settings()), request=Request(), progress=progress
    )
    assert "Cancelled" in status


def test_replay_renders_a_saved_comparison_without_a_model(tmp_path):
    from components.runner import build_configs, run_all

    traces = run_all(ui.MODELS.get(DEFAULT_MODEL), EXAMPLES[3], build_configs(Settings(max_new_tokens=24)))
    path = tmp_path / "saved.json"
    path.write_text(bundle_json(traces))
    status, headline, *rest = ui.replay(str(path))
    assert "no model was run" in status and "S2D2" in headline
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    status, *_ = ui.replay(str(bad))
    assert "Cannot replay" in status
