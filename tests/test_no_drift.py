"""The no-drift invariant on real tokenizers and templates, and the public conformance check."""

from __future__ import annotations

import pytest

from agent_gym.chat.conformance import DEFAULT_CONVERSATION, check_no_drift
from agent_gym.chat.context import ChatContext
from agent_gym.chat.template import ChatTemplate

# A ChatML template that, like Qwen3's and DeepSeek-R1's, strips <think> blocks from assistant turns
# that come before the last user message, and renders tool results as user <tool_response> turns.
THINK_STRIPPING_TEMPLATE = (
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for m in messages -%}{%- if m['role'] == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}"
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'assistant' and loop.index0 < ns.last_user and '</think>' in m['content'] -%}"
    "{{ '<|im_start|>assistant\n' + m['content'].split('</think>')[-1].lstrip() + '<|im_end|>\n' }}"
    "{%- elif m['role'] == 'tool' -%}"
    "{{ '<|im_start|>user\n<tool_response>\n' + m['content'] + '\n</tool_response><|im_end|>\n' }}"
    "{%- else -%}"
    "{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}"
)

# A template that enforces user/assistant alternation and raises on any other role (Llama-2 style).
STRICT_ROLES_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m['role'] not in ['system', 'user', 'assistant'] -%}{{ raise_exception('Unknown role ' + m['role']) }}{%- endif -%}"
    "{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}"
)


def test_smollm2_template_has_no_drift_and_matches_a_fresh_render(tokenizer):
    report = check_no_drift(tokenizer)
    assert report.ok and report.invariant_ok
    assert report.matches_template, str(report)
    assert report.first_divergence is None
    assert str(report).startswith("ok:")


def test_think_stripping_template_keeps_invariant_and_reports_where_rerendering_drifts(tokenizer):
    report = check_no_drift(tokenizer, chat_template=THINK_STRIPPING_TEMPLATE)
    assert report.invariant_ok
    assert not report.matches_template
    assert report.rewrites_history
    # The first assistant turn (before the follow-up user question) loses its <think> on re-render:
    # both renders start that turn with "<", then ours has "think" where the re-render has "tool" (of
    # <tool_call>): the divergence is at the second token of that turn's content.
    template = ChatTemplate(tokenizer, chat_template=THINK_STRIPPING_TEMPLATE)
    prefix = template.render(list(DEFAULT_CONVERSATION[:2]), add_generation_prompt=True)
    assert report.first_divergence == len(template.encode(prefix)) + 1
    assert (report.incremental_token, report.template_token) == ("think", "tool")
    assert "the template rewrites earlier turns" in str(report)


def test_appended_tool_turn_ids_exact_for_smollm2(tokenizer):
    template = ChatTemplate(tokenizer)
    assert template.end_of_turn_ids == [tokenizer.convert_tokens_to_ids("<|im_end|>")] == [2]
    ctx = ChatContext.start(template, [{"role": "user", "content": "2+2?"}])
    start = list(ctx.ids)
    action = template.encode("Let me check.") + [2]
    ctx.append_action(action, {"role": "assistant", "content": "Let me check."})
    added = ctx.append_messages([{"role": "tool", "content": "4"}])
    assert ctx.ids == start + action + added
    assert tokenizer.decode(added) == "\n<|im_start|>tool\n4<|im_end|>\n<|im_start|>assistant\n"


def test_action_without_end_of_turn_gets_the_closing_appended(tokenizer):
    """A generation cut by max_tokens has no <|im_end|>: the env closes the turn itself."""
    template = ChatTemplate(tokenizer)
    ctx = ChatContext.start(template, [{"role": "user", "content": "hi"}])
    action = template.encode("cut mid-sen")
    ctx.append_action(action, {"role": "assistant", "content": "cut mid-sen"})
    added = ctx.append_messages([{"role": "user", "content": "go on"}])
    assert tokenizer.decode(added) == "<|im_end|>\n<|im_start|>user\ngo on<|im_end|>\n<|im_start|>assistant\n"


