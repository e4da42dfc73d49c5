"""The game envs through gymnasium: check_env, seeding, winning, invalid actions, rewards, turn limits
and the context modes (with the no-drift invariant inside segments and fresh renders at rewrites)."""

from __future__ import annotations

import asyncio

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import agent_gym
from agent_gym.rollout import ScriptedPolicy, run_episodes
from agent_gym_games import sokoban

IDS = ["AgentR1/Sokoban-v0", "AgentR1/FrozenLake-v0", "AgentR1/Wordle-v0"]
SOKOBAN = {"id": "tiny", "grid": ["######", "#@_$.#", "#____#", "######"]}  # solved by R R
LAKE = {"id": "lake", "grid": ["SFFH", "FHFF", "FFFH", "HFFG"]}
LETTERS = {"U": "up", "D": "down", "L": "left", "R": "right"}


def act(env, text: str) -> list[int]:
    template = env.unwrapped.template
    return template.encode(text) + list(template.end_of_turn_ids)


def fresh_render(env, messages) -> list[int]:
    template = env.unwrapped.template
    return template.encode(template.render(messages, add_generation_prompt=True))


def test_registered_and_listed():
    ids = {card.id for card in agent_gym.list_envs()}
    assert set(IDS) <= ids


@pytest.mark.parametrize("env_id", IDS)
@pytest.mark.parametrize("context", ["full", "last_k", "board"])
def test_check_env_passes(env_id, context, tokenizer):
    env = gym.make(env_id, tokenizer=tokenizer, context=context, last_k=1)
    check_env(env.unwrapped, skip_render_check=True)


@pytest.mark.parametrize("env_id", IDS)
def test_reset_is_seeded_and_levels_are_pinnable(env_id, tokenizer):
    a = gym.make(env_id, tokenizer=tokenizer, difficulty="medium")
    b = gym.make(env_id, tokenizer=tokenizer, difficulty="medium")
    obs_a, info_a = a.reset(seed=5)
    obs_b, info_b = b.reset(seed=5)
    assert info_a["task_id"] == info_b["task_id"] and info_a["task_id"].startswith("train-medium-")
    assert np.array_equal(obs_a["prompt_ids"], obs_b["prompt_ids"])
    assert len({a.reset(seed=s)[1]["task_id"] for s in range(6)}) > 3
    obs_c, info_c = b.reset(options={"task_id": info_a["task_id"]})
    assert np.array_equal(obs_c["prompt_ids"], obs_a["prompt_ids"])
    with pytest.raises(KeyError, match="ids look like 'train-easy-123'"):
        a.reset(options={"task_id": "level-1"})


def _play(env, texts):
    out = []
    for text in texts:
        out.append(env.step(act(env, text)))
        if out[-1][2] or out[-1][3]:
            break
    return out


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_sokoban_is_won_by_the_level_solution(difficulty, tokenizer):
    env = gym.make("AgentR1/Sokoban-v0", tokenizer=tokenizer, difficulty=difficulty, max_turns=200)
    env.reset(seed=3)
    level = env.unwrapped.task
    moves = [LETTERS[ch] for ch in (sokoban.solve(level, 50_000) if difficulty == "easy" else None) or level.solution]
    texts = [f"<action>{', '.join(moves[i:i + 5])}</action>" for i in range(0, len(moves), 5)]
    _, reward, terminated, truncated, info = _play(env, texts)[-1]
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["correct"] is True and info["success"] is True and info["moves"] <= len(moves)


def test_frozenlake_win_and_loss(tokenizer):
    env = gym.make("AgentR1/FrozenLake-v0", tokenizer=tokenizer)
    env.reset(options={"task": LAKE})
    _, reward, terminated, _, info = _play(env, ["<action>right, right, down</action>", "<action>down, down, right</action>"])[-1]
    assert (reward, terminated, info["success"], info["moves"]) == (1.0, True, True, 6)
    env.reset(options={"task": LAKE})
    obs, reward, terminated, truncated, info = env.step(act(env, "<action>down, right, right</action>"))
    assert (reward, terminated, truncated, info["correct"]) == (0.0, True, False, False)
    assert info["moves"] == 2  # the move after the hole is not played
    assert "you fell into a hole" in obs["messages"][-1]["content"]


def test_wordle_win_loss_and_invalid_guesses(tokenizer):
    env = gym.make("AgentR1/Wordle-v0", tokenizer=tokenizer, difficulty="medium")
    env.reset(options={"task": {"word": "crane"}})
    results = _play(env, ["<guess>slate</guess>", "I think <guess>brace</guess>", "<guess>CRANE</guess>"])
    _, reward, terminated, _, info = results[-1]
    assert (reward, terminated, info["success"], info["moves"]) == (1.0, True, True, 3)
    assert "B R A C E  ->  _ G G Y G" in results[1][0]["messages"][-1]["content"]
    env.reset(options={"task": {"word": "crane"}})
    results = _play(env, ["<guess>toolong</guess>"] + ["<guess>pious</guess>"] * 6)
    _, reward, terminated, truncated, info = results[-1]
    assert (reward, terminated, truncated, info["invalid_actions"], info["moves"]) == (0.0, True, False, 1, 6)
    assert "The word was CRANE." in results[-1][0]["messages"][-1]["content"]


