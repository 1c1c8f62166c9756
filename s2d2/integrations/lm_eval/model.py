"""The ``s2d2`` model of lm-evaluation-harness: any lm-eval task decoded by one of the engine's decoders.

``--model s2d2 --model_args pretrained=JetLM/SDAR-8B-Chat,preset=sdar-b,acceptance=greedy``:

- ``pretrained``: checkpoint directory or Hub id (default: the bundled model);
- ``preset``: one of the paper's configurations (:data:`s2d2.PRESETS`), applied first;
- every field of :class:`~s2d2.DecodeConfig` and of its nested sections
  (:class:`~s2d2.VerifyConfig`, :class:`~s2d2.SamplingConfig`) by its own name
  (``method``, ``block_length``, ``threshold``, ``acceptance``, ``temperature``, ...),
  the value read as the field's type, so a setting added to the config works
  here without touching this file;
- ``device``, ``dtype`` (``float32``, ``bfloat16``, ``float16``, ``auto``), ``device_map``.

``generate_until`` runs :func:`s2d2.generate` on the prompt's token ids
(:func:`s2d2.generate_batch` with ``batch_size`` > 1 or ``auto``: the same
outputs, many per forward); the
prompt is the text lm-eval hands over, which already holds the chat template
when ``--apply_chat_template`` is given (lm-eval calls :meth:`apply_chat_template`
itself) and is raw otherwise. ``loglikelihood`` and ``loglikelihood_rolling``
are exact block-size-1 (AR) scores, one forward per request (:mod:`s2d2.likelihood`).
Every request's decode statistics are kept in :attr:`decode_stats`;
:func:`s2d2.integrations.lm_eval.metrics.attach_decode_metrics` writes them into lm-eval's
results.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict

import lm_eval.models  # noqa: F401  (lm-eval's own models, registered lazily: "s2d2" must not be the only one)
import torch
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
from tqdm import tqdm

from ... import DEFAULT_MODEL, DecodeConfig, config_from_settings, generate, generate_batch, load_model
from ...batch import auto_batch_size
from ...config import read_settings
from ...likelihood import Scored, ar_logprobs

log = logging.getLogger(__name__)

# Repeat r of a request is seeded ``seed + doc_id + r * REPEAT_SEED_STRIDE``: repeats differ, the first
# repeat matches ``s2d2.study.evaluate`` (seed = problem index), and no seed depends on how requests are sharded.
REPEAT_SEED_STRIDE = 1_000_003
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "auto": None}


MODEL_ARGS = ("pretrained", "preset", "device", "dtype", "device_map")  # what the model takes besides settings


def decode_settings(raw: dict, where: str) -> dict:
    """Flat decoding settings from lm-eval's ``key=value`` pairs (``where``: ``model_args`` or the generation
    kwargs), read by the engine's one settings reader."""
    return read_settings(raw, what=where, others=MODEL_ARGS)


def parse_batch_size(value: int | str | None) -> int | str:
    """lm-eval's ``batch_size``: a positive number, or ``auto`` (``auto:N`` too, as lm-eval spells it)."""
    if value is None:
        return 1
    text = str(value).strip().lower()
    if text.startswith("auto"):
        return "auto"
    try:
        size = int(text)
    except ValueError:
        size = 0
    if size < 1:
        raise ValueError(f"batch_size must be a positive number or 'auto', got {value!r}")
    return size


def plan_requests(requests) -> tuple[list[tuple], list[tuple[int, int]]]:
    """``(jobs, padding)``: ``(position, request, repeat)`` for every copy to compute, and
    ``(position, id(request))`` for the rest.

    lm-eval sends a request object ``repeats`` times and, with several processes, pads a
    rank's list with more copies of its last one; a copy past ``repeats`` is padding and
    gets the response already computed, so it neither costs a decode nor counts in the metrics."""
    seen: Counter = Counter()
    jobs, padding = [], []
    for position, request in enumerate(requests):
        repeat = seen[id(request)]
        seen[id(request)] += 1
        if repeat >= (request.repeats or 1) and repeat > 0:
            padding.append((position, id(request)))
        else:
            jobs.append((position, request, repeat))
    return jobs, padding


