"""``python -m s2d2.lm_eval``: lm-eval's own command line, with the ``s2d2`` model and the project's tasks.

Every flag is lm-eval's (the ``lm-eval run`` subcommand, and ``ls`` / ``validate``);
this module adds three things:

- the project's task directory (``s2d2_arith``, ``s2d2_team``) as ``--include_path``
  unless one is given (lm-eval takes a single include path, so with your own the
  project's tasks are reachable as ``--tasks <path to their YAML>``);
- when every task asked for is one of the project's, lm-eval indexes only the
  project's task directory, not its own thousands of task files (8 s a run);
- the decode metrics: lm-eval's ``simple_evaluate`` is replaced by
  :func:`simple_evaluate`, which builds the ``s2d2`` model itself so that it can
  read the model's statistics afterwards and write them into the results before
  the CLI prints and saves them (:mod:`.metrics`).

Under ``accelerate launch`` lm-eval shards documents over processes through the
model's ``rank``/``world_size`` and gathers the task metrics on rank 0; the
decode statistics are gathered the same way, and rank 0 writes the merged results.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ... import DEFAULT_MODEL
from .metrics import attach_decode_metrics, merge_stats
from .model import S2D2LM

TASKS_DIR = Path(__file__).resolve().parent / "tasks"


def simple_evaluate(model="s2d2", **kwargs):
    """``lm_eval.simple_evaluate`` with the decode metrics added when the model is ``s2d2``.

    Takes the same (keyword) arguments; ``model`` may be ``"s2d2"`` (built here from ``model_args``,
    a ``key=value,...`` string or a dict) or an :class:`S2D2LM`. Any other model is passed
    through unchanged. Returns the results on rank 0 and ``None`` on the other ranks.
    """
    from lm_eval.evaluator import simple_evaluate as lm_eval_simple_evaluate
    from lm_eval.utils import simple_parse_args_string

    if model == "s2d2":
        model_args = kwargs.get("model_args") or {}
        if isinstance(model_args, str):
            model_args = simple_parse_args_string(model_args)
        # Named explicitly so lm-eval's results and output folder say which checkpoint ran.
        kwargs["model_args"] = model_args = {"pretrained": DEFAULT_MODEL, **model_args}
        # lm-eval's own settings (--device, --batch_size) apply unless model_args says otherwise.
        extra = {k: kwargs.get(k) for k in ("batch_size", "max_batch_size", "device") if k not in model_args}
        lm = S2D2LM.create_from_arg_obj(model_args, extra)
    elif isinstance(model, S2D2LM):
        lm = model
    else:
        return lm_eval_simple_evaluate(model=model, **kwargs)
    lm.reset_decode_stats()
    results = lm_eval_simple_evaluate(model=lm, **kwargs)
    per_rank = lm.gather_object(dict(lm.decode_stats))
    if results is None:
        return None
    if model == "s2d2":
        results["config"]["model"] = "s2d2"
        tracker = kwargs.get("evaluation_tracker")
        if tracker is not None:
            tracker.general_config_tracker.model_source = "s2d2"
    return attach_decode_metrics(results, merge_stats(per_rank), kwargs.get("samples"))


def with_project_tasks(argv: list[str]) -> list[str]:
    """``argv`` with the project's task directory as ``--include_path`` unless one is given or help is asked."""
    if not argv or argv[0] in ("-h", "--help") or any(a.split("=")[0] == "--include_path" for a in argv):
        return argv
    return [*argv, "--include_path", str(TASKS_DIR)]


def asks_only_project_tasks(argv: list[str]) -> bool:
    """Whether ``argv`` reads tasks from the project's directory and names only tasks found there."""
    values = {}
    for i, arg in enumerate(argv):
        key, _, value = arg.partition("=")
        if key in ("--tasks", "--include_path"):
            values[key] = value or (argv[i + 1] if i + 1 < len(argv) else "")
    ours = {path.stem for path in TASKS_DIR.glob("*.yaml")}
    names = {name.strip() for name in values.get("--tasks", "").split(",") if name.strip()}
    return values.get("--include_path") == str(TASKS_DIR) and bool(names) and names <= ours


def main(argv: list[str] | None = None) -> None:
    import lm_eval
    import lm_eval.tasks
    from lm_eval.__main__ import cli_evaluate

    argv = with_project_tasks(list(sys.argv[1:] if argv is None else argv))
    lm_eval.simple_evaluate = simple_evaluate
    if asks_only_project_tasks(argv):
        # Indexing lm-eval's own thousands of task files takes about 8 s of a run that needs none of them.
        lm_eval.tasks.TaskManager = project_task_manager(lm_eval.tasks.TaskManager)
    sys.argv = ["python -m s2d2.lm_eval", *argv]
    try:
        cli_evaluate()
    except (ValueError, OSError) as err:  # bad model_args, unknown task, unreadable checkpoint: one line
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    finally:
        close_process_group()


def project_task_manager(task_manager: type) -> type:
    """lm-eval's ``TaskManager`` made to index the include path only, not lm-eval's own tasks."""

    class ProjectTaskManager(task_manager):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "include_defaults": False})

    return ProjectTaskManager


def close_process_group() -> None:
    """Under ``accelerate launch``, end the process group before the interpreter does: left to exit-time
    teardown, a rank occasionally aborted ("terminate called without an active exception") after writing
    its results, and the launcher reported the whole run as failed."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