@pytest.mark.parametrize("env_id, task", [("AgentR1/Sokoban-v0", SOKOBAN), ("AgentR1/FrozenLake-v0", LAKE), ("AgentR1/Wordle-v0", {"word": "crane"})])
def test_bad_actions_are_counted_never_raise(env_id, task, tokenizer):
    env = gym.make(env_id, tokenizer=tokenizer)
    vocab = env.unwrapped.template.vocab_size
    env.reset(options={"task": task})
    rng = np.random.default_rng(0)
    soft = [[], rng.integers(0, vocab, size=200).tolist(), act(env, "<action>jump</action><guess>x</guess>"), act(env, "no tags")]
    for k, action in enumerate(soft, start=1):
        obs, reward, terminated, truncated, info = env.step(action)
        assert (reward, terminated, truncated) == (0.0, False, False)
        assert info["invalid_actions"] == k and info["action_error"]
        assert "Invalid action:" in obs["messages"][-1]["content"]
    for hard in ([vocab + 1], np.ones(100_000, dtype=np.int64), [-3]):
        env.reset(options={"task": task})
        _, reward, terminated, _, info = env.step(hard)
        assert (reward, terminated) == (0.0, True) and info["invalid_action"]


def test_invalid_action_penalty_and_shaping_are_opt_in(tokenizer):
    plain = gym.make("AgentR1/Sokoban-v0", tokenizer=tokenizer)
    plain.reset(options={"task": SOKOBAN})
    _, reward, _, _, info = plain.step(act(plain, "hmm"))
    assert reward == 0.0 and info["reward_components"] == {"outcome": 0.0, "shaping": 0.0, "invalid_penalty": 0.0}
    env = gym.make("AgentR1/Sokoban-v0", tokenizer=tokenizer, invalid_action_penalty=0.1, shaping=0.5)
    env.reset(options={"task": SOKOBAN})
    _, reward, _, _, info = env.step(act(env, "hmm"))
    assert reward == pytest.approx(-0.1) and info["reward_components"]["invalid_penalty"] == -0.1
    _, reward, _, _, info = env.step(act(env, "<action>right</action>"))
    assert reward == 0.0  # a push that leaves the box off-target: no progress
    _, reward, terminated, _, info = env.step(act(env, "<action>right</action>"))
    assert terminated and reward == pytest.approx(1.5)
    assert info["reward_components"] == {"outcome": 1.0, "shaping": 0.5, "invalid_penalty": 0.0}
    with pytest.raises(ValueError, match="invalid_action_penalty must be >= 0"):
        gym.make("AgentR1/Sokoban-v0", tokenizer=tokenizer, invalid_action_penalty=-1)


def test_turn_limit_truncates(tokenizer):
    env = gym.make("AgentR1/FrozenLake-v0", tokenizer=tokenizer, max_turns=2)
    env.reset(options={"task": LAKE})
    _, _, terminated, truncated, _ = env.step(act(env, "<action>up</action>"))
    assert not (terminated or truncated)
    _, reward, terminated, truncated, info = env.step(act(env, "<action>left</action>"))
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert info["truncated_reason"] == "max_turns" and info["correct"] is False and info["blocked_moves"] == 2


# -- context management ---------------------------------------------------------------------------


def _non_canonical(env, text: str) -> list[int]:
    """Ids of ``text`` one character at a time: decodes to ``text`` but is not its canonical
    encoding, so any re-encoding of the action would show."""
    template = env.unwrapped.template
    ids = [i for ch in text for i in template.encode(ch)]
    assert ids != template.encode(text) and template.decode(ids) == text
    return ids + list(template.end_of_turn_ids)


