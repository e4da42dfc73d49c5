"""A game env decides between appending and rewriting by the exact length the append would have, for
every family of the template matrix (DeepSeek-R1's template writes a later turn's suffix differently
from the first one's, so the length must come from the real history)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

import agent_gym  # noqa: F401  (registers the envs)

GUESSES = ["<guess>pious</guess>", "<guess>slate</guess>", "<guess>brace</guess>", "<guess>grace</guess>"]


def _act(env, text):
    template = env.unwrapped.template
    return np.asarray(template.encode(text) + list(template.end_of_turn_ids))


def test_append_is_taken_exactly_when_it_fits(family_tokenizer):
    make = lambda: gym.make("AgentR1/Wordle-v0", tokenizer=family_tokenizer, context="last_k", last_k=10, max_turns=20)  # noqa: E731
    reference = make()
    reference.reset(options={"task": {"word": "crane"}})
    appended = []  # what each step really appends after its action
    for text in GUESSES:
        before = len(reference.unwrapped.context)
        action = _act(reference, text)
        obs, *_ = reference.step(action)
        appended.append(len(obs["prompt_ids"]) - before - len(action))

    for k, extra in enumerate(appended):
        for slack, appends in ((0, True), (-1, False)):
            env = make()
            env.reset(options={"task": {"word": "crane"}})
            for text in GUESSES[:k]:
                env.step(_act(env, text))
            before = list(env.unwrapped.context.ids)
            action = _act(env, GUESSES[k])
            env.unwrapped.max_context_tokens = len(before) + len(action) + extra + slack
            obs, _, terminated, truncated, info = env.step(action)
            ids = obs["prompt_ids"].tolist()
            appended = not info["new_segment"] and not truncated and ids[: len(before) + len(action)] == before + action.tolist()
            assert appended is appends, (k, slack, extra, info.get("truncated_reason"))
            if appends:
                assert len(ids) == len(before) + len(action) + extra
