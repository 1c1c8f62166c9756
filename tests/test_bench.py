"""The benchmark runner end to end on a tiny grid, single process and sharded."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from two_processes import launch_two_processes

from components import benchmarks
from components.benchmarks import frontier_figure, load_summary, summary_frame
from components.study import energy_figure, scaling_figure
from s2d2.study import bench, report, results
from s2d2.study.evaluate import ProblemResult

ROOT = Path(__file__).resolve().parents[1]
ARGS = ["--grid", "tiny", "--problems", "5", "--max-new-tokens", "12"]


def figure_data(html: Path) -> list[dict]:
    """The traces of the plotly figure a written HTML page draws (the list ``Plotly.newPlot`` receives)."""
    text = html.read_text()
    return json.JSONDecoder().raw_decode(text, text.index("[", text.index("Plotly.newPlot(")))[0]


@pytest.fixture(scope="module")
def single(tiny_path, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench1")
    bench.main(["--model", tiny_path, *ARGS, "--out", str(out)])
    return out


def test_tiny_grid_writes_table_csv_and_figures(single):
    rows = list(csv.DictReader((single / "runs.csv").open()))
    assert len(rows) == 2 * 5 * 3  # 2 methods × 5 problems × 3 families
    assert {r["method"] for r in rows} == {"AR", "S2D2 B=4 always (c=0)"}
    table = (single / "table.md").read_text()
    table_1 = table.split("\n\n")[0]
    assert table_1.count("\n") == 3 and "| AR |" in table_1 and "speedup vs AR" in table_1
    assert "## AR energy per output token" in table and "## Outputs identical to AR's" in table
    assert "## Where S2D2 pays off" not in table, "the tiny grid has no exact S2D2 row to compare"
    ar_outputs = {(r["family"], r["index"]): r["output"] for r in rows if r["method"] == "AR"}
    same = sum(ar_outputs[(r["family"], r["index"])] == r["output"] for r in rows if r["method"] != "AR")
    assert f"| S2D2 B=4 always (c=0) | {same}/15 (" in table
    summary = load_summary(single / "summary.json")
    ar, s2d2 = summary["methods"]
    assert ar["speedup_nfe_vs_ar"] == 1.0
    forwards = {m: sum(int(r["nfe"]) for r in rows if r["method"] == m) for m in ("AR", "S2D2 B=4 always (c=0)")}
    assert s2d2["speedup_nfe_vs_ar"] == pytest.approx(forwards["AR"] / forwards["S2D2 B=4 always (c=0)"])
    assert s2d2["nfe_per_problem"] == pytest.approx(forwards["S2D2 B=4 always (c=0)"] / 15)
    assert summary["meta"]["problems_per_family"] == 5
    benchmarks.main([str(single)])  # the figures are drawn from summary.json, outside the engine
    families = summary["meta"]["families"]
    drawn = {
        "frontier_nfe": frontier_figure(summary["methods"], "nfe"),
        "frontier_wall": frontier_figure(summary["methods"], "wall"),
        "scaling": scaling_figure(summary["methods"], summary["meta"], families),
        "energy": energy_figure(summary["methods"], families),
    }
    for name, figure in drawn.items():
        assert figure_data(single / f"{name}.html") == json.loads(figure.to_json())["data"], name
    nfe_markers = {trace["name"]: trace["x"] for trace in figure_data(single / "frontier_nfe.html")}
    assert nfe_markers == {
        "AR": [ar["nfe_per_problem"]],
        "S2D2 always, stochastic + lookahead": [s2d2["nfe_per_problem"]],
    }
    fig = frontier_figure(summary["methods"], "nfe")
    assert sorted(t.name for t in fig.data) == ["AR", "S2D2 always, stochastic + lookahead"]
    assert list(summary_frame(summary["methods"])["method"]) == ["AR", "S2D2 B=4 always (c=0)"]


def test_report_rebuilds_the_table_from_the_saved_runs(single, tmp_path):
    """python -m s2d2.study.report rewrites table.md from runs.csv and summary.json alone, as the run wrote it."""
    for name in ("runs.csv", "summary.json"):
        (tmp_path / name).write_bytes((single / name).read_bytes())
    report.main([str(tmp_path)])
    assert (tmp_path / "table.md").read_text() == (single / "table.md").read_text()
    assert report.read_runs(tmp_path / "runs.csv") == report.read_runs(single / "runs.csv")
    first = report.read_runs(single / "runs.csv")[0]
    row = next(csv.DictReader((single / "runs.csv").open()))
    assert (first.method, first.family, first.index) == (row["method"], row["family"], int(row["index"]))
    assert first.correct is (row["correct"] == "True") and first.nfe == int(row["nfe"]) > 0
    assert first.ar_energy == float(row["ar_energy"]) and first.output == row["output"]


def test_editing_report_counts_the_outputs_editing_changed():
    def result(method, family, index, output, correct, energy):
        return ProblemResult(method, family, index, correct, 3, 3, 0.1, 0, 0, 0, 0, 0, output, ar_energy=energy)

    results = [
        result("threshold + editing", "arith", 0, "8", True, 0.1),
        result("threshold + editing", "arith", 1, "5", True, 0.2),
        result("threshold + editing", "chains", 0, "x", False, 0.4),
        result("threshold, no editing", "arith", 0, "8", True, 0.3),
        result("threshold, no editing", "arith", 1, "6", False, 0.5),
        result("threshold, no editing", "chains", 0, "y", False, 0.6),
        result("AR", "arith", 0, "8", True, 0.0),
    ]
    table = report.editing_markdown(results, ["arith", "chains"])
    assert table.splitlines()[-1] == "| threshold | 2/3 (66.7%) | 1 | 1 | 66.7 / 33.3 | 0.150 / 0.400 | 0.400 / 0.600 |"
    assert report.editing_markdown([r for r in results if "no editing" not in r.method], ["arith"]) == ""


def test_sharded_run_over_two_processes_merges_to_the_same_results(single, tiny_path, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    launch_two_processes(["s2d2.study.bench", "--model", tiny_path, *ARGS, "--out", str(tmp_path)], env)
    sharded = json.loads((tmp_path / "summary.json").read_text())
    alone = json.loads((single / "summary.json").read_text())
    assert sharded["meta"]["processes"] == 2
    assert sorted(p.name for p in (tmp_path / "shards").iterdir()) == ["rank0.json", "rank1.json"]
    assert [m["method"] for m in sharded["methods"]] == [m["method"] for m in alone["methods"]]

    assert per_problem(tmp_path) == per_problem(single)


def per_problem(folder: Path) -> list[tuple]:
    keep = ("method", "family", "index", "correct", "tokens", "nfe", "output", "tokens_fed")
    return sorted(tuple(r[k] for k in keep) for r in csv.DictReader((folder / "runs.csv").open()))


def test_batched_run_decodes_every_problem_as_one_at_a_time(single, tiny_path, tmp_path):
    """--batch-size 4: the same outputs and forwards per problem; the batch is recorded in the meta."""
    bench.main(["--model", tiny_path, *ARGS, "--batch-size", "4", "--out", str(tmp_path)])
    assert per_problem(tmp_path) == per_problem(single)
    assert load_summary(tmp_path / "summary.json")["meta"]["batch_size"] == 4


def test_engine_never_imports_gradio_or_plotly():
    code = (
        "import sys, s2d2.decode, s2d2.study.evaluate, s2d2.study.bench, s2d2.training.train, s2d2.models, s2d2.__main__; "
        "print(sorted(m for m in ('gradio', 'plotly') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


def test_dashboard_benchmarks_tab_loads_a_saved_summary(single, tmp_path):
    from components import ui

    status, nfe, wall, scaling, energy, table = ui.benchmark_views(str(single / "summary.json"))
    assert "problems per family" in status
    assert {t.name for t in energy.data} == {"AR"}  # the tiny grid has none of the other Figure 2 methods
    assert list(energy.data[0].x) == ["arith", "team", "chains"]
    assert {t.name for t in nfe.data} == {"AR", "S2D2 always, stochastic + lookahead"} and len(wall.data) == 2
    assert len(table) == 2
    bad = tmp_path / "other.json"
    bad.write_text('{"not": "a summary"}')
    status, *_ = ui.benchmark_views(str(bad))
    assert "No benchmark loaded" in status


def test_every_output_is_scored_for_its_ar_energy_by_a_separate_verifier_forward(single, tiny_path):
    from s2d2 import generate, load_model
    from s2d2.likelihood import ar_logprobs

    rows = list(csv.DictReader((single / "runs.csv").open()))
    summary = load_summary(single / "summary.json")
    assert all(float(r["ar_energy"]) > 0 for r in rows if r["output"])
    model = load_model(tiny_path)
    problem = bench.heldout_problems(5, ["arith"])[0]
    trace = generate(model, problem.prompt, bench.tiny_grid(12)["AR"].replace(seed=0))
    expected = -ar_logprobs(model, trace.prompt_ids, trace.output_ids).logprob / len(trace.output_ids)
    first = next(r for r in rows if r["method"] == "AR" and r["family"] == "arith" and r["index"] == "0")
    assert float(first["ar_energy"]) == pytest.approx(expected, rel=1e-5)
    ar = summary["methods"][0]
    assert ar["ar_energy_by_family"]["arith"] == pytest.approx(
        sum(float(r["ar_energy"]) for r in rows if r["method"] == "AR" and r["family"] == "arith") / 5
    )


def test_tune_dynamic_chooses_the_most_accurate_tau_per_block_size_and_figure_3_follows_it(tiny_path, tmp_path):
    from components.study import scaling_figure

    args = ["--grid", "tiny", "--problems", "1", "--max-new-tokens", "8", "--tune-dynamic", "--dev-problems", "1"]
    bench.main(["--model", tiny_path, *args, "--families", "chains", "--out", str(tmp_path)])
    report = json.loads((tmp_path / "dynamic_tuning.json").read_text())
    assert set(report["chosen"]) == {str(B) for B in results.SCALING_BLOCKS}
    for B, name in report["chosen"].items():
        at_b = [r for r in report["candidates"] if r["method"].startswith(f"dynamic B={B} ")]
        assert len(at_b) == len(bench.DYNAMIC_TAUS)
        assert next(r for r in at_b if r["method"] == name)["accuracy"] == max(r["accuracy"] for r in at_b)
    meta = load_summary(tmp_path / "summary.json")["meta"]
    assert meta["dynamic_best_tau"] == report["chosen"]
    rows = [
        {"method": name, "accuracy_by_family": {"chains": 0.5}, "nfe_by_family": {"chains": 10.0}}
        for name in [*report["chosen"].values(), "S2D2 B=4 always (c=0)", "S2D2 B=32 exact + lookahead"]
    ]
    series = results.scaling_series(rows, {int(B): n for B, n in report["chosen"].items()}, "chains")
    assert [p["block_length"] for p in series["dynamic (best τ on dev)"]] == list(results.SCALING_BLOCKS)
    assert [p["block_length"] for p in series["S2D2 config B (stochastic)"]] == [4]
    assert [p["block_length"] for p in series["S2D2 exact (greedy) + lookahead"]] == [32]
    assert len(scaling_figure(rows, meta, ["chains"]).data) == 3


def test_tune_searches_routers_on_a_disjoint_split_and_adds_the_best_per_block_size(tiny_path, tmp_path):
    args = ["--grid", "tiny", "--problems", "2", "--max-new-tokens", "8", "--tune", "--dev-problems", "1"]
    bench.main(["--model", tiny_path, *args, "--out", str(tmp_path)])
    report = json.loads((tmp_path / "tuning.json").read_text())
    assert set(report["chosen"]) == {"4", "16"}
    assert len(report["candidates"]) == 1 + len(bench.router_candidates(4, 8)) + len(bench.router_candidates(16, 8))
    methods = [m["method"] for m in load_summary(tmp_path / "summary.json")["methods"]]
    for B in ("4", "16"):
        label = report["chosen"][B].split(" ", 1)[1]
        assert f"S2D2 B={B} tuned ({label}) + lookahead" in methods
        assert f"S2D2 B={B} tuned ({label}), greedy acceptance + lookahead" in methods
    test = bench.heldout_problems(500, ["arith", "team", "chains"])
    dev = bench.development_problems(100, ["arith", "team", "chains"], test)
    assert not {p.key for p in dev} & {p.key for p in test}


def test_choose_router_takes_the_cheapest_within_a_point_of_ar():
    rows = [
        {"method": "a", "accuracy": 0.95, "nfe_per_problem": 5.0},
        {"method": "b", "accuracy": 0.985, "nfe_per_problem": 7.0},
        {"method": "c", "accuracy": 0.99, "nfe_per_problem": 9.0},
    ]
    assert bench.choose_router(rows, ar_accuracy=0.99)["method"] == "b"
    assert bench.choose_router(rows, ar_accuracy=1.5)["method"] == "c"  # none qualifies: the most accurate


def test_the_benchmarks_tab_shows_each_bundled_models_grid():
    """The shipped grids of the three bundled models load, each with its own Figure 3 axis and table shape."""
    from components import ui

    for label, path in ui.BENCHMARK_SUMMARIES.items():
        status, nfe, wall, scaling, energy, table = ui.bundled_benchmark_views(label)
        assert "No benchmark loaded" not in status, label
        meta = load_summary(path)["meta"]
        assert meta["families"] == ["arith", "team", "chains"] and len(table) >= 20
        axis = scaling.layout.xaxis.title.text
        assert axis == ("sub-block size (inside 32-token blocks)" if "fast-dllm" in str(path) else "block size B")
        assert {t.name for t in scaling.data} >= {"S2D2 exact (greedy) + lookahead", "dynamic (best τ on dev)"}
