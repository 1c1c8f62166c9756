"""Golden forward counts and outputs from the authors' official S2D2 code, for tests/test_official_counts.py.

The official research code (GitHub ``phymhan/S2D2``: ``SDAR/``, ``Fast-dLLM-v2/``,
``LLaDA2/``) is never part of this repository. Check it out yourself and point
this script at it; the official model files need transformers 4.56 (not the 5.x
the engine runs on), so give a folder holding that release too:

    pip install --no-deps --target /tmp/tf456 transformers==4.56.2 tokenizers==0.22.1 \\
        huggingface_hub==0.35.3 einops
    python scripts/official_counts.py --official-dir /path/to/S2D2 --official-pythonpath /tmp/tf456

It writes the test suite's tiny random checkpoints (the same writers and seeds
as ``tests/conftest.py`` and ``tests/checkpoints.py``), runs the official
generation functions on them in a second process, and stores per run the
settings, the prompt, the forwards per kind and the output ids in
``tests/data/official_counts.json``, with each checkpoint's SHA-256 so the test
knows it rebuilt the same weights.

What the small adapters below change, and why:

- SDAR's official code drives the remote ``modeling_sdar.py`` (not in that
  repository): a stock Qwen3 network behind its interface (``store_kv``, 0/1
  masks read as booleans, as that file's SDPA path reads them);
- every family's verifier distribution ``q`` is taken at temperature 0 (one-hot
  on its argmax), so the official random acceptance ``rand < q/p`` becomes
  deterministic greedy acceptance, the engine's ``acceptance="greedy"``;
- LLaDA2's 0/1 prefill mask is made additive (block-causal), as the engine's
  prefill is; ``--llada2-prefill as_run`` keeps the official model file's
  reading (0/1 added to the scores) to measure that difference
  (docs/ALGORITHM.md).

Forwards are counted by kind from the call's own arguments: a KV-storing call
is the prefill (the first, when the prompt has whole blocks) or a commit; a
verifier is a ``2B``-row call (SDAR, LLaDA2) or a causal ``block_size=1`` call
(Fast-dLLM v2); everything else is a draft.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "official_counts.json"
KINDS = ("prefill", "draft", "verify", "commit")
PROMPT_LENGTHS = (5, 13, 16)
BUDGETS = (10, 21)

# Engine settings (flat names, config_from_settings) of each family's configurations; all greedy.
CONFIGURATIONS = {
    "sdar": {
        "score-always-cache": dict(
            method="s2d2", block_length=4, steps=4, threshold=0.85, s2d2_rule="dynamic", cache_ver=True,
            draft_ver=True, policy="score", score="static", c=0.0, tau_score=0.0, acceptance="greedy",
        ),
        "score-sometimes": dict(
            method="s2d2", block_length=8, steps=8, threshold=0.5, s2d2_rule="dynamic", policy="score",
            score="static", c=0.6, tau_score=0.0, acceptance="greedy",
        ),
    },
    "fast_dllm_v2": {
        "hysteresis-sub4-block-cache": dict(
            method="s2d2", block_length=8, sub_block_length=4, steps=4, threshold=0.9, policy="hysteresis",
            score="static", c=0.2, tau_on=0.0, tau_off=-0.5, acceptance="greedy", use_block_cache=True,
        ),
        "hysteresis-sub4-no-block-cache": dict(
            method="s2d2", block_length=8, sub_block_length=4, steps=4, threshold=0.9, policy="hysteresis",
            score="static", c=0.2, tau_on=0.0, tau_off=-0.5, acceptance="greedy", use_block_cache=False,
        ),
        "min-span-cache-block-cache": dict(
            method="s2d2", block_length=8, steps=8, threshold=0.9, policy="min_span", tau_span=2,
            cache_ver=True, acceptance="greedy", use_block_cache=True,
        ),
    },
    "llada2": {
        "conservative": dict(
            method="s2d2", block_length=8, steps=8, threshold=0.95, edit_threshold=0.9, policy="score",
            score="static", c=4.0, tau_score=-5.0, acceptance="greedy",
        ),
        "score-sometimes-post-steps": dict(
            method="s2d2", block_length=8, steps=8, threshold=0.7, edit_threshold=0.5, max_post_steps=2,
            policy="score", score="static", c=0.6, tau_score=0.0, acceptance="greedy",
        ),
    },
}  # fmt: skip


def official_kwargs(family: str, s: dict) -> dict:
    """The official generation function's keyword arguments for engine settings ``s``."""
    policy = {"score": "score_threshold", "hysteresis": "score_hysteresis", "min_span": "mask_span_length"}[s["policy"]]
    common = dict(
        temperature=0.0,
        do_verify_policy=policy,
        do_verify_score_type=f"difference_{s.get('score', 'static')}",
        score_penalty_coef=s.get("c", 1.0),
        do_verify_score_threshold=s.get("tau_score", 0.0),
        hysteresis_threshold_on=s.get("tau_on", 0.0),
        hysteresis_threshold_off=s.get("tau_off", -1.0),
        min_ssd_span_length=s.get("tau_span", 1),
        token_acceptance_estimator="soft_entropy_negexp",
        ssd_entropy_temperature=1.0,
    )
    if family == "sdar":
        return common | dict(
            block_length=s["block_length"], denoising_steps=s["steps"], remasking_strategy="low_confidence_dynamic",
            confidence_threshold=s["threshold"], cache_ver=s.get("cache_ver", False),
            draft_ver=s.get("draft_ver", False), top_p=1.0, top_k=0, do_sample=False,
        )  # fmt: skip
    if family == "fast_dllm_v2":
        return common | dict(
            block_size=s["block_length"], small_block_size=s.get("sub_block_length", s["block_length"]),
            threshold=s["threshold"], top_p=1.0, cache_ver=s.get("cache_ver", False),
            draft_ver=s.get("draft_ver", False), use_block_cache=s["use_block_cache"], stop_token=-1,
        )  # fmt: skip
    return common | dict(
        block_length=s["block_length"], threshold=s["threshold"], editing_threshold=s["edit_threshold"],
        max_post_steps=s.get("max_post_steps", 0), num_to_transfer=1, eos_early_stop=False, eos_id=-1,
    )  # fmt: skip


