"""AgentR1/SearchQA-v0 through gymnasium: registration, check_env, scripted episodes with exact
rewards and info, the no-drift invariant, tool errors, your own Search-R1-format data, fuzzing."""

from __future__ import annotations

import asyncio
import json

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agent_gym
from agent_gym.tools import HermesParser

ENV_ID = "AgentR1/SearchQA-v0"


def act(env, text: str) -> list[int]:
    """The ids a policy would generate for ``text``: its tokens plus the end-of-turn token."""
    template = env.unwrapped.template
    return template.encode(text) + list(template.end_of_turn_ids)


def call(name: str, **arguments) -> str:
    return HermesParser().format_calls([{"name": name, "arguments": arguments}])


def step_no_drift(env, obs, text: str):
    """Step with ``text`` and check: next prompt ids = previous prompt ids + action + appended ids."""
    prev = obs["prompt_ids"].tolist()
    action = act(env, text)
    out = env.step(np.asarray(action))
    ids = out[0]["prompt_ids"].tolist()
    assert ids[: len(prev) + len(action)] == prev + action
    if not (out[2] or out[3]):
        appended = env.unwrapped.template.decode(ids[len(prev) + len(action):])
        assert out[0]["messages"][-1]["content"] in appended  # the tool message is what was appended
        assert out[4]["new_segment"] is False
    return out


@pytest.fixture(scope="module")
def env(tokenizer):
    return gym.make(ENV_ID, tokenizer=tokenizer, difficulty="medium", split="test")


def test_registered_and_listed():
    cards = {card.id: card for card in agent_gym.list_envs()}
    assert cards[ENV_ID].tools == ("search", "open") and cards[ENV_ID].package == "agent-r1-gym-searchqa"


@pytest.mark.parametrize("difficulty", ["easy", "hard"])
def test_check_env_passes(tokenizer, difficulty):
    check_env(gym.make(ENV_ID, tokenizer=tokenizer, difficulty=difficulty).unwrapped, skip_render_check=True)


def test_reset_is_seeded_and_ids_pin_tasks(env, tokenizer):
    other = gym.make(ENV_ID, tokenizer=tokenizer, difficulty="medium", split="test")
    obs_a, info_a = env.reset(seed=5)
    obs_b, info_b = other.reset(seed=5)
    assert info_a["task_id"] == info_b["task_id"] and info_a["task_id"].startswith("test-medium-")
    assert np.array_equal(obs_a["prompt_ids"], obs_b["prompt_ids"]) and info_a["difficulty"] == "medium"
    obs, info = env.reset(options={"task_id": "train-hard-3"})
    assert info["task_id"] == "train-hard-3" and env.unwrapped.task.hops in (3, 4)
    assert env.unwrapped.task.question in obs["messages"][-1]["content"]
    with pytest.raises(KeyError, match="ids look like 'train-easy-123'"):
        env.reset(options={"task_id": "test-7"})
    obs, info = env.reset(options={"task": {"question": "Who?", "golden_answers": ["Me"]}})
    assert info["task_id"] == "custom" and "Question: Who?" in obs["messages"][-1]["content"]


def test_search_then_answer_correctly_is_rewarded(env):
    obs, _ = env.reset(options={"task_id": "test-medium-2"})
    task = env.unwrapped.task
    world = env.unwrapped.world
    start, middle = (world.entities[d] for d in task.supporting_docs)
    obs, reward, terminated, truncated, info = step_no_drift(env, obs, call("search", query=start.name))
    result = obs["messages"][-1]
    assert result["role"] == "tool" and result["name"] == "search"
    assert f"id: {start.id} | {start.name}" in result["content"]
    assert (reward, terminated, truncated, info["tool_results"]) == (0.0, False, False, ["ok"])
    obs, *_ = step_no_drift(env, obs, "Now the next step.\n" + call("open", doc_id=middle.id))
    assert obs["messages"][-1]["content"] == f"id: {middle.id} | {middle.name}\n{middle.text}"
    obs, reward, terminated, truncated, info = step_no_drift(
        env, obs, f"So the answer is\n<answer>{task.golden_answers[0].upper()}</answer>")
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info == {
        "task_id": "test-medium-2", "turn": 3, "correct": True, "reward_components": {"outcome": 1.0},
        "answer_check": "correct", "f1": 1.0, "predicted": task.golden_answers[0].upper(),
        "golden_answers": list(task.golden_answers), "difficulty": "medium", "hops": 2, "tool_calls": 2,
        "tool_errors": 0, "format_errors": 0, "tool_error_kinds": {}, "new_segment": False, "segment": 0,
        "context_tokens": len(obs["prompt_ids"]),
    }


