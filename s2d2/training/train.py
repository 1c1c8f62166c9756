"""Train the bundled block-diffusion LM with SDAR's objective.

Each training sequence goes through the model twice in one forward: a noisy
copy, where every block has a random fraction of its answer tokens replaced by
``[MASK]``, and a clean copy. Under :func:`s2d2.masks.training_mask` a noisy
block sees itself bidirectionally and the clean copy of earlier blocks, so the
loss on its masked positions is exactly the denoising problem the decoder
solves. The block size is drawn per batch from the trained sizes; at size 1 the
objective *is* next-token prediction, which is what lets the same weights draft
(B ≥ 2) and verify (B = 1).

``scripts/train_gpu.sh`` runs it for the three bundled models with the exact
flags (LLaDA2.x's third stage: ``scripts/continue_llada2_arith.sh``); each model's ``train_config.json`` holds the step count that reproduces
its run on any machine, and its card (``assets/*/README.md``) tells the lineage.

``--family fastdllm`` and ``--family llada2`` train the other two families'
objectives instead (:mod:`s2d2.training.objectives`) and write the checkpoint in that
family's own layout (:mod:`s2d2.training.layouts`); docs/TRAINING.md describes
them.

Deterministic for a seed on one machine; ``--resume`` continues from the last
checkpoint in ``--out`` (with the checkpoint's tokenizer).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from transformers import AutoTokenizer, GenerationConfig, Qwen3ForCausalLM

from .. import masks
from ..models.sdar import qwen3_config_from_sdar
from ..study.progress import progress_bar
from ..study.tasks import families, split_of
from . import objectives
from .layouts import (
    FAMILIES,
    ExpertBalancer,
    build_model,
    fast_dllm_config,
    llada2_config,
    save_llada2_weights,
    shared_fields,
)
from .tokenizer import MASK, chat_text, train_tokenizer


@dataclass
class TrainConfig:
    """Everything that determines a training run (saved next to the checkpoint)."""

    out: str = "runs/bundled"
    steps: int = 3600
    batch_size: int = 64
    lr: float = 2e-3
    min_lr: float = 1e-4
    warmup: int = 200
    weight_decay: float = 0.05
    grad_clip: float = 1.0
    hidden_size: int = 256
    layers: int = 6
    heads: int = 4
    kv_heads: int = 2
    intermediate_size: int = 768
    max_positions: int = 256
    block_lengths: tuple[int, ...] = (1, 2, 4, 8, 16)
    block_weights: tuple[float, ...] = (0.3, 0.1, 0.2, 0.15, 0.25)
    family_weights: dict = field(default_factory=lambda: {"arith": 0.8, "team": 0.2})
    tokenizer_corpus: int = 20000
    vocab_size: int = 512
    seed: int = 0
    device: str = "auto"
    threads: int = 0
    eval_every: int = 500
    eval_problems: int = 50
    checkpoint_every: int = 250
    stop_after: int = 0  # end the run at this step (0: at --steps); the schedule still follows --steps
    batch_by_family: bool = False  # one family per batch (less padding); the bundled model's first runs mixed them
    init_from: str = ""  # start from this checkpoint's weights and tokenizer (fresh optimizer and schedule)
    loader_workers: int = 0  # >0: worker processes build batches ahead, each step's batch seeded by (seed, step)
    time_budget: float = 0.0  # seconds; >0: --steps is re-fixed early in the run from its speed, to end in time
    # The other families (see s2d2/training/objectives.py); every field below is ignored by --family sdar.
    family: str = "sdar"  # which family's objective and on-disk layout: sdar, fastdllm, llada2
    objective: str = "diffusion"  # fastdllm only: "causal" is stage 1, the plain causal LM that stage 2 adapts
    tokenizer_from: str = ""  # a fresh run takes this checkpoint's tokenizer instead of training one
    bd_size: int = 32  # fastdllm: its one training block size (config.json's bd_size)
    causal_context: float = 0.5  # fastdllm: share of batches whose clean copy is attended causally
    edit_rate: float = 0.1  # llada2: chance that a visible answer token of the noisy copy is corrupted
    experts: int = 8  # llada2: routed experts per MoE layer
    experts_per_token: int = 2
    expert_groups: int = 4
    expert_groups_per_token: int = 2
    expert_size: int = 128  # llada2: each expert's intermediate size (the shared expert's too)


class ProblemStream:
    """An endless, seeded stream of training-split problems as chat texts."""

    def __init__(self, weights: dict[str, float], seed: int):
        self.families = families()
        self.names = list(weights)
        self.weights = [weights[n] for n in self.names]
        self.rng = random.Random(f"train-stream:{seed}")

    def __next__(self) -> tuple[str, str]:
        return self.draw(self.rng.choices(self.names, self.weights)[0])

    def draw(self, name: str) -> tuple[str, str]:
        family = self.families[name]
        while True:
            problem = family.sample(self.rng)
            if split_of(problem.key) == "train":
                return problem.prompt, problem.reference

    def batch(self, size: int, by_family: bool) -> list[tuple[str, str]]:
        """``size`` texts, each of a family drawn by weight, or all of one drawn family.

        One family per batch pads every sequence only to its own family's
        length: a team problem is half as long as a word problem, so a mixed
        batch spends most of its team rows' compute on padding.
        """
        if not by_family:
            return [next(self) for _ in range(size)]
        name = self.rng.choices(self.names, self.weights)[0]
        return [self.draw(name) for _ in range(size)]


def build_tokenizer(cfg: TrainConfig):
    stream = ProblemStream(cfg.family_weights, cfg.seed + 1)
    corpus = [chat_text(*next(stream)) for _ in range(cfg.tokenizer_corpus)]
    return train_tokenizer(corpus, cfg.vocab_size)


def sdar_config(cfg: TrainConfig, tokenizer) -> dict:
    """The checkpoint's ``config.json``, in SDAR's on-disk layout."""
    return {
        "architectures": ["SDARForCausalLM"],
        "model_type": "sdar",
        **shared_fields(cfg, tokenizer),
        "head_dim": cfg.hidden_size // cfg.heads,
        "rope_theta": 10000.0,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": True,
        "use_cache": True,
        "mask_token_id": tokenizer.convert_tokens_to_ids(MASK),
        "block_lengths": list(cfg.block_lengths),
        "torch_dtype": "float32",
    }


def write_random_checkpoint(path: Path, cfg: TrainConfig, seed: int = 0, init_std: float | None = None) -> Path:
    """An untrained checkpoint of ``cfg``'s shape in SDAR's layout, for tests and benchmarks.

    ``init_std`` redraws every weight matrix from N(0, init_std): larger than
    the default initialisation, it makes a random model's predictions sharp and
    context-dependent, so tests comparing decoders are not decided by ties.
    """
    tokenizer = build_tokenizer(cfg)
    config = sdar_config(cfg, tokenizer)
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(qwen3_config_from_sdar(config))
    if init_std is not None:
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() == 2:
                    p.normal_(0, init_std)
    save_checkpoint(model, tokenizer, config, cfg, Path(path))
    return Path(path)


def encode_batch(texts, tokenizer, unit: int, eos_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Chat texts as ``(clean ids (N, L), answer (N, L))``, padded with EOS to a multiple of ``unit``.

    ``answer`` marks the answer tokens and the EOS padding after them: the
    positions every family's objective may corrupt and trains on. The prompt
    stays clean, as in supervised fine-tuning.
    """
    encoded = []
    for prompt, answer in texts:
        prompt_ids = tokenizer(chat_text(prompt))["input_ids"]
        full = tokenizer(chat_text(prompt, answer))["input_ids"]
        encoded.append((len(prompt_ids), full))
    length = unit * math.ceil(max(len(f) for _, f in encoded) / unit)
    clean = torch.full((len(encoded), length), eos_id, dtype=torch.long)
    answer = torch.zeros(len(encoded), length, dtype=torch.bool)
    for row, (prompt_length, full) in enumerate(encoded):
        clean[row, : len(full)] = torch.tensor(full)
        answer[row, prompt_length:] = True
    return clean, answer


