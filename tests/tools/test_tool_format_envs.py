"""Tool-call formats through the envs: ``tool_format=`` on every tool env, the prompt each format gets,
GSM8KTool episodes driven by token ids in each format, and action fuzzing of every registered env with
the real tokenizers of the template matrix (SmolLM2 embedded; Gemma 3 and DeepSeek-R1-Distill-Qwen
from GGUF headers, see ``family_tokenizer``): nothing raises out of ``step``, every error is counted
in ``info``."""

from __future__ import annotations

import io
import json
import os
import sys
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agent_gym  # noqa: F401  (registers the envs)
from agent_gym.cli.main import main
from agent_gym.tools import PARSERS, tool

FORMATS = ("hermes", "qwen3_coder", "pythonic")
TOOL_ENVS = ("AgentR1/ArithmeticTool-v0", "AgentR1/CountdownTool-v0", "AgentR1/CustomerService-v0",
             "AgentR1/GSM8KPython-v0", "AgentR1/GSM8KTool-v0", "AgentR1/MCPTask-v0", "AgentR1/SearchQA-v0", "AgentR1/TableQA-v0")
OTHER_ENVS = ("AgentR1/Arithmetic-v0", "AgentR1/Countdown-v0", "AgentR1/FrozenLake-v0", "AgentR1/GSM8K-v0",
              "AgentR1/Sokoban-v0", "AgentR1/Wordle-v0")
# Envs whose episodes need more than a reset to exist (a repository copy in a sandbox per episode; an
# agent program answering on the endpoint), so they are not fuzzed here by the hundred: their own
# tests drive bad and random actions through them (the file named and its test).
OWN_ACTION_TESTS = {
    "AgentR1/SWE-v0": ("envs/swe/tests/test_swe_env.py", "test_bad_actions_end_the_episode"),
    "AgentR1/AgentProgram-v0": ("envs/agent_program/tests/test_agent_program_env.py",
                                "test_an_invalid_action_ends_the_episode_and_the_program_gets_410"),
    # two-player games: a move is parsed by the game (an illegal one is a penalty with its reason)
    **{f"AgentR1/{game}-v0": ("envs/multiagent/tests/test_view.py", "test_an_illegal_move_is_a_penalty_with_its_reason")
       for game in ("TicTacToe", "KuhnPoker", "ConnectFour", "Negotiation")},
}
# Every env the packages register, each tool env once per format.
ENV_CONFIGS = [(e, f) for e in TOOL_ENVS for f in FORMATS] + [(e, None) for e in OTHER_ENVS]


def test_the_configs_cover_every_registered_env():
    registered = sorted(e for e in gym.registry if e.startswith("AgentR1/"))
    assert sorted(TOOL_ENVS + OTHER_ENVS + tuple(e for e in OWN_ACTION_TESTS if e in registered)) == registered
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for path, test in OWN_ACTION_TESTS.values():
        assert f"def {test}(" in open(os.path.join(root, path), encoding="utf-8").read(), (path, test)
    assert set(FORMATS) == set(PARSERS)


def calls(fmt: str, *expressions: str) -> str:
    return PARSERS[fmt]().format_calls([{"name": "calculate", "arguments": {"expression": e}} for e in expressions])


def ids_of(env: Any, text: str) -> list[int]:
    """The ids a model writing ``text`` generates: the text's ids and the end of turn."""
    template = env.unwrapped.template
    return template.encode(text) + list(template.end_of_turn_ids)