def test_wrong_answers_get_zero_and_partial_f1(env):
    task = {"question": "Who founded Nocat Gazette?", "golden_answers": ["Ivo Dadov", "I. Dadov"]}
    cases = {
        "<answer>Ivo Smith</answer>": (0.0, "wrong_answer", 0.5),
        "<answer>Dadov</answer>": (0.0, "wrong_answer", 2 / 3),
        "Ivo Dadov": (0.0, "no_answer", 0.0),
        "<answer>the ivo dadov.</answer>": (1.0, "correct", 1.0),
        "<answer>i dadov</answer>": (1.0, "correct", 1.0),
    }
    for text, (reward, reason, f1) in cases.items():
        env.reset(options={"task": task})
        _, got, terminated, _, info = env.step(act(env, text))
        assert (got, info["answer_check"], terminated) == (reward, reason, True), text
        assert info["f1"] == pytest.approx(f1), text
        assert info["reward_components"] == {"outcome": reward}


def test_bad_tool_input_is_a_counted_tool_error(env):
    obs, _ = env.reset(seed=0)
    text = call("search", query="   ") + "\n" + call("open", doc_id="w99999") + "\n" + call("search", query=7)
    obs, reward, terminated, truncated, info = step_no_drift(env, obs, text)
    assert not (terminated or truncated) and reward == 0.0
    assert info["tool_results"] == ["empty_query", "unknown_doc_id", "invalid_arguments"]
    assert info["tool_errors"] == 3 and info["tool_error_kinds"] == {"empty_query": 1, "unknown_doc_id": 1, "invalid_arguments": 1}
    messages = [m["content"] for m in obs["messages"][-3:]]
    assert messages[0].startswith("Error: the query is empty: search with a few words")
    assert messages[1] == "Error: no passage has the id 'w99999': use an id exactly as a search result shows it (after 'id:')"
    obs, *_ , info = step_no_drift(env, obs, call("search", query="qqqzzz xxyyx"))
    assert obs["messages"][-1]["content"].startswith('No passage matches "qqqzzz xxyyx".')
    assert info["tool_results"] == ["ok"] and info["tool_errors"] == 3  # nothing found is not an error


def test_results_are_capped(tokenizer):
    env = gym.make(ENV_ID, tokenizer=tokenizer, top_k=2, snippet_chars=40, max_passage_chars=60)
    obs, _ = env.reset(options={"task_id": "train-easy-0"})
    start = env.unwrapped.world.entities[env.unwrapped.task.supporting_docs[0]]
    obs, *_ = env.step(act(env, call("search", query=start.name)))
    lines = obs["messages"][-1]["content"].splitlines()
    assert len(lines) == 4 and all(len(line) <= 40 for line in lines[1::2]) and lines[1].endswith("...")
    obs, *_ = env.step(act(env, call("open", doc_id=start.id)))
    text = obs["messages"][-1]["content"].split("\n", 1)[1]
    assert len(text) <= 60 and text.endswith("...")
    small = gym.make(ENV_ID, tokenizer=tokenizer, max_result_chars=50)
    small.reset(options={"task_id": "train-easy-0"})
    obs, *_ = small.step(act(small, call("search", query=start.name)))
    content = obs["messages"][-1]["content"]
    assert content.startswith(f"[1] id: {start.id}") and content[:50] in content and len(content.split("\n... [truncated")[0]) == 50


def test_the_turn_limit_truncates_and_astep_works(tokenizer):
    env = gym.make(ENV_ID, tokenizer=tokenizer, max_turns=2, difficulty="easy")
    env.reset(options={"task_id": "train-easy-1"})
    env.step(act(env, call("search", query="University")))
    _, reward, terminated, truncated, info = env.step(act(env, call("search", query="Press")))
    assert (reward, terminated, truncated, info["truncated_reason"]) == (0.0, False, True, "max_turns")

    async def episode():
        env.reset(options={"task_id": "train-easy-1"})
        answer = env.unwrapped.task.golden_answers[0]
        await env.unwrapped.astep(act(env, call("search", query="University")))
        return await env.unwrapped.astep(act(env, f"<answer>{answer}</answer>"))

    _, reward, terminated, _, info = asyncio.run(episode())
    assert (reward, terminated, info["answer_check"], info["tool_calls"]) == (1.0, True, "correct", 1)


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_your_own_corpus_and_questions(tmp_path, tokenizer):
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [
        {"id": "0", "contents": '"Zorblat Tower"\nZorblat Tower is a lighthouse built by Quenna Marsh in 1911.'},
        {"id": "1", "contents": '"Quenna Marsh"\nQuenna Marsh was an engineer born in Pellwick.'},
        {"id": "2", "title": "Pellwick", "contents": "Pellwick is a harbour town."},
        {"id": "3", "contents": "A line without a title about nothing in particular."},
    ])
    questions = write_jsonl(tmp_path / "questions.jsonl", [
        {"question": "Where was the builder of Zorblat Tower born?", "golden_answers": ["Pellwick", "Pellwick town"]},
        {"id": "q-7", "question": "Who built Zorblat Tower?", "golden_answers": ["Quenna Marsh"]},
    ])
    env = gym.make(ENV_ID, tokenizer=tokenizer, corpus=str(corpus), questions=str(questions), split="test")
    base = env.unwrapped
    assert [t.id for t in base.tasks] == ["test-0", "q-7"]
    assert [(p.id, p.title) for p in base.passages] == [
        ("0", "Zorblat Tower"), ("1", "Quenna Marsh"), ("2", "Pellwick"), ("3", "A line without a title about nothing in")]
    obs, info = env.reset(options={"task_id": "test-0"})
    assert info["difficulty"] == "custom"
    obs, *_ = step_no_drift(env, obs, call("search", query="Zorblat Tower builder"))
    assert obs["messages"][-1]["content"].startswith("[1] id: 0 | Zorblat Tower\nZorblat Tower is a lighthouse")
    obs, *_ = step_no_drift(env, obs, call("search", query="Quenna Marsh born"))
    assert "[1] id: 1 | Quenna Marsh" in obs["messages"][-1]["content"]
    obs, reward, terminated, _, info = step_no_drift(env, obs, "<answer>Pellwick</answer>")
    assert (reward, terminated, info["correct"], info["hops"]) == (1.0, True, True, None)
    env.reset(seed=0)  # draws from the file's questions
    assert base.task.id in ("test-0", "q-7")