# -- phase 1, in the engine's environment: checkpoints, prompts, jobs --------------------------------------------


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_checkpoints(folder: Path) -> dict[str, str]:
    """The test suite's tiny random checkpoints, by family (the writers and seeds of tests/conftest.py)."""
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    from checkpoints import WRITERS
    from conftest import TINY, write_sdar_checkpoint

    from s2d2.training.train import build_tokenizer

    tokenizer = build_tokenizer(TINY)
    paths = {"sdar": write_sdar_checkpoint(folder / "sdar")}
    paths.update({family: write(folder / family, tokenizer) for family, write in WRITERS.items()})
    return paths


def prompts(path: str, seed: int) -> tuple[list[list[int]], int]:
    """Random prompts of ordinary tokens at :data:`PROMPT_LENGTHS`, and the checkpoint's mask id."""
    from s2d2.models import load_model

    model = load_model(path, device="cpu")
    rng = random.Random(seed)
    special = set(model.tokenizer.all_special_ids)
    vocab = [i for i in range(len(model.tokenizer)) if i not in special]
    return [[rng.choice(vocab) for _ in range(n)] for n in PROMPT_LENGTHS], model.mask_token_id


def jobs(paths: dict[str, str]) -> list[dict]:
    out = []
    for seed, (family, configurations) in enumerate(CONFIGURATIONS.items()):
        family_prompts, mask_id = prompts(paths[family], seed)
        for name, settings in configurations.items():
            for prompt in family_prompts:
                for budget in BUDGETS:
                    run = {**settings, "max_new_tokens": budget}
                    out.append(dict(family=family, name=name, path=paths[family], mask_id=mask_id,
                                    settings=run, prompt_ids=prompt))  # fmt: skip
    return out