def make_batch(texts, tokenizer, block_length: int, mask_id: int, eos_id: int, gen: torch.Generator):
    """Noisy and clean copies of a batch, padded with EOS to whole blocks (at least 16 tokens).

    Returns ``(ids (N, 2L), targets (N, L), loss mask (N, L))``. Only answer
    tokens (and the EOS padding after them) are ever masked.
    """
    clean, answer = encode_batch(texts, tokenizer, max(16, block_length), eos_id)
    length = clean.shape[1]
    blocks = length // block_length
    rate = torch.rand(len(clean), blocks, generator=gen).repeat_interleave(block_length, dim=1)
    noise = (torch.rand(len(clean), length, generator=gen) < rate) & answer
    noisy = torch.where(noise, torch.full_like(clean, mask_id), clean)
    return torch.cat([noisy, clean], dim=1), clean, noise


def masked_loss(model, ids, targets, loss_mask, block_length: int) -> torch.Tensor:
    """Cross-entropy on the masked positions of the noisy copy."""
    length = targets.shape[1]
    device = ids.device
    allowed = masks.training_mask(length, block_length, device)
    attention = masks.additive_mask(allowed, 0, next(model.parameters()).dtype)
    positions = torch.arange(length, device=device).repeat(2)[None].expand(ids.shape[0], -1)
    hidden = model.model(
        input_ids=ids, attention_mask=attention, position_ids=positions, use_cache=False
    ).last_hidden_state
    picked = hidden[:, :length][loss_mask]
    if picked.shape[0] == 0:
        return hidden.sum() * 0.0
    logits = model.lm_head(picked)
    return F.cross_entropy(logits.float(), targets[loss_mask])


