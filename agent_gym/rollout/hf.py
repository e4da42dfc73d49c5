"""A :class:`~agent_gym.rollout.policy.Policy` backed by a Hugging Face transformers causal LM.

torch and transformers are imported inside the functions of this module, never at import time, so
that ``import agent_gym.rollout`` stays light; ``agent_gym.rollout.HFPolicy`` is itself resolved
lazily.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from agent_gym.rollout.policy import Generation, check_prompts

__all__ = ["HFPolicy"]


class HFPolicy:
    """Batched local generation with ``transformers`` (CPU or one GPU).

    Args:
        model: a Hugging Face model folder or hub name, a path to a ``.gguf`` file, or ``None`` for
            the embedded default model (SmolLM2-135M-Instruct, read from its GGUF file).
        tokenizer: a tokenizer object or path; default: the model's (:func:`agent_gym.models.load_tokenizer`).
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``...; ``None`` or ``"auto"``: CUDA when available, else CPU.
        dtype: a ``torch.dtype`` or its name (``"bfloat16"``); ``None``: bfloat16 on CUDA, float32 on CPU.
        temperature: 0 (the default, for evaluation) decodes greedily; > 0 samples.
        top_p: nucleus sampling threshold (only when sampling).
        seed: seeds torch's generator once, here, so a run of calls is reproducible; ``None`` leaves
            it alone.
        stop_ids: ids that end a turn; default: the chat template's end-of-turn ids plus the
            tokenizer's eos id.
        batch_size: most prompts per ``model.generate`` call (larger batches are split).
        prefix_cache_mb: memory for the key/value states kept between calls
            (:class:`~agent_gym.rollout.prefix_cache.PrefixCache`): a prompt that extends an earlier
            prompt plus its generation (the next turn of an episode), or shares a system prompt with
            one, runs only its new tokens through the model. 0 turns the cache off; models whose cache
            cannot be cut at a token (sliding-window or hybrid attention) never use it.

    Sampling is defined by these arguments only: the model's own ``generation_config`` defaults (a
    hub config's ``top_k``, ``repetition_penalty``...) are replaced, so that the reported logprobs
    are those of the distribution the tokens were really drawn from.

    ``Generation.logprobs`` holds, for each generated token, its log-probability under the
    *processed* next-token distribution: ``log_softmax(logits / temperature)`` restricted to the
    top-p nucleus when sampling, and the model's plain distribution (``log_softmax(logits)``, i.e.
    temperature 1) when decoding greedily.

    Attributes:
        generated_tokens: total generated ids returned so far (stop ids included, padding excluded).
        generate_seconds: total wall time spent inside :meth:`generate`.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        tokenizer: Any = None,
        device: str | None = None,
        dtype: Any = None,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = 0,
        stop_ids: Sequence[int] | None = None,
        batch_size: int = 16,
        prefix_cache_mb: float = 2048,
    ):
        import torch
        from transformers import GenerationConfig

        from agent_gym.models import DEFAULT_MODEL, load_causal_lm, load_tokenizer
        from agent_gym.rollout.policy import resolve_stop_ids

        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model_name = DEFAULT_MODEL if model is None else str(model)
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.batch_size = int(batch_size)
        if device in (None, "auto"):
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        if dtype is None:
            dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        elif isinstance(dtype, str):
            dtype = getattr(torch, dtype)
        self.dtype = dtype

        self.tokenizer = load_tokenizer(tokenizer if tokenizer is not None else model)
        load_kwargs: dict[str, Any] = {"dtype": dtype}
        if self.device.type != "cpu":
            load_kwargs["device_map"] = str(self.device)  # straight onto the accelerator, no CPU copy
        self.model = load_causal_lm(model, **load_kwargs)
        if self.device.type == "cpu":
            self.model.to(self.device)
        self.model.eval()

        self.stop_ids: list[int] = resolve_stop_ids(self.tokenizer, stop_ids)
        pad = self.tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else self.stop_ids[0])
        # A clean config: only the special ids survive from the model's own (see the class docstring).
        old = self.model.generation_config
        self.model.generation_config = GenerationConfig(
            bos_token_id=old.bos_token_id, eos_token_id=self.stop_ids, pad_token_id=self.pad_id
        )
        if seed is not None:
            torch.manual_seed(seed)
        from agent_gym.rollout.prefix_cache import PrefixCache, cache_keyword, supports_prefix_cache

        self.prefix_cache: PrefixCache | None = None
        if prefix_cache_mb > 0 and supports_prefix_cache(self.model):
            self.prefix_cache = PrefixCache(int(prefix_cache_mb * 2**20))
            self._cache_kw = cache_keyword(self.model)
        self.generated_tokens = 0
        self.generate_seconds = 0.0

    def __repr__(self) -> str:
        return f"HFPolicy({self.model_name!r}, device={str(self.device)!r}, temperature={self.temperature})"

    def generate(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int) -> list[Generation]:
        """Generate a continuation of each prompt (see the class docstring for logprobs).

        Prompts are sorted by length and run in chunks of ``batch_size`` with left padding (less
        padding per chunk); results come back in the order of ``prompts``. Each result's ids end right
        after the first stop id (which is included) with ``finish_reason="stop"``, or hold
        ``max_new_tokens`` ids with ``finish_reason="length"``.
        """
        prompts = check_prompts(prompts, max_new_tokens)
        started = time.perf_counter()
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        results: list[Generation | None] = [None] * len(prompts)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            batch = [prompts[i] for i in chunk]
            if self.prefix_cache is not None and max(len(p) for p in batch) > 1:
                generations = self._generate_batch_cached(batch, max_new_tokens)
            else:
                generations = self._generate_batch(batch, max_new_tokens)
            for i, generation in zip(chunk, generations):
                results[i] = generation
        self.generate_seconds += time.perf_counter() - started
        return [r for r in results if r is not None]

    def _padded(self, prompts: list[list[int]]) -> tuple[Any, Any]:
        """Left-padded ``input_ids`` and ``attention_mask`` of ``prompts``."""
        import torch

        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, p in enumerate(prompts):
            input_ids[row, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            attention_mask[row, width - len(p) :] = 1
        return input_ids, attention_mask

    def _generate_batch(self, prompts: list[list[int]], max_new_tokens: int) -> list[Generation]:
        input_ids, attention_mask = self._padded(prompts)
        new, logprobs, _ = self._run_generate(input_ids, attention_mask, max_new_tokens, {})
        return self._finish(new, logprobs)

    def _generate_batch_cached(self, prompts: list[list[int]], max_new_tokens: int) -> list[Generation]:
        """:meth:`_generate_batch` with the states of every prompt's cached prefix reused.

        Each prompt's uncached middle (all but its last token) is run through the model on its own,
        starting from the longest prefix the cache holds (a prompt earlier in this batch may supply
        it: the episodes' common system prompt is computed once). The per-prompt states are then laid
        out left-padded, as ``generate`` lays out its own, and ``generate`` continues from them with
        each prompt's last token. Afterwards the states of prompt + generated ids are cached.
        """
        import numpy as np
        import torch

        from agent_gym.rollout.prefix_cache import cache_layers, make_cache

        cache = self.prefix_cache
        assert cache is not None
        kw = self._cache_kw
        per_row: list[list[tuple[Any, Any]] | None] = []
        for p in prompts:
            ids = np.asarray(p, dtype=np.int64)
            known, prefix = cache.longest_prefix(ids, len(ids) - 1)
            cache.hits_tokens += known
            todo = ids[known : len(ids) - 1]
            if len(todo) == 0:
                per_row.append(prefix)
                continue
            cache.prefill_tokens += len(todo)
            past = make_cache(prefix) if prefix is not None else make_cache([])
            with torch.inference_mode():
                out = self.model(
                    input_ids=torch.as_tensor(todo[None], device=self.device), use_cache=True, logits_to_keep=1, **{kw: past}
                )
            layers = cache_layers(getattr(out, "cache", None) or out.past_key_values)
            cache.put(ids[: len(ids) - 1], layers)
            per_row.append(layers)

        width = max(len(p) for p in prompts)
        template = next(layers for layers in per_row if layers)
        batch_layers = []
        for layer, (k0, v0) in enumerate(template):
            keys = k0.new_zeros((len(prompts), k0.shape[1], width - 1, k0.shape[3]))
            values = v0.new_zeros((len(prompts), v0.shape[1], width - 1, v0.shape[3]))
            for row, (p, row_layers) in enumerate(zip(prompts, per_row)):
                if row_layers:
                    keys[row, :, width - len(p) :] = row_layers[layer][0][0]
                    values[row, :, width - len(p) :] = row_layers[layer][1][0]
            batch_layers.append((keys, values))
        del per_row
        input_ids, attention_mask = self._padded(prompts)
        new, logprobs, states = self._run_generate(
            input_ids, attention_mask, max_new_tokens, {kw: make_cache(batch_layers), "return_dict_in_generate": True}
        )
        results = self._finish(new, logprobs)
        if states is not None:
            layers = cache_layers(states)
            for row, (p, gen) in enumerate(zip(prompts, results)):
                # Cached: the prompt and every generated id but the last, whose states generate never computed.
                start, stop = width - len(p), width + len(gen.ids) - 1
                ids = np.asarray(list(p) + gen.ids[:-1], dtype=np.int64)
                cache.put(ids, [(k[row : row + 1, :, start:stop].clone(), v[row : row + 1, :, start:stop].clone()) for k, v in layers])
        return results

    def _run_generate(
        self, input_ids: Any, attention_mask: Any, max_new_tokens: int, extra: dict[str, Any]
    ) -> tuple[Any, Any, Any]:
        """``model.generate`` with our sampling and log-prob recorder: (new ids, their log-probs, the
        returned cache or None)."""
        import torch
        from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopPLogitsWarper

        width = input_ids.shape[1]
        sample = self.temperature > 0
        processors = LogitsProcessorList()
        if sample:
            # Our own warpers, placed before the recorder: transformers would append its warpers
            # after any custom processor, and the recorder must see the final distribution.
            if self.temperature != 1.0:
                processors.append(TemperatureLogitsWarper(self.temperature))
            if self.top_p < 1.0:
                processors.append(TopPLogitsWarper(self.top_p))
        recorder = _ChosenLogprobs()
        processors.append(recorder)

        # Neutral built-in warpers (the clean config leaves temperature and top_p at 1; top_k would
        # default to 50): the processors above do all the warping.
        neutral = {"top_k": 0} if sample else {}
        with torch.inference_mode():
            output = self.model.generate(
                input_ids=input_ids.to(self.device),
                attention_mask=attention_mask.to(self.device),
                max_new_tokens=max_new_tokens,
                do_sample=sample,
                logits_processor=processors,
                eos_token_id=self.stop_ids,
                pad_token_id=self.pad_id,
                **neutral,
                **extra,
            )
            states = None
            if extra.get("return_dict_in_generate"):
                states = getattr(output, "cache", None) or getattr(output, "past_key_values", None)
                output = output.sequences
            new = output[:, width:]
            logprobs = recorder.finish(new[:, -1]) if new.shape[1] else torch.zeros_like(new, dtype=torch.float32)
        return new, logprobs, states

    def _finish(self, new: Any, logprobs: Any) -> list[Generation]:
        """Cut each row after its first stop id (kept) into a :class:`Generation`."""
        stop = set(self.stop_ids)
        results = []
        for ids_row, lp_row in zip(new.tolist(), logprobs.tolist()):
            end = next((k + 1 for k, t in enumerate(ids_row) if t in stop), None)
            finish = "stop" if end is not None else "length"
            # Without a stop id the row ran to the end: every position is a real token.
            end = end if end is not None else len(ids_row)
            results.append(Generation(ids=ids_row[:end], logprobs=lp_row[:end], finish_reason=finish))
            self.generated_tokens += end
        return results


class _ChosenLogprobs:
    """A logits processor, run last, that records the log-probability of each chosen token.

    At step t it keeps ``log_softmax`` of the processed scores; at step t+1 the token chosen at t
    is the last column of ``input_ids``, and its log-probability is gathered then. Memory stays at one
    ``batch x vocab`` tensor instead of ``output_scores``' one per step.
    """

    def __init__(self) -> None:
        self._pending: Any = None
        self._chosen: list[Any] = []

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        if self._pending is not None:
            self._gather(input_ids[:, -1])
        self._pending = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def _gather(self, tokens: Any) -> None:
        self._chosen.append(self._pending.gather(1, tokens.view(-1, 1)).squeeze(1))
        self._pending = None

    def finish(self, last_tokens: Any) -> Any:
        """The ``batch x steps`` log-probabilities, given the tokens chosen at the last step."""
        import torch

        if self._pending is not None:
            self._gather(last_tokens)
        return torch.stack(self._chosen, dim=1).cpu()