# -- the prompt -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", TOOL_ENVS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_tool_env_offers_its_tools_in_the_format(tokenizer, env_id, fmt):
    env = gym.make(env_id, tokenizer=tokenizer, tool_format=fmt)
    try:
        obs, _ = env.reset(seed=0)
        unwrapped = env.unwrapped
        system = obs["messages"][0]["content"]
        assert unwrapped.tool_format == fmt and unwrapped.parser.name == fmt
        assert unwrapped.parser.describe_tools() in system
        tool_name = unwrapped.tools[0].name
        assert {
            "hermes": f'<tool_call>\n{{"name": "{tool_name}", "arguments": {{',
            "qwen3_coder": f"<tool_call>\n<function={tool_name}>\n<parameter=",
            "pythonic": f"[{tool_name}(",
        }[fmt] in system
        # The example call the prompt shows is one the env's parser reads as a working call.
        variables = unwrapped.tool_prompt_variables({"name": tool_name, "arguments": {}})
        assert variables["tool_format"] == fmt and variables["tools"] == [t.schema() for t in unwrapped.tools]
        for other in set(FORMATS) - {fmt}:
            assert PARSERS[other]([t.schema() for t in unwrapped.tools]).describe_tools() not in system
    finally:
        env.close()


TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTOOLS {{ tools | map(attribute='function.name') | join(',') }}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_chat_template_that_renders_tools_gets_them_and_the_prompt_only_shows_the_call(tokenizer, fmt):
    env = gym.make("AgentR1/GSM8KTool-v0", tokenizer=tokenizer, split="test", tool_format=fmt, chat_template=TOOLS_TEMPLATE)
    obs, _ = env.reset(options={"task_id": "test-0"})
    assert env.unwrapped.template.renders_tools
    text = tokenizer.decode(obs["prompt_ids"])
    assert text.startswith("<|im_start|>system\nTOOLS calculate<|im_end|>\n")
    system = obs["messages"][0]["content"]
    assert env.unwrapped.parser.describe_tools() not in system  # the chat template offers the schemas
    assert calls(fmt, "2 + 3 * 4") in system
    obs, _, _, _, info = env.step(ids_of(env, calls(fmt, "16 - 3 - 4")))
    assert info["tool_calls"] == 1 and info["tool_results"] == ["ok"]


def test_an_unknown_format_or_tools_a_format_cannot_name_fail_at_make():
    with pytest.raises(ValueError, match=r"^unknown tool-call format 'xml'; known: hermes, pythonic, qwen3_coder$"):
        gym.make("AgentR1/GSM8KTool-v0", tool_format="xml")

    @tool(name="web-search")
    def search(q: str) -> str:
        """Search."""
        return q

    with pytest.raises(ValueError, match="tool name 'web-search' cannot be used in the pythonic tool-call format"):
        gym.make("AgentR1/GSM8KTool-v0", tool_format="pythonic", tools=[search])


# -- GSM8KTool episodes in each format, with each family's tokenizer ---------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_gsm8k_tool_episode_in_each_format(family_tokenizer, fmt):
    """test-0 (Janet's ducks): one call, then two calls in one turn, then the answer: the calculator's
    results come back in order, the ids only grow by action + appended turn, and the reward is 1."""
    env = gym.make("AgentR1/GSM8KTool-v0", tokenizer=family_tokenizer, split="test", tool_format=fmt)
    try:
        obs, _ = env.reset(options={"task_id": "test-0"})
        turns = [
            (calls(fmt, "16 - 3 - 4"), ["9"]),
            ("Now the money.\n" + calls(fmt, "9 * 2", "16 - 3"), ["18", "13"]),
            ("She sells 9 eggs for $2 each.\n#### 18", None),
        ]
        for n, (text, results) in enumerate(turns, 1):
            prev = obs["prompt_ids"].tolist()
            action = ids_of(env, text)
            obs, reward, terminated, truncated, info = env.step(np.asarray(action))
            assert info["turn"] == n and "render_error" not in info
            if results is None:
                break
            ids = obs["prompt_ids"].tolist()
            assert ids[: len(prev) + len(action)] == prev + action
            appended = family_tokenizer.decode(ids[len(prev) + len(action) :])
            positions = [appended.index(r) for r in results]  # each result is there, in call order
            assert positions == sorted(positions)
            assert info["tool_results"] == ["ok"] * len(results)
            assert not (terminated or truncated)
        assert (reward, terminated, truncated, info["correct"]) == (1.0, True, False, True)
        assert (info["tool_calls"], info["tool_errors"], info["format_errors"]) == (3, 0, 0)
    finally:
        env.close()


