"""The key/value prefix cache of HFPolicy: lookups, eviction, and generation equal to the uncached path."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from agent_gym.rollout.prefix_cache import PrefixCache  # noqa: E402


def _layers(n_tokens: int, fill: float, n_layers: int = 2) -> list:
    k = torch.full((1, 3, n_tokens, 4), fill)
    return [(k.clone(), k.clone() + 0.5) for _ in range(n_layers)]


def test_longest_common_prefix_and_views():
    cache = PrefixCache(max_bytes=1 << 20)
    cache.put(np.array([1, 2, 3, 4, 5]), _layers(5, 1.0))
    cache.put(np.array([1, 2, 9, 9]), _layers(4, 2.0))
    k, layers = cache.longest_prefix(np.array([1, 2, 3, 4, 7, 8]), limit=5)
    assert k == 4 and layers[0][0].shape == (1, 3, 4, 4) and float(layers[0][0][0, 0, 0, 0]) == 1.0
    # The limit caps the prefix (generate must still be fed the prompt's last token).
    k, _ = cache.longest_prefix(np.array([1, 2, 3, 4, 5]), limit=3)
    assert k == 3
    k, layers = cache.longest_prefix(np.array([7, 7]), limit=1)
    assert (k, layers) == (0, None)


def test_an_extension_replaces_its_prefix_and_the_budget_evicts_the_oldest():
    one = _layers(4, 0.0)
    per_token = sum(k.numel() * k.element_size() * 2 for k, _ in one) // 4
    cache = PrefixCache(max_bytes=per_token * 10)
    cache.put(np.array([1, 2, 3, 4]), _layers(4, 0.0))
    cache.put(np.array([1, 2, 3, 4, 5, 6]), _layers(6, 0.0))  # the same episode, one turn later
    assert len(cache) == 1 and cache.nbytes == per_token * 6
    cache.put(np.array([8, 8, 8]), _layers(3, 0.0))
    assert len(cache) == 2 and cache.nbytes == per_token * 9
    cache.put(np.array([9, 9, 9]), _layers(3, 0.0))  # over budget: the least recently used goes
    assert len(cache) == 2 and cache.nbytes == per_token * 6
    assert cache.longest_prefix(np.array([1, 2, 3]), limit=3)[0] == 0
    cache.put(np.arange(11), _layers(11, 0.0))  # larger than the whole budget: not kept
    assert len(cache) == 2


@pytest.mark.slow
def test_cached_generation_equals_uncached_over_turns(tokenizer):
    """Real SmolLM2, real GSM8KTool prompts: three turns, each prompt = previous prompt + generated ids
    + an appended turn. Greedy ids are identical with and without the cache, log-probs agree to float
    rounding, and from the second prompt on only the new tokens are run through the model."""
    import gymnasium as gym

    import agent_gym  # noqa: F401
    from agent_gym.rollout import HFPolicy

    plain = HFPolicy(None, tokenizer=tokenizer, batch_size=4, prefix_cache_mb=0)
    cached = HFPolicy(None, tokenizer=tokenizer, batch_size=4)
    assert plain.prefix_cache is None and cached.prefix_cache is not None
    env = gym.make("AgentR1/GSM8KTool-v0", tokenizer=tokenizer, split="test")
    prompts = [env.reset(seed=s)[0]["prompt_ids"].tolist() for s in range(3)]
    suffix = tokenizer.encode("<|im_start|>user\nGo on.<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    for turn in range(3):
        before = cached.prefix_cache.prefill_tokens
        expected = plain.generate(prompts, max_new_tokens=24)
        got = cached.generate(prompts, max_new_tokens=24)
        assert [g.ids for g in got] == [g.ids for g in expected]
        assert [g.finish_reason for g in got] == [g.finish_reason for g in expected]
        for g, e in zip(got, expected):
            assert np.allclose(g.logprobs, e.logprobs, atol=1e-3)
        prefilled = cached.prefix_cache.prefill_tokens - before
        if turn == 0:
            # The system prompt is shared: it is run once, not once per prompt.
            common = next(i for i, col in enumerate(zip(*prompts)) if len(set(col)) > 1)
            assert prefilled == sum(len(p) - 1 for p in prompts) - 2 * common
        else:
            # Only the last generated id and the appended turn are new for each prompt.
            assert prefilled == len(prompts) * (1 + len(suffix)) - len(prompts)
        prompts = [p + g.ids + suffix for p, g in zip(prompts, got)]