def learning_rate(cfg: TrainConfig, step: int) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * min(1.0, progress)))


def save_checkpoint(model, tokenizer, config: dict, cfg: TrainConfig, path: Path) -> None:
    """An HF-format checkpoint in the family's layout: config, safetensors, tokenizer.

    LLaDA2's parameter names are not the stock class's, so its weights are
    renamed and regrouped while saving (:func:`s2d2.training.layouts.save_llada2_weights`).
    """
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    if cfg.family == "llada2":
        tmp.mkdir(parents=True)
        save_llada2_weights(model, config, tmp)
    else:
        model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    eos = config["eos_token_id"]
    GenerationConfig(eos_token_id=eos, pad_token_id=config["pad_token_id"], do_sample=False).save_pretrained(tmp)
    (tmp / "train_config.json").write_text(json.dumps(asdict(cfg), indent=2) + "\n")
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)


def evaluate_ar(model_dir: Path, n: int, device: str, family_names: list[str]) -> dict[str, float]:
    """AR greedy accuracy on ``n`` held-out problems of each family, through the engine."""
    from ..config import DecodeConfig
    from ..models import load_model
    from ..study.evaluate import evaluate, heldout_problems, summarize_method

    adapter = load_model(str(model_dir), device=device)
    ar = {"AR": DecodeConfig(method="ar", max_new_tokens=160)}
    return {
        name: summarize_method("AR", evaluate(adapter, ar, heldout_problems(n, [name]))["AR"]).accuracy
        for name in family_names
    }


def load_initial_weights(model, path: Path) -> None:
    """Copy a checkpoint's weights into ``model``; only the tied output head may be absent from the file."""
    state = load_file(path / "model.safetensors")
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise ValueError(f"{path} does not match this model: missing {missing}, unexpected {unexpected}")
    model.tie_weights()


def checkpoint_config(cfg: TrainConfig, tokenizer) -> dict:
    if cfg.family == "fastdllm":
        return fast_dllm_config(cfg, tokenizer)
    if cfg.family == "llada2":
        return llada2_config(cfg, tokenizer)
    return sdar_config(cfg, tokenizer)


def new_model(cfg: TrainConfig, config: dict, device: str = "cpu") -> torch.nn.Module:
    if cfg.family == "sdar":
        return Qwen3ForCausalLM(qwen3_config_from_sdar(config))
    return build_model(cfg.family, config, device)


