"""Decode statistics next to a task's accuracy in lm-eval's results.

lm-eval 0.4.x lets a *task* define metrics (``process_results``), not a model:
there is no hook through which an LM adds a number to the results. So the
``s2d2`` model keeps every request's statistics itself (keyed by task and
document) and :func:`attach_decode_metrics` writes them into the results dict
that ``simple_evaluate`` returns, before anything is printed or saved:

- per task, in ``results["results"][task]`` as ``"<name>,none"`` entries (the
  filter-independent slot), so they appear in lm-eval's table and JSON;
- per sample, as ``<name>`` keys of each logged sample (``--log_samples``).

Per sample the numbers are sums over the document's requests (a multiple-choice
document sends one loglikelihood request per choice, a generation document one
per repeat). Per task: means over documents, and pooled ratios for tokens per
forward and acceptance (total tokens over total forwards, total accepted drafts
over total verified drafts), the way :func:`s2d2.study.evaluate.summarize_method`
pools them.
"""

from __future__ import annotations

# name -> (higher is better, description); docs/EVALUATION.md explains each.
METRICS = {
    "s2d2_nfe": (False, "model forwards per document"),
    "s2d2_tokens": (True, "generated tokens per document"),
    "s2d2_tpf": (True, "generated tokens per forward (pooled)"),
    "s2d2_wall_seconds": (False, "decode wall seconds per document"),
    "s2d2_tokens_per_second": (True, "generated tokens per wall second (pooled)"),
    "s2d2_acceptance_rate": (True, "accepted drafts over verified drafts (pooled; S2D2 only)"),
    "s2d2_mean_accepted_length": (True, "accepted drafts per verification (pooled; S2D2 only)"),
}
SUMMED = ("nfe", "generated_tokens", "wall_seconds", "verifications", "drafts_verified", "drafts_accepted")


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


def _metrics(totals: dict, documents: int) -> dict:
    """The metric values of ``totals`` summed over ``documents`` documents."""
    values = {
        "s2d2_nfe": totals["nfe"] / documents,
        "s2d2_tokens": totals["generated_tokens"] / documents,
        "s2d2_tpf": _ratio(totals["generated_tokens"], totals["nfe"]),
        "s2d2_wall_seconds": totals["wall_seconds"] / documents,
        "s2d2_tokens_per_second": _ratio(totals["generated_tokens"], totals["wall_seconds"]),
        "s2d2_acceptance_rate": _ratio(totals["drafts_accepted"], totals["drafts_verified"]),
        "s2d2_mean_accepted_length": _ratio(totals["drafts_accepted"], totals["verifications"]),
    }
    return {name: value for name, value in values.items() if value is not None}


def _totals(requests: list[dict]) -> dict:
    return {key: sum(r.get(key, 0) for r in requests) for key in SUMMED}


def merge_stats(per_rank: list[dict]) -> dict[tuple, list[dict]]:
    """One ``(task, doc_id) -> requests`` table from every process's (documents are sharded, so keys are disjoint)."""
    merged: dict[tuple, list[dict]] = {}
    for stats in per_rank:
        for key, requests in stats.items():
            merged.setdefault(key, []).extend(requests)
    return merged


def attach_decode_metrics(results: dict, stats: dict[tuple, list[dict]], samples: dict | None = None) -> dict:
    """Write the per-task and per-sample decode metrics into lm-eval's ``results`` (in place).

    ``samples`` is lm-eval's ``--samples`` selection (task -> document indices): requests then
    number the selected documents 0, 1, ... and logged samples carry ``indices[that number]``."""
    by_task: dict[str, dict[int, list[dict]]] = {}
    for (task, doc_id), requests in stats.items():
        indices = (samples or {}).get(task)
        by_task.setdefault(task, {})[indices[doc_id] if indices else doc_id] = requests
    for task, documents in by_task.items():
        if task not in results.get("results", {}):
            continue
        totals = _totals([r for requests in documents.values() for r in requests])
        for name, value in _metrics(totals, len(documents)).items():
            results["results"][task][f"{name},none"] = value
        results.setdefault("higher_is_better", {}).setdefault(task, {}).update(
            {name: better for name, (better, _) in METRICS.items()}
        )
        for sample in results.get("samples", {}).get(task, []):
            requests = documents.get(sample["doc_id"])
            if requests:
                sample.update(_metrics(_totals(requests), 1))
    return results