def test_template_that_rejects_tool_role_falls_back_to_user_tool_response(tokenizer):
    template = ChatTemplate(tokenizer, chat_template=STRICT_ROLES_TEMPLATE)
    assert template.tool_role == "user"
    ctx = ChatContext.start(template, [{"role": "user", "content": "q"}])
    ctx.append_action(template.encode("a") + template.end_of_turn_ids, {"role": "assistant", "content": "a"})
    added = ctx.append_messages([{"role": "tool", "content": "42"}])
    assert tokenizer.decode(added) == "\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    assert check_no_drift(tokenizer, chat_template=STRICT_ROLES_TEMPLATE).matches_template


def test_rewrite_starts_a_new_segment(tokenizer):
    template = ChatTemplate(tokenizer)
    ctx = ChatContext.start(template, [{"role": "user", "content": "q"}])
    assert ctx.segment == 0
    ctx.append_action(template.encode("a") + [2], {"role": "assistant", "content": "a"})
    ctx.rewrite([{"role": "user", "content": "summary"}])
    assert ctx.segment == 1
    assert ctx.ids == template.encode(template.render([{"role": "user", "content": "summary"}]))


def test_misuse_of_context_is_an_error(tokenizer):
    template = ChatTemplate(tokenizer)
    ctx = ChatContext.start(template, [{"role": "user", "content": "q"}])
    with pytest.raises(RuntimeError, match="append_messages must follow append_action"):
        ctx.append_messages([{"role": "tool", "content": "x"}])
    ctx.append_action([1], {"role": "assistant", "content": ""})
    with pytest.raises(RuntimeError, match="append_action called twice"):
        ctx.append_action([1], {"role": "assistant", "content": ""})


def test_default_check_plays_every_conversation_and_reports_each(tokenizer):
    from agent_gym.chat.conformance import CONVERSATIONS, DriftSuite

    suite = check_no_drift(tokenizer)
    assert isinstance(suite, DriftSuite) and list(suite.reports) == list(CONVERSATIONS)
    assert set(CONVERSATIONS) == {"one call", "several calls in one turn", "several tool rounds", "malformed call", "long final answer"}
    lines = str(suite).splitlines()
    assert len(lines) == 1 + len(CONVERSATIONS)
    assert all(line.startswith("  ok: [") for line in lines[1:])
    # one conversation given: one report
    single = check_no_drift(tokenizer, CONVERSATIONS["several tool rounds"])
    assert single.ok and single.suffix_ok and single.matches_template and single.name == "conversation"


def test_a_template_that_raises_mid_conversation_is_reported_not_raised(tokenizer):
    # ChatML that refuses one particular tool result (551, in "several calls in one turn").
    template = (
        "{%- for m in messages -%}"
        "{%- if m['content'] == '551' -%}{{ raise_exception('551 is refused') }}{%- endif -%}"
        "{{ '<|im_start|>' ~ m['role'] ~ '\n' ~ m['content'] ~ '<|im_end|>\n' }}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}"
    )
    suite = check_no_drift(tokenizer, chat_template=template)
    assert not suite.ok
    assert [r.name for r in suite.failures] == ["several calls in one turn"]
    failed = suite["several calls in one turn"]
    assert failed.error is not None and "551 is refused" in failed.error
    assert str(failed).startswith("FAIL [several calls in one turn]: the conversation could not be played")
    assert str(suite).startswith("FAIL: 1 of 5 conversations")
    assert suite["one call"].ok


def test_command_line_check(tokenizer, tmp_path, capsys):
    from agent_gym.chat.conformance import main

    assert main(["smollm2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("template: tool results as 'tool' turns; history-dependent: False; end of turn: '<|im_end|>'")
    assert "ok: 5 conversations" in out
    dropping = tmp_path / "t.jinja"
    dropping.write_text(
        "{%- for m in messages -%}{{ '<|im_start|>' ~ m['role'] ~ '\n' ~ (m['content'] if m['role'] != 'tool' else '') ~ '<|im_end|>\n' }}"
        "{%- endfor -%}{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}"
    )
    assert main(["smollm2", "--chat-template", str(dropping)]) == 0  # tool results fall back to user turns
    assert "tool results as 'user' turns" in capsys.readouterr().out