def load_family_weights(model, path: str) -> None:
    """Copy a checkpoint's weights into ``model`` through the family's own adapter.

    The adapter undoes the family's layout (LLaDA2's fused attention and
    per-expert modules) while loading, so every layout the loader reads can
    seed a run, and a mismatch fails loudly.
    """
    from ..models import load_model

    loaded = load_model(path, device="cpu", dtype=torch.float32).model
    model.load_state_dict(loaded.state_dict())


def ordinary_token_ids(tokenizer) -> torch.Tensor:
    """Sorted ids of every non-special token: what an editing corruption may write."""
    special = set(tokenizer.all_special_ids)
    return torch.tensor([i for i in range(len(tokenizer)) if i not in special])


def family_batch(cfg: TrainConfig, texts, tokenizer, block_length: int, ids: dict, gen, causal_context: bool):
    """The batch of ``cfg.family``'s objective (not SDAR's: :func:`make_batch` builds that)."""
    clean, answer = encode_batch(texts, tokenizer, max(16, block_length), ids["eos"])
    if cfg.objective == "causal":
        return objectives.causal_lm_batch(clean, answer)
    if cfg.family == "fastdllm":
        return objectives.fast_dllm_batch(clean, answer, block_length, ids["mask"], gen, causal_context)
    return objectives.llada2_batch(clean, answer, block_length, ids["mask"], gen, cfg.edit_rate, ids["ordinary"])


def draw_batch(cfg: TrainConfig, tokenizer, ids: dict, stream: ProblemStream, block_rng, gen):
    """One step's ``(block length, batch)``, drawing from the three generators in a fixed order."""
    if cfg.family == "fastdllm":
        block_length = cfg.bd_size
    else:
        block_length = block_rng.choices(cfg.block_lengths, cfg.block_weights)[0]
    texts = stream.batch(cfg.batch_size, cfg.batch_by_family)
    if cfg.family == "sdar":
        return block_length, make_batch(texts, tokenizer, block_length, ids["mask"], ids["eos"], gen)
    causal_context = cfg.family == "fastdllm" and block_rng.random() < cfg.causal_context
    return block_length, family_batch(cfg, texts, tokenizer, block_length, ids, gen, causal_context)


def batch_loss(cfg: TrainConfig, model, block_length: int, batch, device) -> torch.Tensor:
    if cfg.family == "sdar":
        inputs, targets, loss_mask = batch
        return masked_loss(model, inputs.to(device), targets.to(device), loss_mask.to(device), block_length)
    return objectives.family_loss(model, batch, device)


class StepBatches(torch.utils.data.Dataset):
    """Step ``first + i``'s batch, drawn from generators seeded by ``(seed, step)`` alone (``--loader-workers``).

    The in-process stream's generators carry their state from step to step, so
    only one process can draw from it, and on an accelerator building a batch
    in Python takes about as long as the step itself. Here a step's batch
    depends on nothing before it: worker processes build batches ahead, the
    sequence is the same for any number of workers, and a resumed run needs no
    generator state.
    """

    def __init__(self, cfg: TrainConfig, tokenizer, ids: dict, first: int, last: int):
        self.cfg, self.tokenizer, self.ids = cfg, tokenizer, ids
        self.first, self.last = first, last
        self.stream = ProblemStream(cfg.family_weights, cfg.seed)

    def __len__(self) -> int:
        return self.last - self.first

    def __getitem__(self, index: int):
        step = self.first + index
        self.stream.rng = random.Random(f"train-step:{self.cfg.seed}:{step}")
        block_rng = random.Random(f"blocks-step:{self.cfg.seed}:{step}")
        gen = torch.Generator().manual_seed(self.cfg.seed * 1_000_003 + step)
        return draw_batch(self.cfg, self.tokenizer, self.ids, self.stream, block_rng, gen)


