"""AgentR1/CustomerService-v0 driven by token ids: expert episodes, policy violations, the scripted
customer's exact lines, the no-drift invariant, check_env and fuzzed actions."""

from __future__ import annotations

import asyncio

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agent_gym
from agent_gym.tools import HermesParser
from agent_gym_customer_service.expert import ASK_IDENTITY, expert_texts
from agent_gym_customer_service.generate import generate_task

ENV_ID = "AgentR1/CustomerService-v0"
HERMES = HermesParser()


def act(tokenizer, text: str) -> list[int]:
    """The ids a policy writing ``text`` generates: its tokens and the end of turn."""
    return tokenizer.encode(text, add_special_tokens=False) + [tokenizer.convert_tokens_to_ids("<|im_end|>")]


def calls(*specs: dict) -> str:
    return HERMES.format_calls(list(specs))


def play(env, tokenizer, texts: list[str]):
    """Step ``texts`` in order, checking the no-drift invariant on every appending step; the last step's result."""
    obs = env.unwrapped.context.observation()
    for text in texts:
        prev, action = obs["prompt_ids"].tolist(), act(tokenizer, text)
        obs, reward, terminated, truncated, info = env.step(np.asarray(action))
        if terminated or truncated:
            return obs, reward, terminated, truncated, info
        ids = obs["prompt_ids"].tolist()
        assert ids[: len(prev) + len(action)] == prev + action and len(ids) > len(prev) + len(action)
        assert not info["new_segment"]
    return obs, reward, terminated, truncated, info


def test_registered_with_its_tools():
    card = {c.id: c for c in agent_gym.list_envs()}[ENV_ID]
    assert card.package == "agent-r1-gym-customer-service"
    assert card.tools == ("find_customer", "list_orders", "get_order", "get_product", "cancel_order",
                          "change_address", "return_items", "exchange_items")


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_the_scripted_expert_reaches_reward_one_with_exact_info(tokenizer, difficulty):
    env = gym.make(ENV_ID, tokenizer=tokenizer, difficulty=difficulty, split="test")
    for seed in (0, 1):
        env.reset(seed=seed)
        task = env.unwrapped.task
        texts = expert_texts(task, HERMES)
        obs, reward, terminated, truncated, info = play(env, tokenizer, texts)
        assert (reward, terminated, truncated, info["correct"]) == (1.0, True, False, True), info
        assert info["turn"] == len(texts)
        assert (info["db_match"], info["info_given"], info["policy_violations"]) == (True, True, 0)
        assert (info["db_diff"], info["info_missing"], info["answer_check"]) == ([], [], "correct")
        assert info["tool_errors"] == 0 and info["reward_components"] == {"outcome": 1.0}
        assert len(task.requests) == {"easy": 1, "medium": 2, "hard": 3}[difficulty]
        assert sum(r.trap is not None for r in task.requests) == (difficulty == "hard")
        # the information asked for is exactly what the expert told: each value is in its messages
        told = " ".join(m["content"] for m in env.unwrapped.transcript if m["role"] == "assistant")
        assert all(value in told for _, value in task.info_expected())
        assert obs["messages"][-1] == {"role": "user", "content": "Thank you, that's all I needed. ###STOP###"}
    env.close()