@pytest.mark.parametrize("env_id, task, texts", [
    ("AgentR1/Sokoban-v0", SOKOBAN, ["<action>left</action>"] * 5 + ["<action>right, right, right</action>"]),
    ("AgentR1/Wordle-v0", {"word": "crane"}, ["<guess>pious</guess>", "<guess>slate</guess>", "oops", "<guess>brace</guess>", "<guess>grace</guess>", "<guess>crane</guess>"]),
])
@pytest.mark.parametrize("context, k", [("full", 3), ("last_k", 2), ("board", 3)])
def test_context_modes_keep_training_ids_drift_free(env_id, task, texts, context, k, tokenizer):
    env = gym.make(env_id, tokenizer=tokenizer, context=context, last_k=k, max_turns=20)
    obs, _ = env.reset(options={"task": task})
    prompt = list(obs["prompt_ids"])
    opening = obs["messages"][:2]
    for step, text in enumerate(texts, start=1):
        action = _non_canonical(env, text)
        obs, reward, terminated, truncated, info = env.step(np.asarray(action))
        ids = list(obs["prompt_ids"])
        done = terminated or truncated
        rewrite_expected = not done and (context == "board" or (context == "last_k" and step > k))
        assert info["new_segment"] is rewrite_expected, (step, context)
        if info["new_segment"]:
            # a new segment: the next prompt is a fresh render of the new messages ...
            assert ids == fresh_render(env, obs["messages"])
            assert ids[: len(prompt)] != prompt
            if context == "board":
                assert [m["role"] for m in obs["messages"]] == ["system", "user"]
            else:
                assert obs["messages"][:2] == opening and len(obs["messages"]) == 2 + 2 * k
                assert obs["messages"][-2] == {"role": "assistant", "content": text}
        else:
            # ... within a segment the invariant holds with the policy's own (non-canonical) ids
            assert ids[: len(prompt)] == prompt
            assert ids[len(prompt): len(prompt) + len(action)] == action
        prompt = ids
    assert done and reward == 1.0 and info["success"]
    assert info["segment"] == {"full": 0, "last_k": len(texts) - 1 - k, "board": len(texts) - 1}[context]


def test_recorded_action_ids_are_exactly_what_the_policy_generated(tokenizer):
    """Through the rollout driver: each step's response ids are the generated ids, verbatim, on
    rewrite steps too; and a step's prompt is what the env showed (fresh render after a rewrite)."""
    script_texts = ["<action>left</action>", "<action>up</action>", "<action>down</action>", "<action>right, right, right</action>"]

    def script(conversation, turn):
        # Rewrites make every prompt look like a new conversation to ScriptedPolicy: count steps here.
        script.calls += 1
        return [i for ch in script_texts[(script.calls - 1) % 4] for i in tokenizer.encode(ch, add_special_tokens=False)]

    script.calls = 0
    policy = ScriptedPolicy(tokenizer, script)
    env = gym.make("AgentR1/Sokoban-v0", tokenizer=tokenizer, context="last_k", last_k=1, max_turns=6)
    result = run_episodes([env], policy, episodes=1, batch_size=1, progress=False)  # a seeded easy level
    (trajectory,) = result.trajectories
    assert len(trajectory.steps) >= 3
    generated = [list(g.ids) for g in policy.outputs]
    assert [s.response_ids for s in trajectory.steps] == generated
    steps = trajectory.steps
    assert any(s.new_segment for s in steps)
    for before, after in zip(steps, steps[1:]):
        if before.new_segment:
            assert after.prompt_ids[: len(before.prompt_ids)] != before.prompt_ids + before.response_ids
        else:
            assert after.prompt_ids[: len(before.prompt_ids) + len(before.response_ids)] == before.prompt_ids + before.response_ids


def test_last_k_shrinks_the_window_to_fit_the_context_limit(tokenizer):
    env = gym.make("AgentR1/Wordle-v0", tokenizer=tokenizer, context="last_k", last_k=4, max_context_tokens=700, max_action_tokens=200)
    obs, _ = env.reset(options={"task": {"word": "crane"}})
    filler = "Let me think about letters. " * 12
    for word in ["pious", "slate", "brick", "dough", "fluff"]:
        obs, _, terminated, truncated, info = env.step(act(env, f"{filler}<guess>{word}</guess>"))
        assert not (terminated or truncated)
        assert info["context_tokens"] <= 700
    assert info["new_segment"] and len(obs["messages"]) < 2 + 2 * 4


def test_board_mode_with_a_tiny_limit_truncates_cleanly(tokenizer):
    env = gym.make("AgentR1/Sokoban-v0", tokenizer=tokenizer, context="board", max_context_tokens=120)
    env.reset(options={"task": SOKOBAN})
    _, reward, terminated, truncated, info = env.step(act(env, "<action>left</action>"))
    assert (reward, terminated, truncated, info["truncated_reason"]) == (0.0, False, True, "max_context_tokens")


def test_astep_works(tokenizer):
    env = gym.make("AgentR1/Wordle-v0", tokenizer=tokenizer, context="board")

    async def play():
        env.reset(options={"task": {"word": "crane"}})
        return await env.unwrapped.astep(act(env, "<guess>crane</guess>"))

    _, reward, terminated, _, info = asyncio.run(play())
    assert (reward, terminated, info["correct"]) == (1.0, True, True)


@pytest.mark.parametrize("kwargs, message", [
    ({"context": "window"}, "context must be one of"),
    ({"last_k": 0}, "last_k must be >= 1"),
    ({"difficulty": "insane"}, "unknown Sokoban difficulty"),
    ({"split": "dev"}, "unknown split"),
    ({"max_moves_per_turn": 0}, "max_moves_per_turn"),
])
def test_bad_constructor_arguments(kwargs, message, tokenizer):
    with pytest.raises(ValueError, match=message):
        gym.make("AgentR1/Sokoban-v0", tokenizer=tokenizer, **kwargs)