def batch_source(cfg: TrainConfig, tokenizer, ids: dict, generators: tuple, first: int, last: int):
    """A function returning the next step's ``(block length, batch)``: in this process, or from workers."""
    if not cfg.loader_workers:
        return lambda: draw_batch(cfg, tokenizer, ids, *generators)
    loader = torch.utils.data.DataLoader(
        StepBatches(cfg, tokenizer, ids, first, last),
        batch_size=None,
        num_workers=cfg.loader_workers,
        prefetch_factor=8,
    )
    batches = iter(loader)
    return lambda: next(batches)


BUDGET_PROBE = (20, 100)  # a --time-budget run measures its speed between these steps (after warm-up kernels)
BUDGET_MARGIN = 0.93  # share of the remaining budget planned for steps: checkpoints and slower batches take the rest


def budgeted_steps(cfg: TrainConfig, step: int, elapsed: float, per_step: float) -> int:
    """The run's total steps so that it ends inside ``cfg.time_budget`` at the measured speed (never more than --steps).

    The cosine schedule then decays over these steps, so the last step runs at
    the minimum learning rate; the number is saved in ``train_config.json``,
    where ``--steps`` reproduces the run without a budget on any machine.
    """
    remaining = max(0.0, cfg.time_budget - elapsed)
    return min(cfg.steps, step + int(BUDGET_MARGIN * remaining / per_step))