BROKEN = {
    "hermes": '<tool_call>\n{"name": "calculate", "arguments": {"expression": }\n</tool_call>',
    "qwen3_coder": "<tool_call>\n<function=calculate>\n<parameter=expression>\n1 + 1\n</function>\n</tool_call>",
    "pythonic": '[calculate(expression="1 + 1")',
}


def mixed_turn(fmt: str) -> str:
    """One valid call, one to an unknown tool, one with a bad argument, then a malformed one."""
    specs = [
        {"name": "calculate", "arguments": {"expression": "6 * 7"}},
        {"name": "search", "arguments": {"query": "ducks"}},
        {"name": "calculate", "arguments": {"expr": "6 * 7"}},
    ]
    return PARSERS[fmt]().format_calls(specs) + "\n" + BROKEN[fmt]


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_error_kind_is_counted_in_each_format(tokenizer, fmt):
    env = gym.make("AgentR1/GSM8KTool-v0", tokenizer=tokenizer, split="test", tool_format=fmt)
    env.reset(options={"task_id": "test-0"})
    obs, reward, terminated, truncated, info = env.step(ids_of(env, mixed_turn(fmt)))
    assert info["tool_results"] == ["ok", "unknown_tool", "invalid_arguments", "malformed"]
    assert (info["tool_calls"], info["format_errors"], info["tool_errors"]) == (3, 1, 3)
    assert info["tool_error_kinds"] == {"unknown_tool": 1, "invalid_arguments": 1, "malformed": 1}
    results = [m["content"] for m in obs["messages"] if m["role"] == "tool"]
    assert results[:3] == [
        "42",
        "Error: unknown tool 'search'. Available tools: calculate.",
        "Error: invalid arguments for 'calculate': expression: Field required; expr: Extra inputs are not permitted",
    ]
    assert results[3] == "Error: malformed tool call: " + env.unwrapped.parser.parse(BROKEN[fmt]).errors[0].message
    assert not (terminated or truncated) and reward == 0.0


@pytest.mark.parametrize("fmt", FORMATS)
def test_few_shot_demonstrations_are_written_in_the_format(tokenizer, fmt):
    env = gym.make("AgentR1/GSM8KTool-v0", tokenizer=tokenizer, split="test", tool_format=fmt, few_shot=True)
    obs, _ = env.reset(options={"task_id": "test-0"})
    demo = [m for m in obs["messages"] if m["role"] == "assistant"]
    assert demo[0]["content"] == calls(fmt, "24 * 7") and demo[1]["content"] == calls(fmt, "168 - 150")
    assert [m["content"] for m in obs["messages"] if m["role"] == "tool"] == ["168", "18"]


# -- the CLI: --env-kwarg tool_format=... -----------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["qwen3_coder", "pythonic"])
def test_play_takes_the_format_as_an_env_kwarg(monkeypatch, capsys, fmt):
    stdin = f"{calls(fmt, '(16 - 3 - 4) * 2')}\n.\nShe makes 18 dollars.\n#### 18\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = main(["play", "GSM8KTool-v0", "--task-id", "test-0", "--env-kwarg", f"tool_format={fmt}"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "[tool calculate]\n18\n" in out and "reward: 1.0\n" in out and "turns: 2\n" in out


