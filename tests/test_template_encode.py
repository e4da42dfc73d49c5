"""ChatTemplate's fast encoding paths give exactly the tokenizer's own ids."""

from __future__ import annotations

import gymnasium as gym
import pytest

import agent_gym  # noqa: F401  (registers the envs)
from agent_gym.chat.template import ChatTemplate

TEXTS = [
    "",
    "plain text",
    "  leading and trailing spaces  ",
    "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_end|><|im_end|>\n\n<|im_start|>",
    "unicode: é ü 数学 🙂 \u2063 tabs\tand\r\nnewlines",
    "<tool_call>\n{\"name\": \"python\", \"arguments\": {\"code\": \"print(1)\"}}\n</tool_call><|im_end|>",
    "<|im_end" + "|>",  # split across a Python concatenation, still the special token
    "<|im_en d|> not special",
]


def reference(tokenizer, text):
    return list(tokenizer.encode(text, add_special_tokens=False))


@pytest.mark.parametrize("text", TEXTS)
def test_encode_matches_the_tokenizer(tokenizer, text):
    template = ChatTemplate(tokenizer)
    assert template._backend is not None  # the fast path is taken for the embedded tokenizer
    assert template.encode(text) == reference(tokenizer, text)


def test_encode_prompt_reuses_the_system_prefix_and_matches_the_tokenizer(tokenizer):
    template = ChatTemplate(tokenizer)
    tools = [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}}}]
    system = {"role": "system", "content": "You are a prefix-cache test helper. " * 20}
    questions = ["What is 2+2?", " leading space", "<|im_end|> inside", "数学 🙂", "", "What is 2+2?"]
    for _ in range(3):  # first sighting, check, reuse
        for q in questions:
            text = template.render([system, {"role": "user", "content": q}], tools)
            assert template.encode_prompt(text) == reference(tokenizer, text)
    prefixes = template._prefixes
    assert prefixes is not None and prefixes.ok
    assert any(ids is not None for ids in prefixes.ids.values())
    # the cache is shared with other templates of the same tokenizer (one per env)
    assert ChatTemplate(tokenizer)._prefixes is prefixes


def test_encode_prompt_turns_the_cache_off_when_a_split_is_not_exact(tokenizer):
    template = ChatTemplate(tokenizer, chat_template=tokenizer.chat_template + "{# another template, another cache #}")
    prefixes = template._prefixes
    assert prefixes is not None
    real_encode = template.encode
    boundary = prefixes.boundary
    # a tokenizer for which a prefix encoded on its own differs (as with a "prepend a space to the
    # first word" pre-tokenizer): the check must catch it and the results must stay exact
    template.encode = lambda text: real_encode(text) + ([0] if text.endswith(boundary) else [])
    text = template.render([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}])
    for _ in range(3):
        assert template.encode_prompt(text) == real_encode(text)
    assert not prefixes.ok


@pytest.mark.parametrize("env_id", ["AgentR1/GSM8KTool-v0", "AgentR1/GSM8KPython-v0"])
def test_reset_prompt_ids_are_a_fresh_tokenization(tokenizer, env_id):
    env = gym.make(env_id, tokenizer=tokenizer, split="test")
    template = env.unwrapped.template
    try:
        for seed in [0, 1, 2, 0, 3, 1]:
            obs, _ = env.reset(seed=seed)
            text = template.render(obs["messages"], obs["tools"])
            assert obs["prompt_ids"].tolist() == reference(tokenizer, text)
    finally:
        env.close()


def test_encode_falls_back_to_the_tokenizer_when_it_truncates(tokenizer):
    template = ChatTemplate(tokenizer)
    text = "one two three four five six"
    backend = tokenizer.backend_tokenizer
    backend.enable_truncation(max_length=2)
    try:
        assert template.encode(text) == reference(tokenizer, text)
    finally:
        backend.no_truncation()
    assert len(template.encode(text)) > 2


def test_vocab_size_is_remembered_per_tokenizer_and_follows_added_tokens(tokenizer):
    import copy

    tok = copy.deepcopy(tokenizer)  # (the session's tokenizer stays untouched)
    assert ChatTemplate(tok).vocab_size == len(tok) == ChatTemplate(tok).vocab_size
    tok.add_tokens(["<agent_gym_test_token>"])
    template = ChatTemplate(tok)
    assert template.vocab_size == len(tok) == len(tokenizer) + 1
    new_id = tok.convert_tokens_to_ids("<agent_gym_test_token>")
    assert template.encode("a <agent_gym_test_token> b") == reference(tok, "a <agent_gym_test_token> b")
    assert new_id in template.encode("a <agent_gym_test_token> b")