def test_the_customer_reveals_the_goal_turn_by_turn(tokenizer):
    env = gym.make(ENV_ID, tokenizer=tokenizer, difficulty="hard")
    obs, info = env.reset(options={"task_id": "train-hard-105"})
    task = env.unwrapped.task
    first, trap, second = task.requests
    assert (first.kind, trap.kind, trap.trap, second.kind) == (
        "return", "cancel", "a delivered order cannot be cancelled (only pending ones)", "address")
    user = task.user
    assert obs["messages"][1]["content"] == (
        f"Hi! I want to return the {' and the '.join(first.item_names)} from my order {first.order_id}. "
        "How much will I get back?")
    said = []
    for text in [ASK_IDENTITY, "Which order do you mean?", "Shall I proceed with the return?",
                 "Done. Is there anything else I can help you with?", "I cannot do that.",
                 "Could you give me your email?", "Anything else?"]:
        obs, reward, terminated, truncated, info = env.step(act(tokenizer, text))
        said.append(obs["messages"][-1]["content"])
    address = second.address
    assert said == [
        f"Sure, my email is {user['email']}." if user["prefers"] == "email"
        else f"Sure, my name is {user['first_name']} {user['last_name']} and my zip code is {user['zip']}.",
        f"Sorry if I was unclear. I want to return the {' and the '.join(first.item_names)} from my order {first.order_id}. How much will I get back?",
        "Yes, please go ahead.",
        f"Thanks! One more thing: I'd like to cancel my order {trap.order_id}, I don't need it anymore. How much will be refunded?",
        f"Thanks! One more thing: Please change the shipping address of my order {second.order_id} to "
        f"{address['street']}, {address['city']}, {address['zip']}.",
        f"Sure, my email is {user['email']}.",
        "Thank you, that's all I needed. ###STOP###",
    ]
    # nothing was done: the end state is the initial one, so the reward is 0
    assert (terminated, truncated, reward, info["db_match"], info["info_given"]) == (True, False, 0.0, False, False)
    assert info["user_turns"] == 8 and info["user_stopped"] is True


def test_cancelling_a_delivered_order_is_a_violation_and_reward_zero(tokenizer):
    env = gym.make(ENV_ID, tokenizer=tokenizer, difficulty="hard")
    env.reset(options={"task_id": "train-hard-105"})
    task = env.unwrapped.task
    trap = task.requests[1]
    texts = expert_texts(task, HERMES)
    # the expert, except that it tries the forbidden cancellation before refusing
    at = texts.index(next(t for t in texts if t.startswith("I'm sorry")))
    texts.insert(at, calls({"name": "cancel_order", "arguments": {"order_id": trap.order_id}}))
    obs, reward, terminated, truncated, info = play(env, tokenizer, texts[: at + 1])
    assert info["tool_results"] == ["policy"] and info["tool_error_kinds"] == {"policy": 1}
    assert info["policy_violations"] == 1
    assert obs["messages"][-1]["content"] == (
        f"Error: order {trap.order_id} is delivered: only pending orders can be cancelled; tell the user it "
        "cannot be cancelled (a delivered order's items may be returned instead)")
    obs, reward, terminated, truncated, info = play(env, tokenizer, texts[at + 1:])
    assert (reward, terminated, info["correct"], info["answer_check"]) == (0.0, True, False, "policy_violation")
    assert (info["db_match"], info["info_given"]) == (True, True)  # refused: the data is right, the attempt is not
    assert info["violations"] == [f"cancel {trap.order_id} (delivered)"]


def test_changes_before_verification_and_wrong_changes(tokenizer):
    env = gym.make(ENV_ID, tokenizer=tokenizer, difficulty="easy")
    env.reset(options={"task_id": "train-easy-3"})
    task = env.unwrapped.task
    request = task.requests[0]
    order = request.order_id
    obs, *_, info = env.step(act(tokenizer, calls({"name": "get_order", "arguments": {"order_id": order}})))
    assert info["tool_error_kinds"] == {"not_verified": 1} and info["policy_violations"] == 0  # a read: no violation
    obs, *_, info = env.step(act(tokenizer, calls({"name": "cancel_order", "arguments": {"order_id": order}})))
    assert info["tool_error_kinds"] == {"not_verified": 2} and info["policy_violations"] == 1  # a change: one
    assert obs["messages"][-1]["content"].startswith(f"Error: order {order} belongs to a customer whose identity is not verified")
    obs, *_, info = env.step(act(tokenizer, calls({"name": "get_order", "arguments": {"order_id": "#W0000000"}},
                                                  {"name": "get_product", "arguments": {"product_id": "P999"}},
                                                  {"name": "find_customer", "arguments": {"email": "nobody@example.com"}})))
    assert info["tool_results"] == ["unknown_id", "unknown_id", "no_match"]
    assert info["tool_errors"] == 5 and not info["verified"]