def fill_padding(results: list, padding: list[tuple[int, int]], latest: dict[int, object]) -> list:
    """Give each padding copy the latest response computed for its request."""
    for position, key in padding:
        results[position] = latest[key]
    return results


def cut_at_stops(text: str, until: list[str]) -> str:
    """``text`` up to the earliest occurrence of any stop string."""
    cut = len(text)
    for stop in until:
        if stop:
            at = text.find(stop)
            if at != -1:
                cut = min(cut, at)
    return text[:cut]


def summary_stats(summary) -> dict:
    """The per-request numbers the aggregate metrics are built from (see docs/EVALUATION.md)."""
    return {
        "nfe": summary.nfe,
        "generated_tokens": summary.generated_tokens,
        "wall_seconds": summary.wall_seconds,
        "verifications": summary.verifications,
        "drafts_verified": summary.drafts_verified,
        "drafts_accepted": summary.drafts_accepted,
    }


@register_model("s2d2")
class S2D2LM(TemplateLM):
    """lm-eval's view of a block-diffusion model decoded by S2D2 (or AR, static, dynamic)."""

    def __init__(
        self,
        pretrained: str = DEFAULT_MODEL,
        preset: str | None = None,
        device: str | None = None,
        dtype: str | None = None,
        device_map: str | None = None,
        batch_size: int | str | None = 1,
        max_batch_size: int | None = None,
        trust_remote_code: bool | None = None,
        **settings,
    ):
        """``batch_size``: generation requests decoded per forward (:func:`s2d2.generate_batch`); ``auto``
        picks the largest power of two whose rows fit in half the free memory (at most ``max_batch_size``,
        default 64). Log-likelihood requests are one forward each and run one at a time. ``trust_remote_code``
        is accepted because lm-eval adds it for ``--trust_remote_code``; the adapters never run remote code."""
        super().__init__()
        from accelerate import PartialState

        self.batch_size = parse_batch_size(batch_size)
        self.max_batch_size = int(max_batch_size or 64)
        self.preset = None if preset in (None, "", "none") else str(preset)
        self.settings = decode_settings(settings, "model_args")
        self.config = config_from_settings(self.preset, **self.settings)
        if dtype not in (None, *DTYPES):
            raise ValueError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
        state = PartialState(cpu=not torch.cuda.is_available())
        self._state = state
        self._rank, self._world_size = state.process_index, state.num_processes
        if self._world_size > 1:
            device = str(state.device)
        elif device and str(device).startswith("cuda") and not torch.cuda.is_available():
            log.info("CUDA is not available: s2d2 runs on the CPU instead of %s", device)
            device = "cpu"
        self.model = load_model(
            str(pretrained), device=device, dtype=DTYPES.get(dtype), device_map=device_map, announce=log.info
        )
        self.tokenizer = self.model.tokenizer
        self._device = self.model.device
        self.decode_stats: dict[tuple, list[dict]] = defaultdict(list)
        self._warmed_up = False

    # -- what lm-eval asks of a model --------------------------------------

    @property
    def eot_token_id(self) -> int:
        eos = self.tokenizer.eos_token_id
        return int(eos) if eos is not None else self.model.stop_token_ids[0]

    @property
    def prefix_token_id(self) -> int:
        """The token an empty context is replaced by: BOS when the tokenizer has one, else end-of-text."""
        bos = self.tokenizer.bos_token_id
        return int(bos) if bos is not None else self.eot_token_id

    @property
    def max_length(self) -> int:
        return self.model.max_positions

    @property
    def tokenizer_name(self) -> str:
        return str(self.tokenizer.name_or_path).replace("/", "__")

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs) -> list[int]:
        """Token ids of ``string`` as given: no BOS is added unless asked, since lm-eval's
        prompt already holds whatever template the model needs."""
        return self.tokenizer(string, add_special_tokens=bool(add_special_tokens))["input_ids"]

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        if not getattr(self.tokenizer, "chat_template", None):
            raise ValueError(f"{self.model.name} has no chat template; run without --apply_chat_template")
        return self.tokenizer.apply_chat_template(
            chat_history, tokenize=False, add_generation_prompt=add_generation_prompt
        )

    # -- distributed: one process per device under `accelerate launch` ---

    def all_gather(self, tensor):
        from accelerate.utils import gather

        return gather(tensor) if self.world_size > 1 else tensor

    def gather_object(self, obj, dst=0):
        """Every process's ``obj``, in rank order (on every rank; lm-eval reads it on ``dst``)."""
        from accelerate.utils import gather_object

        return gather_object([obj]) if self.world_size > 1 else [obj]

    def barrier(self) -> None:
        self._state.wait_for_everyone()

    # -- requests ----------------------------------------------------------

    def _each(self, kind: str, requests, disable_tqdm: bool, compute) -> list:
        """``compute(request, repeat)`` for every request lm-eval sends, in order (:func:`plan_requests`
        says which copies are computed and which are padding)."""
        jobs, padding = plan_requests(requests)
        results: list = [None] * len(requests)
        latest: dict[int, object] = {}
        for position, request, repeat in tqdm(jobs, desc=f"s2d2 {kind}", disable=disable_tqdm or self.rank != 0):
            results[position] = latest[id(request)] = compute(request, repeat)
            self.cache_hook.add_partial(kind, request.args, results[position])
        return fill_padding(results, padding, latest)

    def _record(self, request, stats: dict) -> None:
        self.decode_stats[(request.task_name, request.doc_id)].append(stats)

    def reset_decode_stats(self) -> None:
        """Forget the statistics of earlier evaluations (one results dict, one evaluation's numbers)."""
        self.decode_stats.clear()

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        if self.batch_size == 1:
            return self._each("generate_until", requests, disable_tqdm, self._generate)
        return self._generate_batched(requests, disable_tqdm)

    def _generate(self, request, repeat: int) -> str:
        config, until, prompt = self._prepare(request, repeat)
        self._warm_up(prompt, config)
        trace = generate(self.model, prompt, config)
        self._record(request, summary_stats(trace.summary))
        return cut_at_stops(trace.text, until)

    def _prepare(self, request, repeat: int) -> tuple[DecodeConfig, list[str], list[int]]:
        """A generation request's decode settings (seeded by its document and repeat), stop strings and prompt."""
        context, gen_kwargs = request.args
        config, until = self._request_config(dict(gen_kwargs or {}))
        config = config.replace(seed=config.seed + (request.doc_id or 0) + repeat * REPEAT_SEED_STRIDE)
        return config, until, self._prompt_ids(context, config)

    def _warm_up(self, prompt: list[int], config: DecodeConfig) -> None:
        """One untimed decode first, as s2d2.study.evaluate does: lazy initialisation must not land in wall_seconds."""
        if not self._warmed_up:
            generate(self.model, prompt, config)
            self._warmed_up = True

    def _generate_batched(self, requests, disable_tqdm: bool) -> list[str]:
        """As :meth:`_each` with :meth:`_generate`, the decodes many per forward: requests that share
        their settings (all but the seed) form one :func:`s2d2.generate_batch`, whose rows equal the
        one-at-a-time decodes. A copy past a request's ``repeats`` is padding and gets its response."""
        planned, padding = plan_requests(requests)
        jobs = [(position, request, *self._prepare(request, repeat)) for position, request, repeat in planned]
        groups: dict[DecodeConfig, list[tuple]] = defaultdict(list)
        for job in jobs:
            groups[job[2].replace(seed=0)].append(job)
        results: list[str | None] = [None] * len(requests)
        latest: dict[int, str] = {}
        bar = tqdm(total=len(jobs), desc="s2d2 generate_until", disable=disable_tqdm or self.rank != 0)
        for config, members in groups.items():
            prompts = [prompt for *_, prompt in members]
            self._warm_up(prompts[0], members[0][2])
            size = self.batch_size
            if size == "auto":
                span = max(map(len, prompts)) + config.max_new_tokens
                size = auto_batch_size(self.model, config, span, self.max_batch_size)
                log.info("s2d2: batch size %d for %d requests", size, len(members))
            seeds = [job[2].seed for job in members]
            traces = generate_batch(self.model, prompts, config, seeds=seeds, batch_size=size)
            for (position, request, _, until, _), trace in zip(members, traces):
                self._record(request, summary_stats(trace.summary))
                results[position] = latest[id(request)] = cut_at_stops(trace.text, until)
                self.cache_hook.add_partial("generate_until", request.args, results[position])
            bar.update(len(members))
        bar.close()
        return fill_padding(results, padding, latest)

    def _request_config(self, gen_kwargs: dict) -> tuple[DecodeConfig, list[str]]:
        """The decode of one request: ``model_args`` with the task's generation kwargs on top.

        As for lm-eval's HF model the task (and ``--gen_kwargs``) decides ``until``, the length
        (``max_gen_toks``) and the sampling (``do_sample=False`` is greedy); any other key must be a
        decoding setting."""
        until = gen_kwargs.pop("until", None) or []
        until = [until] if isinstance(until, str) else list(until)
        if "max_gen_toks" in gen_kwargs:
            gen_kwargs["max_new_tokens"] = gen_kwargs.pop("max_gen_toks")
        do_sample = gen_kwargs.pop("do_sample", None)
        request = decode_settings(gen_kwargs, "generation kwargs")
        if do_sample is False:
            request["temperature"] = 0.0
        elif do_sample and "temperature" not in request and not self.config.sampling.temperature:
            request["temperature"] = 1.0
        return config_from_settings(self.preset, **{**self.settings, **request}), until

    def _prompt_ids(self, context: str, config: DecodeConfig) -> list[int]:
        """The prompt's ids, the oldest ones dropped (as lm-eval's HF model does) when prompt and
        ``max_new_tokens`` would not fit in the model's positions, block-rounded."""
        ids = self.tok_encode(context)
        room = self.max_length // config.block_length * config.block_length - config.max_new_tokens
        if room < 1:
            raise ValueError(
                f"max new tokens ({config.max_new_tokens}) leave no room for a prompt in {self.model.name}'s "
                f"{self.max_length} positions"
            )
        if len(ids) > room:
            log.warning("prompt of %d tokens cut to its last %d to fit the model", len(ids), room)
            ids = ids[-room:]
        return ids

    def _score(self, context: list[int], continuation: list[int]) -> Scored:
        """One AR forward over a pair; the oldest context tokens are dropped when it does not fit
        the model's positions (as lm-eval's HF model does). An empty continuation scores 0 for free."""
        if not continuation:
            return Scored(0.0, True, [], 0, 0.0)
        keep = self.max_length - len(continuation)
        if keep < 1:
            raise ValueError(
                f"a continuation of {len(continuation)} tokens does not fit {self.model.name}'s "
                f"{self.max_length} positions"
            )
        return ar_logprobs(self.model, context[-keep:], continuation)

    def _encode_request(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """lm-eval's tokenisation of a pair: trailing context spaces move to the continuation,
        and an empty context becomes the prefix token."""
        if context:
            return self._encode_pair(context, continuation)
        return [self.prefix_token_id], self.tok_encode(continuation)

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        scored = (self._score(context, continuation) for _, context, continuation in requests)
        return [(s.logprob, s.greedy) for s in scored]

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        return self._each("loglikelihood", requests, disable_tqdm, self._loglikelihood)

    def _loglikelihood(self, request, repeat: int) -> tuple[float, bool]:
        scored = self._score(*self._encode_request(*request.args))
        self._record(request, {"nfe": scored.nfe, "wall_seconds": scored.wall_seconds})
        return scored.logprob, scored.greedy

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        return self._each("loglikelihood_rolling", requests, disable_tqdm, self._loglikelihood_rolling)

    def _loglikelihood_rolling(self, request, repeat: int) -> float:
        """The whole string's AR log-likelihood, in windows of the model's length that each
        predict new tokens only (lm-eval's rolling windows), one forward per window."""
        (text,) = request.args
        windows = get_rolling_token_windows(
            self.tok_encode(text), self.prefix_token_id, max_seq_len=self.max_length - 1, context_len=1
        )
        total = 0.0
        for window in windows:
            scored = self._score(*make_disjoint_window(window))
            self._record(request, {"nfe": scored.nfe, "wall_seconds": scored.wall_seconds})
            total += scored.logprob
        return total