def bundled_llada2_jobs(problems: int) -> list[dict]:
    """The bundled LLaDA2 model on held-out problems at the LLaDA2 presets, greedy (``--llada2-prefill-effect``)."""
    from s2d2.models import BUNDLED_MODELS, load_model
    from s2d2.study.evaluate import heldout_problems

    model = load_model("bundled-llada2", device="cpu")
    presets = {
        "llada2-conservative": dict(threshold=0.95, edit_threshold=0.9, tau_score=-5.0),
        "llada2-quality": dict(threshold=0.7, edit_threshold=0.5, tau_score=0.0),
    }
    return [
        dict(family="llada2", name=name, path=BUNDLED_MODELS["bundled-llada2"], mask_id=model.mask_token_id,
             prompt_ids=model.chat_prompt(problem.prompt),
             settings=dict(method="s2d2", block_length=32, steps=32, policy="score", score="static", c=4.0,
                           acceptance="greedy", max_new_tokens=32, **values))
        for name, values in presets.items()
        for problem in heldout_problems(problems)
    ]  # fmt: skip


def run_phase_two(job_file: Path, official_dir: Path, pythonpath: str, llada2_prefill: str) -> dict:
    """Run the official code on the jobs in a second process (its own transformers); returns its results."""
    command = [sys.executable, __file__, "--official-dir", str(official_dir), "--run-official", str(job_file),
               "--llada2-prefill", llada2_prefill]  # fmt: skip
    subprocess.run(command, check=True, env={**os.environ, "PYTHONPATH": pythonpath})
    return json.loads(job_file.with_suffix(".out.json").read_text())


def prefill_effect(args) -> None:
    """How many official LLaDA2 outputs change when its prefill mask is read as run (0/1 added to the scores)."""
    todo = bundled_llada2_jobs(args.llada2_prefill_effect)
    with tempfile.TemporaryDirectory() as tmp:
        job_file = Path(tmp) / "jobs.json"
        job_file.write_text(json.dumps(todo))
        outputs = {
            reading: [r["output_ids"] for r in run_phase_two(job_file, args.official_dir, args.official_pythonpath,
                                                             reading)["results"]]
            for reading in ("block_causal", "as_run")
        }  # fmt: skip
    for name in dict.fromkeys(job["name"] for job in todo):
        rows = [i for i, job in enumerate(todo) if job["name"] == name]
        same = sum(outputs["block_causal"][i] == outputs["as_run"][i] for i in rows)
        prefilled = sum(len(todo[i]["prompt_ids"]) >= todo[i]["settings"]["block_length"] for i in rows)
        print(f"{name}: {same}/{len(rows)} official outputs identical with the prefill block-causal and as run "
              f"({prefilled} prompts hold a whole block to prefill)")  # fmt: skip


# -- phase 2, in the official code's environment (transformers 4.56): the official functions ---------------------


class ForwardCounter:
    """Counts an official model's calls by kind."""

    def __init__(self, prefill_expected: bool):
        self.counts = dict.fromkeys(KINDS, 0)
        self.prefill_expected = prefill_expected
        self.calls = 0

    def record(self, stores: bool, verify: bool) -> None:
        if stores:
            kind = "prefill" if self.prefill_expected and self.calls == 0 else "commit"
        else:
            kind = "verify" if verify else "draft"
        self.counts[kind] += 1
        self.calls += 1


def greedy_verifier(module, counter_holder: list) -> None:
    """Make the first ``_probs_from_logits`` after a verifier forward one-hot on its argmax (``q`` at temperature 0).

    The official acceptance ``rand < min(1, q(x)/p(x))`` then accepts exactly the drafts equal to
    ``argmax q`` and resamples ``argmax q`` at the first rejection: greedy acceptance.
    """
    import torch

    original = module._probs_from_logits

    def probs(logits_2d, *args, **kwargs):
        if counter_holder and counter_holder[0]:
            counter_holder[0] = False
            return torch.nn.functional.one_hot(logits_2d.argmax(-1), logits_2d.shape[-1]).to(torch.float32)
        return original(logits_2d, *args, **kwargs)

    module._probs_from_logits = probs