def test_eval_takes_the_format_as_an_env_kwarg(tokenizer, tmp_path, monkeypatch, capsys):
    # The model is the boundary here: a scripted policy answers with pythonic calls through eval's loop.
    from agent_gym.rollout import ScriptedPolicy

    script = {1: calls("pythonic", "16 - 3 - 4"), 2: calls("pythonic", "9 * 2"), 3: "#### 18"}
    monkeypatch.setattr(
        agent_gym.rollout, "HFPolicy", lambda model, *, tokenizer, **kw: ScriptedPolicy(tokenizer, lambda c, t: script[t]),
        raising=False,
    )
    out = tmp_path / "eval.jsonl"
    argv = ["eval", "AgentR1/GSM8KTool-v0", "--episodes", "1", "--no-progress", "--out", str(out),
            "--env-kwarg", "tool_format=pythonic"]
    assert main(argv) == 0, capsys.readouterr().err
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    final = record["steps"][-1]["info"]
    assert (final["tool_calls"], final["tool_errors"], final["format_errors"]) == (2, 0, 0)
    assert [m["content"] for m in record["messages"] if m["role"] == "tool"] == ["9", "18"]
    assert record["messages"][0]["content"].count("def calculate(expression: str):") == 1  # the pythonic prompt


def test_eval_with_an_unknown_format_fails_before_the_model_loads(tmp_path, monkeypatch, capsys):
    def no_model(*args, **kwargs):
        raise AssertionError("the model must not load")

    monkeypatch.setattr(agent_gym.rollout, "HFPolicy", no_model, raising=False)
    argv = ["eval", "AgentR1/GSM8KTool-v0", "--episodes", "1", "--out", str(tmp_path / "e.jsonl"),
            "--env-kwarg", "tool_format=xml"]
    assert main(argv) == 2
    assert "unknown tool-call format 'xml'; known: hermes, pythonic, qwen3_coder" in capsys.readouterr().err


# -- action fuzzing: every env, every tokenizer ------------------------------------------------------------

# Episodes per env, format and tokenizer (63 combinations on 2 CI cores); AGENT_GYM_FUZZ_EXAMPLES asks for more.
EXAMPLES = int(os.environ.get("AGENT_GYM_FUZZ_EXAMPLES", "12"))

HOSTILE_TEXTS = [
    "<tool_call>", "</tool_call>", "<tool_call>{", "<tool_call>" * 50, '<tool_call>{"name": "calculate"}</tool_call>',
    "<tool_call>\n<function=calculate>\n<parameter=expression>\n", "<function=calculate></function>",
    "<tool_call><function=python><parameter=code>\nprint(1)\n</parameter></function></tool_call>",
    "[calculate(", "[calculate(expression=", "[calculate(expression='1' + '2')]", "[python(code='''", "[f(" * 40,
    "[calculate(expression=\"\\N{BOGUS}\")]", "[calculate(expression=1if 1 else 2)]", "[" * 300 + "f(",
    "\u202e\u2066\U0001f600\x00\ufffd", "#### 18", "<answer>(6 + 4) * 3</answer>", "<action>up</action>",
    "<guess>crane</guess>", "<think>", "</think>",
]


def _tool_name(env: Any) -> str:
    return env.unwrapped.tools[0].name if env.unwrapped.tools else "calculate"


def _valid_calls(env: Any, fmt: str | None, n: int) -> str:
    name = _tool_name(env)
    args = {"code": "print(6 * 7)"} if name == "python" else {"expression": "6 * 7"}
    return PARSERS[fmt or "hermes"]().format_calls([{"name": name, "arguments": args}] * n)


def _check_step(env: Any, fmt: str | None, action: list[int], before: dict[str, Any], info: dict[str, Any],
                done: bool) -> None:
    """``info`` counts every error of the step it reports."""
    unwrapped = env.unwrapped
    template = unwrapped.template
    assert "render_error" not in info
    assert sum(info["tool_error_kinds"].values()) == info["tool_errors"]
    delta = {k: info[k] - before.get(k, 0) for k in ("tool_calls", "tool_errors", "format_errors")}
    vocab = template.vocab_size
    if len(action) > unwrapped.max_action_tokens or any(i < 0 or i >= vocab for i in action):
        assert info["invalid_action"] and done
        assert delta == {"tool_calls": 0, "tool_errors": 0, "format_errors": 1}
        return
    assert "invalid_action" not in info
    if not unwrapped.tools:
        return
    eot = list(template.end_of_turn_ids)
    cut = len(eot) if eot and action[-len(eot):] == eot else 0
    parsed = unwrapped.parser.parse(template.decode(action[: len(action) - cut]))
    assert delta["tool_calls"] == len(parsed.calls) and delta["format_errors"] == len(parsed.errors)
    if "tool_results" in info:  # the tools ran: one result per attempted call, each error counted
        assert len(info["tool_results"]) == len(parsed.calls) + len(parsed.errors)
        assert delta["tool_errors"] == sum(kind != "ok" for kind in info["tool_results"])
    else:
        assert delta["tool_errors"] == 0