def test_bad_arguments_name_the_fix(tmp_path, tokenizer):
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"id": "0", "contents": "x\ny"}])
    with pytest.raises(ValueError, match="corpus= needs questions= too"):
        gym.make(ENV_ID, tokenizer=tokenizer, corpus=str(corpus))
    questions = write_jsonl(tmp_path / "q.jsonl", [{"question": "Why?", "golden_answers": []}])
    with pytest.raises(ValueError, match=r"q.jsonl:1: golden_answers must be a non-empty list"):
        gym.make(ENV_ID, tokenizer=tokenizer, corpus=str(corpus), questions=str(questions))
    write_jsonl(questions, [{"question": "Why?", "golden_answers": ["x"]}])
    with pytest.raises(ValueError, match="with questions= leave it out"):
        gym.make(ENV_ID, tokenizer=tokenizer, questions=str(questions), difficulty="easy")
    write_jsonl(corpus, [{"id": "0", "contents": "a"}, {"id": "0", "contents": "b"}])
    with pytest.raises(ValueError, match="the doc id '0' appears twice"):
        gym.make(ENV_ID, tokenizer=tokenizer, corpus=str(corpus), questions=str(questions))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        gym.make(ENV_ID, tokenizer=tokenizer, corpus=str(tmp_path / "none.jsonl"), questions=str(questions))
    with pytest.raises(ValueError, match="unknown SearchQA difficulty 'extreme'"):
        gym.make(ENV_ID, tokenizer=tokenizer, difficulty="extreme")
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        gym.make(ENV_ID, tokenizer=tokenizer, split="dev")
    with pytest.raises(TypeError, match="do not pass tools="):
        gym.make(ENV_ID, tokenizer=tokenizer, tools=[])


def test_prompt_templates_can_be_overridden(tmp_path, tokenizer):
    (tmp_path / "searchqa_user.j2").write_text("Q: {{ question }}")
    env = gym.make(ENV_ID, tokenizer=tokenizer, prompt_dir=tmp_path)
    obs, _ = env.reset(options={"task": {"question": "Who?", "golden_answers": ["Me"]}})
    assert obs["messages"][-1]["content"] == "Q: Who?"


def test_random_token_actions_never_raise(tokenizer):
    env = gym.make(ENV_ID, tokenizer=tokenizer, max_turns=3, difficulty="hard")
    template = env.unwrapped.template
    vocab = template.vocab_size
    eot = list(template.end_of_turn_ids)
    ids = st.one_of(st.integers(0, vocab - 1), st.sampled_from(sorted(set(tokenizer.all_special_ids) | set(eot))))
    texts = st.sampled_from([
        call("search", query="Press"), call("open", doc_id="w00001"), call("open", doc_id=""), "<tool_call>{",
        "<answer>", "</answer><answer>x", call("search", query="\u202e\x00"), "[search(query='x')]",
    ])
    actions = st.one_of(
        st.lists(ids, max_size=40),
        st.tuples(texts, st.lists(ids, max_size=10)).map(lambda p: template.encode(p[0]) + p[1]),
        texts.map(lambda t: template.encode(t) + eot),
        st.lists(st.integers(-3, vocab + 3), min_size=1, max_size=4),
    )

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(actions, min_size=1, max_size=3), st.integers(0, 1000))
    def run(episode, seed):
        obs, _ = env.reset(seed=seed)
        for action in episode:
            prev = obs["prompt_ids"].tolist()
            obs, reward, terminated, truncated, info = env.step(action)
            assert "render_error" not in info and reward in (0.0, 1.0)
            assert sum(info["tool_error_kinds"].values()) == info["tool_errors"]
            assert env.observation_space.contains(obs)
            if terminated or truncated:
                break
            kept = list(action)[: len(action) - info.get("ids_after_end_of_turn", 0)]
            assert obs["prompt_ids"].tolist()[: len(prev) + len(kept)] == prev + kept

    run()
