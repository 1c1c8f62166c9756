"""The dashboard's API: ``/compare`` (AR, baseline and S2D2) and ``/generate`` (one method).

Both take the prompt, a public model id, a preset and any setting of
:data:`s2d2.settings.SETTINGS` by its name, with the dashboard's defaults for
those left out, so a call through ``gradio_client`` (or an MCP client) means
exactly what the same settings mean on the page. Their signatures are built
from the settings table, so a new config field is a new named parameter.
"""

from __future__ import annotations

import inspect

import gradio as gr

from s2d2 import decode as decoding
from s2d2.config import COMMIT_RULES, METHODS, PRESETS

from .bundle import RUN_OF_METHOD
from .runner import (
    BASELINE_RULE,
    BUNDLED,
    TIMING_NOTE,
    ModelCache,
    build_configs,
    check_prompt,
    model_ids,
    panel_settings,
    resolve,
    run_all,
    warm_up,
)
from .tables import stats_table

_TYPES = {int: int, float: float, bool: bool, str: str, tuple: list[int]}


def _setting_parameters() -> list[inspect.Parameter]:
    params = [
        inspect.Parameter(
            BASELINE_RULE[0], inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None, annotation=str | None
        )
    ]
    for s in panel_settings():
        params.append(
            inspect.Parameter(
                s.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None, annotation=_TYPES[s.kind] | None
            )
        )
    return params


def _settings_doc() -> str:
    lines = [f"    {BASELINE_RULE[0]}: the baseline's rule, also S2D2's when it skips ({', '.join(COMMIT_RULES)})"]
    for s in panel_settings():
        choices = f" ({', '.join(map(str, s.choices))})" if s.choices else ""
        lines.append(f"    {s.name}: {s.label} — {s.help}{choices}")
    return "\n".join(lines)


def _with_signature(body, leading: list[inspect.Parameter], doc: str):
    """``body(values)`` as a function with a real signature (what ``gr.api`` and MCP read) and a
    docstring listing every setting; Gradio calls it positionally, Python callers by name."""
    signature = inspect.Signature(leading + _setting_parameters(), return_annotation=dict)

    def endpoint(*args, **kwargs) -> dict:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return body(dict(bound.arguments))

    endpoint.__name__ = endpoint.__qualname__ = body.__name__
    endpoint.__signature__ = signature
    endpoint.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()} | {"return": dict}
    args = "\n".join(f"    {p.name}: {d}" for p, d in _leading_docs(leading))
    endpoint.__doc__ = f"{doc}\n\nArgs:\n{args}\n{_settings_doc()}\n"
    return endpoint


def _leading_docs(leading: list[inspect.Parameter]):
    docs = {
        "prompt": "the question to decode (the chat template is applied)",
        "model": f"a public model id: {', '.join(model_ids())}",
        "method": f"one of {', '.join(METHODS)}",
        "preset": f"custom (the dashboard defaults) or a paper preset: {', '.join(PRESETS)}",
    }
    return [(p, docs[p.name]) for p in leading]


def _split(kwargs: dict) -> tuple[str, str, str | None, dict]:
    prompt, model = kwargs.pop("prompt"), kwargs.pop("model")
    preset = kwargs.pop("preset", None) or "custom"
    given = {k: v for k, v in kwargs.items() if v is not None}
    return check_prompt(prompt), model, preset, given


def make_endpoints(models: ModelCache):
    """The two endpoint functions, bound to the app's model cache; errors are one-line ``gr.Error``s."""

    def compare(kwargs: dict) -> dict:
        try:
            prompt, model_id, preset, given = _split(kwargs)
            configs = build_configs(resolve(preset, given))
            traces = run_all(models.get(model_id), prompt, configs)
        except ValueError as err:
            raise gr.Error(str(err), print_exception=False) from None
        return {
            "runs": {name: t.to_dict() for name, t in traces.items()},
            "table": stats_table(traces).to_dict(orient="records"),
            "timing": TIMING_NOTE,
        }

    def generate(kwargs: dict) -> dict:
        try:
            method = kwargs.pop("method") or "s2d2"
            prompt, model_id, preset, given = _split(kwargs)
            if method not in METHODS:
                raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
            values = resolve(preset, given)
            if method in COMMIT_RULES:
                values[BASELINE_RULE[0]] = method
            config = build_configs(values)[RUN_OF_METHOD[method]]
            model = models.get(model_id)
            warm_up(model, prompt, config)
            trace = decoding.generate(model, prompt, config)
        except ValueError as err:
            raise gr.Error(str(err), print_exception=False) from None
        return {"trace": trace.to_dict(), "timing": TIMING_NOTE}

    kw = inspect.Parameter.POSITIONAL_OR_KEYWORD
    prompt = inspect.Parameter("prompt", kw, annotation=str)
    model = inspect.Parameter("model", kw, default=BUNDLED, annotation=str)
    preset = inspect.Parameter("preset", kw, default="custom", annotation=str)
    method = inspect.Parameter("method", kw, default="s2d2", annotation=str)
    compare = _with_signature(
        compare,
        [prompt, model, preset],
        "Decode a prompt with AR, a diffusion baseline and S2D2 (same seed); returns the three traces "
        "(every forward, draft, verification and commit) under 'runs' and the stats table under 'table'.",
    )
    generate = _with_signature(
        generate,
        [prompt, model, method, preset],
        "Decode a prompt with one method; returns its trace (every forward, draft, verification and commit).",
    )
    return compare, generate