def train(cfg: TrainConfig, resume: bool = False, clock: Callable[[], float] = time.monotonic) -> Path:
    """Train as ``cfg`` says and return the checkpoint's folder.

    ``clock`` gives the seconds the time budget is measured in; a test passes
    its own, so that what the budget decides does not depend on the machine's speed.
    """
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if cfg.device == "auto" else cfg.device
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    state_path = out / "state.pt"
    checkpoint = out / "checkpoint"

    resuming = resume and state_path.exists()
    # A resumed run keeps the checkpoint's tokenizer: rebuilding it from a
    # changed data mix would renumber the vocabulary under trained embeddings.
    # So does a run initialised from another checkpoint.
    if resuming:
        tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    elif cfg.init_from or cfg.tokenizer_from:
        tokenizer = AutoTokenizer.from_pretrained(cfg.init_from or cfg.tokenizer_from)
    else:
        tokenizer = build_tokenizer(cfg)
    config = checkpoint_config(cfg, tokenizer)
    model = new_model(cfg, config, device)
    if cfg.init_from and not resuming:
        if cfg.family == "sdar":
            load_initial_weights(model, Path(cfg.init_from))
        else:
            load_family_weights(model, cfg.init_from)
        print(f"initialised from {cfg.init_from}")
    model.to(device)
    balancer = ExpertBalancer(model) if cfg.family == "llada2" else None
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)
    stream = ProblemStream(cfg.family_weights, cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    block_rng = random.Random(f"blocks:{cfg.seed}")
    step = 0
    log_path = out / "train_log.jsonl"
    if resuming:
        state = torch.load(state_path, weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        stream.rng.setstate(state["stream"])  # a resumed run may change the family weights
        gen.set_state(state["gen"])
        block_rng.setstate(state["blocks"])
        step = state["step"]
        print(f"resumed at step {step}")
    elif log_path.exists():
        log_path.unlink()

    params = sum(p.numel() for p in model.parameters())
    print(f"model: {params / 1e6:.2f}M parameters on {device}; vocab {config['vocab_size']}")
    eos_id = config["eos_token_id"]
    mask_id = config.get("mask_token_id", tokenizer.mask_token_id)
    ids = {"mask": mask_id, "eos": eos_id}
    if cfg.family == "llada2":
        ids["ordinary"] = ordinary_token_ids(tokenizer)
    bar = progress_bar(cfg.steps, "train", initial=step)
    start = clock()
    model.train()
    first = step
    last = min(cfg.steps, cfg.stop_after or cfg.steps)
    next_batch = batch_source(cfg, tokenizer, ids, (stream, block_rng, gen), first, last)
    probe_started = 0.0
    while step < last:
        block_length, batch = next_batch()
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(cfg, step)
        loss = batch_loss(cfg, model, block_length, batch, device)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        if balancer is not None:
            balancer.step()
        step += 1
        value = loss.item()
        bar.update(1)
        bar.set_postfix(loss=f"{value:.3f}", B=block_length)
        elapsed = clock() - start
        entry = {"step": step, "loss": round(value, 4), "block_length": block_length, "seconds": round(elapsed, 1)}
        if cfg.time_budget:
            if step == first + BUDGET_PROBE[0]:
                probe_started = elapsed
            if step == first + BUDGET_PROBE[1]:
                per_step = (elapsed - probe_started) / (BUDGET_PROBE[1] - BUDGET_PROBE[0])
                cfg.steps = budgeted_steps(cfg, step, elapsed, per_step)
                last = min(cfg.steps, cfg.stop_after or cfg.steps)
                bar.total = cfg.steps
                entry["steps_fixed"] = cfg.steps
                bar.write(f"time budget {cfg.time_budget:.0f}s at {per_step * 1000:.0f} ms/step: {cfg.steps} steps")
            if elapsed >= cfg.time_budget and step < last:
                last = step
                entry["stopped_by_budget"] = True
        if step % cfg.checkpoint_every == 0 or step == last:
            model.eval()
            save_checkpoint(model, tokenizer, config, cfg, checkpoint)
            torch.save(
                {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "stream": stream.rng.getstate(),
                 "gen": gen.get_state(), "blocks": block_rng.getstate(), "step": step},
                state_path,
            )  # fmt: skip
            if cfg.eval_every and (step % cfg.eval_every == 0 or step == last):
                entry["ar_accuracy"] = evaluate_ar(checkpoint, cfg.eval_problems, device, list(cfg.family_weights))
                shown = ", ".join(f"{name} {acc:.2f}" for name, acc in entry["ar_accuracy"].items())
                bar.write(f"step {step}: AR accuracy {shown} on {cfg.eval_problems} held-out problems each")
            model.train()
        with log_path.open("a") as f:
            f.write(json.dumps(entry) + "\n")
    bar.close()
    print(f"done: {step} steps in {clock() - start:.0f}s; checkpoint in {checkpoint}")
    return checkpoint


CHOICES = {"family": FAMILIES, "objective": ("diffusion", "causal")}


def parse_args(argv=None) -> tuple[TrainConfig, bool]:
    defaults = TrainConfig()
    parser = argparse.ArgumentParser(
        prog="python -m s2d2.training.train", description="Train the bundled block-diffusion LM."
    )
    for name, value in asdict(defaults).items():
        if isinstance(value, dict):
            continue
        if isinstance(value, tuple):
            element = type(value[0])
            parser.add_argument(
                "--" + name.replace("_", "-"),
                type=lambda text, element=element: tuple(element(v) for v in text.split(",")),
                default=value,
                help=f"comma-separated, default {','.join(map(str, value))}",
            )
            continue
        flag = "--" + name.replace("_", "-")
        if name in CHOICES:
            parser.add_argument(flag, choices=CHOICES[name], default=value)
        elif isinstance(value, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=value)
        else:
            parser.add_argument(flag, type=type(value), default=value)
    parser.add_argument(
        "--family-weights",
        type=parse_weights,
        default=defaults.family_weights,
        help="share of each task family in the data, e.g. arith=0.2,team=0.3,chains=0.5",
    )
    parser.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    args = vars(parser.parse_args(argv))
    resume = args.pop("resume")
    cfg = TrainConfig(**args)
    if len(cfg.block_lengths) != len(cfg.block_weights):
        parser.error("--block-lengths and --block-weights need one entry each")
    if cfg.objective == "causal" and cfg.family != "fastdllm":
        parser.error("--objective causal is Fast-dLLM v2's first stage: use it with --family fastdllm")
    return cfg, resume


def parse_weights(text: str) -> dict[str, float]:
    """``arith=0.6,team=0.4`` → ``{"arith": 0.6, "team": 0.4}`` (known families only)."""
    weights = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        if name not in families():
            raise argparse.ArgumentTypeError(f"unknown task family {name!r}")
        weights[name] = float(value)
    return weights


def main(argv=None) -> None:
    cfg, resume = parse_args(argv)
    train(cfg, resume)


if __name__ == "__main__":
    main()