def test_a_wrong_change_fails_on_the_database(tokenizer):
    """Returning every item of the order when the customer asked for some: allowed by the policy, wrong for the goal."""
    env = gym.make(ENV_ID, tokenizer=tokenizer, difficulty="easy")
    env.reset(options={"task_id": "train-easy-1"})
    task = env.unwrapped.task
    (request,) = task.requests
    items = sorted(line["item_id"] for line in task.db["order_items"] if line["order_id"] == request.order_id)
    extra = sorted(set(items) - set(request.item_ids))[0]
    texts = [calls({"name": "return_items", "arguments": {"order_id": request.order_id, "item_ids": items}})
             if '"return_items"' in t else t for t in expert_texts(task, HERMES)]
    obs, reward, terminated, truncated, info = play(env, tokenizer, texts)
    assert (reward, info["db_match"], info["policy_violations"], info["answer_check"]) == (0.0, False, 0, "db_mismatch")
    assert f"order_items {request.order_id}/{extra}: status is 'return_requested', expected 'ordered'" in info["db_diff"]


def test_missing_information_fails(tokenizer):
    env = gym.make(ENV_ID, tokenizer=tokenizer, difficulty="easy")
    env.reset(options={"task_id": "test-easy-2"})
    task = env.unwrapped.task
    assert task.requests[0].kind == "cancel" and task.info_expected()
    texts = [t if "anything else" not in t else "All done. Is there anything else I can help you with?" for t in expert_texts(task, HERMES)]
    obs, reward, terminated, truncated, info = play(env, tokenizer, texts)
    assert (reward, info["db_match"], info["info_given"], info["answer_check"]) == (0.0, True, False, "info_missing")
    assert info["info_missing"] == [v for _, v in task.info_expected()]


def test_a_tool_call_on_the_last_turn_truncates_and_is_graded(tokenizer):
    env = gym.make(ENV_ID, tokenizer=tokenizer, difficulty="easy", max_turns=2)
    env.reset(seed=0)
    env.step(act(tokenizer, ASK_IDENTITY))
    obs, reward, terminated, truncated, info = env.step(act(tokenizer, calls({"name": "list_orders", "arguments": {"customer_id": "x"}})))
    assert (terminated, truncated, info["truncated_reason"], reward, info["user_stopped"]) == (False, True, "max_turns", 0.0, False)


def test_astep_plays_the_same_episode(tokenizer):
    task_id = "test-medium-2"
    sync, asy = (gym.make(ENV_ID, tokenizer=tokenizer, difficulty="medium", split="test") for _ in range(2))
    sync.reset(options={"task_id": task_id})
    asy.reset(options={"task_id": task_id})
    texts = expert_texts(sync.unwrapped.task, HERMES)

    async def run():
        return [await asy.astep(act(tokenizer, t)) for t in texts]

    got = asyncio.run(run())
    want = [sync.step(act(tokenizer, t)) for t in texts]
    for g, w in zip(got, want):
        assert np.array_equal(g[0]["prompt_ids"], w[0]["prompt_ids"]) and g[1:] == w[1:]
    assert want[-1][1] == 1.0


def test_a_custom_task_and_its_round_trip(tokenizer):
    task = generate_task(5, "medium", "train")
    env = gym.make(ENV_ID, tokenizer=tokenizer)
    obs, info = env.reset(options={"task": task.to_dict()})
    assert env.unwrapped.task == task and env.unwrapped.task.expected_db == task.expected_db
    _, reward, *_ = play(env, tokenizer, expert_texts(task, HERMES))
    assert reward == 1.0
    broken = task.to_dict()
    broken["requests"][0] = {**broken["requests"][0], "order_id": "#W0000000", "trap": None, "kind": "cancel"}
    with pytest.raises(ValueError, match=r"the goal's action cancel_order\(\{'order_id': '#W0000000'\}\) is refused: no order #W0000000"):
        env.reset(options={"task": broken})
    with pytest.raises(KeyError, match="ids look like 'train-easy-123'"):
        env.reset(options={"task_id": "train-extreme-1"})


def test_bad_arguments_are_refused_with_the_fix():
    with pytest.raises(ValueError, match="unknown CustomerService difficulty 'expert'; known: easy, medium, hard"):
        gym.make(ENV_ID, difficulty="expert")
    with pytest.raises(ValueError, match="needs user_model="):
        gym.make(ENV_ID, user="http://localhost:8000/v1")
    with pytest.raises(ValueError, match="unknown user 'gpt'"):
        gym.make(ENV_ID, user="gpt")


