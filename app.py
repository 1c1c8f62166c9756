"""S2D2 dashboard: a baseline and S2D2 side by side on your prompt.

    python app.py            # http://127.0.0.1:7860, bundled model, CPU, offline

Thin on purpose: it lays out the blocks from ``components/`` and wires events.
"""

from __future__ import annotations

try:  # ZeroGPU: `spaces` must be imported before torch; elsewhere the app runs unchanged
    import spaces

    on_gpu = spaces.GPU(duration=120)
except ImportError:

    def on_gpu(fn):
        return fn


import logging
import os

import gradio as gr

from components import player, ui
from components.api import make_endpoints
from components.explainer import how_it_works_html
from components.runner import BUNDLED

TITLE = """
# S2D2 — self-speculative decoding for block-diffusion LMs
One model, two roles: it **drafts** a block of tokens in parallel (diffusion) and **verifies** the drafts
left to right at block size 1 (autoregressive), accepting or correcting them. Run a prompt to compare
AR decoding, a diffusion baseline and S2D2 — what each committed, where the verifier stepped in, and what it cost.
New to it? <a href="#" class="open-how">How S2D2 works, in one picture</a>, then press the walk-through under any run.
"""


def build_demo() -> gr.Blocks:
    with gr.Blocks(title="S2D2 dashboard") as demo:
        gr.Markdown(TITLE, elem_id="title")
        with gr.Tabs():
            with gr.Tab("Compare", id="compare"):
                with gr.Row(equal_height=False):
                    with gr.Column(scale=3, min_width=260):
                        prompt = gr.Textbox(
                            label="Prompt",
                            lines=3,
                            max_lines=8,
                            elem_id="prompt",
                            placeholder="Ask a word problem, or pick an example below",
                        )
                        lesson = gr.Textbox(label="What this example shows", interactive=False, elem_id="lesson")
                        gr.Markdown(ui.BUNDLED_CAN, elem_id="model-can")
                    with gr.Column(scale=1, min_width=220):
                        model = gr.Dropdown(ui.model_choices(), value=BUNDLED, label="Model", elem_id="model")
                        run = gr.Button("Run", variant="primary", elem_id="run")
                        cancel = gr.Button("Cancel", variant="stop", elem_id="cancel")
                        export = gr.DownloadButton("Download traces (JSON)", visible=False, elem_id="export")
                        upload = gr.UploadButton("Replay saved traces", file_types=[".json"], elem_id="replay")
                with gr.Accordion("Settings", open=False, elem_id="settings"):
                    preset, settings = ui.settings_panel()
                picked = gr.Examples(
                    [[e["prompt"], e["model"], e["preset"], e["lesson"]] for e in ui.examples()],
                    inputs=[prompt, model, preset, lesson],
                    label="Examples: held-out problems the bundled models never saw; each sets its model and preset",
                    cache_examples=False,
                    examples_per_page=len(ui.examples()),
                    example_labels=ui.example_labels(),
                    elem_id="examples",
                )
                gr.HTML(ui.example_prompts_html(), elem_id="example-prompts")
                status = gr.HTML(elem_id="status")
                results = ui.results_area()
            with gr.Tab("Benchmarks", id="benchmarks"):
                gr.Markdown(
                    "Accuracy against cost for every method of `python -m s2d2.study.bench` on held-out problems "
                    "(see docs/BENCHMARKS.md). Load another run's `summary.json` to compare your own model."
                )
                with gr.Row():
                    bench_model = gr.Radio(
                        list(ui.BENCHMARK_SUMMARIES),
                        value=next(iter(ui.BENCHMARK_SUMMARIES)),
                        label="Bundled model",
                        elem_id="bench-model",
                    )
                    bench_upload = gr.UploadButton("Load a summary.json", file_types=[".json"])
                bench_status = gr.HTML()
                with gr.Row():
                    bench_nfe = gr.Plot(show_label=False, elem_id="bench-nfe")
                    bench_wall = gr.Plot(show_label=False, elem_id="bench-wall")
                with gr.Row():
                    bench_scaling = gr.Plot(show_label=False, elem_id="bench-scaling")
                    bench_energy = gr.Plot(show_label=False, elem_id="bench-energy")
                bench_table = gr.Dataframe(show_label=False, wrap=True, elem_id="bench-table")
            with gr.Tab("How it works", id="how"):
                gr.HTML(how_it_works_html())

        # Page-only events stay out of the API; /compare and /generate are the API.
        page = dict(api_visibility="private")
        preset.change(ui.apply_preset, preset, settings.components(), **page)
        for control in settings.components():  # a hand edit leaves the preset; in the page, no round trip
            control.input(None, None, preset, js="() => 'custom'", **page)
        prompt.change(ui.lesson_for, prompt, lesson, **page)
        picked.dataset.click(ui.example_picked, None, status, queue=False, **page)
        outputs = [status, *results.components(), export]
        inputs = [model, prompt, preset, *settings.components()]
        run_event = run.click(on_gpu(ui.run_comparison), inputs, outputs, concurrency_limit=1, **page)
        submit_event = prompt.submit(on_gpu(ui.run_comparison), inputs, outputs, concurrency_limit=1, **page)
        cancel.click(ui.cancel_run, None, status, cancels=[run_event, submit_event], queue=False, **page)
        upload.upload(ui.replay, upload, [status, *results.components()], **page)
        inspect = results.inspect_request
        inspect.change(ui.inspect, inspect, results.inspector_panels(), queue=False, **page)
        demo.load(ui.startup, None, [status, *results.components(), prompt, lesson], **page)
        bench_outputs = [bench_status, bench_nfe, bench_wall, bench_scaling, bench_energy, bench_table]
        demo.load(ui.benchmark_views, None, bench_outputs, **page)
        bench_upload.upload(ui.benchmark_views, bench_upload, bench_outputs, **page)
        bench_model.change(ui.bundled_benchmark_views, bench_model, bench_outputs, **page)
        compare, generate = make_endpoints(ui.MODELS)
        gr.api(on_gpu(compare), api_name="compare", concurrency_limit=1)
        gr.api(on_gpu(generate), api_name="generate", concurrency_limit=1)
    return demo


demo = build_demo()

if __name__ == "__main__":
    # S2D2_LOG_LEVEL=DEBUG logs one line per model forward (s2d2.forwards), to watch what the server decodes.
    logging.basicConfig(format="%(created).3f %(name)s %(message)s")
    logging.getLogger("s2d2").setLevel(os.environ.get("S2D2_LOG_LEVEL", "WARNING"))
    demo.queue(max_size=32, default_concurrency_limit=1).launch(
        server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
        css_paths=[ui.ASSETS / "style.css"],
        js=player.script(),
        theme=gr.themes.Soft(),
        mcp_server=True,
    )