@pytest.mark.parametrize(("env_id", "fmt"), ENV_CONFIGS, ids=[f"{e.split('/')[1]}-{f or 'none'}" for e, f in ENV_CONFIGS])
def test_random_actions_never_raise_and_every_error_is_counted(family_tokenizer, env_id, fmt):
    kwargs = {"tool_format": fmt} if fmt else {}
    env = gym.make(env_id, tokenizer=family_tokenizer, max_turns=3, **kwargs)
    template = env.unwrapped.template
    vocab = template.vocab_size
    eot = list(template.end_of_turn_ids)
    specials = sorted(set(family_tokenizer.all_special_ids) | set(eot))
    ids = st.one_of(st.integers(0, vocab - 1), st.sampled_from(specials))
    texts = st.one_of(
        st.sampled_from(HOSTILE_TEXTS),
        st.integers(1, 3).map(lambda n: _valid_calls(env, fmt, n)),
        st.lists(st.sampled_from(HOSTILE_TEXTS) | st.text(max_size=8), max_size=6).map("".join),
    )
    actions = st.one_of(
        texts.map(lambda t: template.encode(t) + eot),
        st.tuples(texts, st.lists(ids, max_size=20)).map(lambda p: template.encode(p[0]) + p[1]),
        st.lists(ids, max_size=40),
        st.tuples(st.lists(ids, max_size=5), st.sampled_from([-1, -(2**31), vocab, vocab + 7, 2**40, 2**64])).map(
            lambda p: p[0] + [p[1]]  # an out-of-vocabulary id (2**64 does not even fit an int64)
        ),
        st.just([]),
    )

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(actions, min_size=1, max_size=3), st.integers(0, 1000))
    def run(episode, seed):
        obs, info = env.reset(seed=seed)
        before: dict[str, Any] = {}
        for action in episode:
            obs, reward, terminated, truncated, info = env.step(action)
            done = terminated or truncated
            _check_step(env, fmt, list(action), before, info, done)
            assert env.observation_space.contains(obs)
            before = info
            if done:
                break

    try:
        run()
    finally:
        env.close()


@pytest.mark.parametrize(("env_id", "fmt"), ENV_CONFIGS, ids=[f"{e.split('/')[1]}-{f or 'none'}" for e, f in ENV_CONFIGS])
def test_a_100k_token_action_never_raises(family_tokenizer, env_id, fmt):
    """Refused under the default limit; read (and the episode cut at the context limit) under a limit
    that lets it in."""
    kwargs = {"tool_format": fmt} if fmt else {}
    rng = np.random.default_rng(0)
    for max_action_tokens in (None, 100_000):
        limits = {"max_action_tokens": max_action_tokens} if max_action_tokens else {}
        env = gym.make(env_id, tokenizer=family_tokenizer, **kwargs, **limits)
        try:
            env.reset(seed=0)
            vocab = env.unwrapped.template.vocab_size
            call = env.unwrapped.template.encode(_valid_calls(env, fmt, 1))
            action = call + rng.integers(0, vocab, 100_000 - len(call)).tolist()
            obs, reward, terminated, truncated, info = env.step(action)
            _check_step(env, fmt, action, {}, info, terminated or truncated)
            if max_action_tokens is None:
                assert info["invalid_action"] == (
                    f"action has 100000 tokens; the limit is max_action_tokens={env.unwrapped.max_action_tokens}"
                )
            else:
                assert terminated or truncated  # the context limit (4096 by default) cannot hold it
        finally:
            env.close()