def test_a_callable_user_backend_plays_the_customer(tokenizer):
    seen = []

    def backend(messages):
        seen.append(messages)
        return "ok, bye ###STOP###"

    env = gym.make(ENV_ID, tokenizer=tokenizer, difficulty="easy", user=backend)
    obs, _ = env.reset(seed=4)
    opening = obs["messages"][1]["content"]
    obs, reward, terminated, truncated, info = env.step(act(tokenizer, "Hello, how can I help?"))
    assert terminated and obs["messages"][-1]["content"] == "ok, bye ###STOP###"
    system, first, agent = seen[0]
    assert system["role"] == "system" and "###STOP###" in system["content"]
    assert first == {"role": "assistant", "content": opening} and agent == {"role": "user", "content": "Hello, how can I help?"}

    def broken(messages):
        raise ConnectionError("server down")

    env = gym.make(ENV_ID, tokenizer=tokenizer, difficulty="easy", user=broken)
    env.reset(seed=4)
    obs, reward, terminated, truncated, info = env.step(act(tokenizer, "Hello?"))
    assert (truncated, info["truncated_reason"], info["user_error"]) == (True, "user_error", "ConnectionError: server down")


def test_a_snapshot_continues_the_episode_identically(tokenizer):
    """Where the core has snapshots (agent_gym.core.snapshot): the shop and the customer are episode data."""
    pytest.importorskip("agent_gym.core.snapshot")
    from agent_gym.core.snapshot import restore

    env = gym.make(ENV_ID, tokenizer=tokenizer, difficulty="hard")
    env.reset(options={"task_id": "train-hard-105"})
    texts = expert_texts(env.unwrapped.task, HERMES)
    play(env, tokenizer, texts[:5])  # verified, one request done, its change made
    fork = restore(gym.make(ENV_ID, tokenizer=tokenizer, difficulty="hard"), env.unwrapped.snapshot())
    for text in texts[5:]:
        got, want = fork.step(act(tokenizer, text)), env.step(act(tokenizer, text))
        assert np.array_equal(got[0]["prompt_ids"], want[0]["prompt_ids"]) and got[1:] == want[1:]
    assert want[1] == 1.0


def test_check_env_passes(tokenizer):
    env = gym.make(ENV_ID, tokenizer=tokenizer, difficulty="hard")
    check_env(env.unwrapped)


def test_seeded_resets_are_reproducible(tokenizer):
    a, b = (gym.make(ENV_ID, tokenizer=tokenizer) for _ in range(2))
    oa, ia = a.reset(seed=11)
    ob, ib = b.reset(seed=11)
    assert ia["task_id"] == ib["task_id"] and np.array_equal(oa["prompt_ids"], ob["prompt_ids"])
    assert ia["task_id"].startswith("train-medium-")


def test_random_token_actions_never_raise(tokenizer):
    env = gym.make(ENV_ID, tokenizer=tokenizer, max_turns=4, difficulty="hard")
    template = env.unwrapped.template
    vocab, eot = template.vocab_size, list(template.end_of_turn_ids)
    texts = st.sampled_from([
        "<tool_call>", '<tool_call>\n{"name": "cancel_order", "arguments": {"order_id": 5}}\n</tool_call>',
        calls({"name": "return_items", "arguments": {"order_id": "#W1", "item_ids": []}}),
        calls({"name": "exchange_items", "arguments": {"order_id": "x", "item_ids": ["1"], "new_item_ids": []}}),
        calls({"name": "find_customer", "arguments": {"name": "A", "zip_code": ""}}), "anything else?", "###STOP###", "",
    ])
    ids = st.integers(0, vocab - 1)
    actions = st.one_of(
        st.lists(ids, max_size=30),
        st.tuples(texts, st.lists(ids, max_size=10)).map(lambda p: template.encode(p[0]) + p[1] + eot),
        st.lists(st.integers(-5, vocab + 5), max_size=5),
    )

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(actions, min_size=1, max_size=4), st.integers(0, 1000))
    def run(episode, seed):
        env.reset(seed=seed)
        for action in episode:
            obs, reward, terminated, truncated, info = env.step(action)
            assert env.observation_space.contains(obs) and "render_error" not in info
            assert sum(info["tool_error_kinds"].values()) == info["tool_errors"]
            if terminated or truncated:
                assert "correct" in info
                break

    run()