def load_sdar(path: str):
    """SDAR's remote-code interface over stock ``Qwen3ForCausalLM`` (``modeling_sdar.py`` is not in the
    official repository): ``store_kv`` keeps or drops the call's KV, 0/1 masks are read as booleans."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = json.loads((Path(path) / "config.json").read_text())
    fields = {k: v for k, v in config.items() if k not in ("model_type", "architectures", "auto_map", "torch_dtype")}
    stock = Qwen3ForCausalLM.from_pretrained(path, config=Qwen3Config(**fields), torch_dtype=torch.float32)
    stock.config._attn_implementation = "sdpa"

    class SDARInterface(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.stock = stock.eval()
            self.on_call = None

        @property
        def device(self):
            return torch.device("cpu")

        def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=True,
                    store_kv=False):  # fmt: skip
            n = input_ids.shape[1]
            allowed = attention_mask.bool().reshape(n, -1)
            additive = torch.zeros(allowed.shape, dtype=torch.float32).masked_fill(
                ~allowed, torch.finfo(torch.float32).min
            )
            before = past_key_values.get_seq_length()
            out = self.stock(input_ids=input_ids, attention_mask=additive[None, None], position_ids=position_ids,
                             past_key_values=past_key_values, use_cache=True)  # fmt: skip
            if not store_kv:
                past_key_values.crop(before)
            self.on_call(store_kv, n == 2 * self.block_length)
            return out

    return SDARInterface()


def run_official(job: dict, official_dir: Path, llada2_prefill: str) -> dict:
    import torch

    family, s, prompt = job["family"], job["settings"], job["prompt_ids"]
    B = s["block_length"]
    kwargs = official_kwargs(family, s)
    verified = [False]
    folder = {"sdar": "SDAR", "fast_dllm_v2": "Fast-dLLM-v2", "llada2": "LLaDA2"}[family]
    sys.path.insert(0, str(official_dir / folder))
    input_ids = torch.tensor([prompt])
    torch.manual_seed(0)
    if family == "sdar":
        import generate_ssd_policy as official

        counter = ForwardCounter(prefill_expected=len(prompt) >= B)
        model = load_sdar(job["path"])
        model.block_length = B

        def on_call(stores, verify):
            counter.record(stores, verify)
            verified[0] = verify

        model.on_call = on_call
        greedy_verifier(official, verified)
        with torch.no_grad():
            x = official.block_diffusion_generate(
                model, input_ids, mask_id=job["mask_id"], gen_length=s["max_new_tokens"], **kwargs
            )
        output = x[0, len(prompt) :].tolist()
    elif family == "fast_dllm_v2":
        import generate_policy_utils as official
        from configuration_fast import Fast_dLLM_QwenConfig
        from modeling_fast import Fast_dLLM_QwenForCausalLM

        counter = ForwardCounter(prefill_expected=len(prompt) > B)
        config = Fast_dLLM_QwenConfig.from_pretrained(job["path"])
        model = Fast_dLLM_QwenForCausalLM.from_pretrained(job["path"], config=config, torch_dtype=torch.float32).eval()
        forward = model.forward

        def counted(*args, **kw):
            verify = kw.get("block_size") == 1 and not kw.get("update_past_key_values")
            counter.record(bool(kw.get("update_past_key_values")), verify)
            verified[0] = verify
            return forward(*args, **kw)

        model.forward = counted
        greedy_verifier(official, verified)
        with torch.no_grad():
            x = official.generate_ssd_policy(
                model, input_ids, max_new_tokens=s["max_new_tokens"], mask_id=job["mask_id"], **kwargs
            )
        output = x[0, len(prompt) :].tolist()
    else:
        import generate_utils as official
        from configuration_llada2_moe import LLaDA2MoeConfig
        from modeling_llada2_moe_cache import LLaDA2MoeModelLM

        counter = ForwardCounter(prefill_expected=len(prompt) >= B)
        config = LLaDA2MoeConfig.from_pretrained(job["path"])
        model = LLaDA2MoeModelLM.from_pretrained(job["path"], config=config, torch_dtype=torch.float32).eval()
        forward = model.forward

        def counted(*args, **kw):
            stores = bool(kw.get("store_kv"))
            first = counter.calls == 0 and counter.prefill_expected
            if stores and first and llada2_prefill == "block_causal":
                mask = kw["attention_mask"]
                kw["attention_mask"] = torch.zeros_like(mask).masked_fill(mask == 0, torch.finfo(mask.dtype).min)
            verify = args[0].shape[1] == 2 * B and not stores
            counter.record(stores, verify)
            verified[0] = verify
            return forward(*args, **kw)

        model.forward = counted
        greedy_verifier(official, verified)
        with torch.no_grad():
            x, _ = official.generate_ssd_policy(
                model, input_ids, gen_length=s["max_new_tokens"], mask_id=job["mask_id"], **kwargs
            )
        output = x[0, len(prompt) :].tolist()
    sys.path.remove(str(official_dir / folder))
    for name in ("generate_ssd_policy", "generate_policy_utils", "generate_utils"):
        sys.modules.pop(name, None)
    return {"forwards": counter.counts, "output_ids": output}


def official_phase(jobs_file: Path, official_dir: Path, llada2_prefill: str) -> None:
    import torch
    import transformers

    torch.set_num_threads(1)
    all_jobs = json.loads(jobs_file.read_text())
    results = [run_official(job, official_dir, llada2_prefill) for job in all_jobs]
    jobs_file.with_suffix(".out.json").write_text(json.dumps({"transformers": transformers.__version__,
                                                              "results": results}))  # fmt: skip


# -- the command ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--official-dir", type=Path, required=True, help="your checkout of github.com/phymhan/S2D2")
    parser.add_argument("--official-pythonpath", default="", help="folder with transformers 4.56 for the official code")
    parser.add_argument("--llada2-prefill", choices=("block_causal", "as_run"), default="block_causal")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--llada2-prefill-effect", type=int, metavar="N",
                        help="instead: N held-out problems per task family on the bundled LLaDA2, prefill mask as run "
                        "against block-causal; prints how many official outputs stay the same")  # fmt: skip
    parser.add_argument("--run-official", type=Path, help=argparse.SUPPRESS)  # the second process's job file
    args = parser.parse_args(argv)
    if args.run_official:
        official_phase(args.run_official, args.official_dir.resolve(), args.llada2_prefill)
        return
    if args.llada2_prefill_effect:
        prefill_effect(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        paths = write_checkpoints(folder)
        todo = jobs(paths)
        job_file = folder / "jobs.json"
        job_file.write_text(json.dumps(todo))
        official = run_phase_two(job_file, args.official_dir, args.official_pythonpath, args.llada2_prefill)
        checkpoints = {f: sha256(Path(p) / "model.safetensors") for f, p in paths.items()}
    revision = subprocess.run(
        ["git", "-C", str(args.official_dir), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    runs = [
        {k: job[k] for k in ("family", "name", "settings", "prompt_ids")} | result
        for job, result in zip(todo, official["results"])
    ]
    given = ["--official-dir", "OFFICIAL_DIR", "--official-pythonpath", "TRANSFORMERS_4_56"]
    if args.llada2_prefill != "block_causal":
        given += ["--llada2-prefill", args.llada2_prefill]
    data = {
        "command": shlex.join(["python", "scripts/official_counts.py", *given]),
        "official": {
            "repository": "github.com/phymhan/S2D2",
            "commit": revision.stdout.strip() or "unknown",
            "transformers": official["transformers"],
            "llada2_prefill": args.llada2_prefill,
        },
        "checkpoints_sha256": checkpoints,
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{len(runs)} runs written to {args.out}")


if __name__ == "__main__":
    main()
