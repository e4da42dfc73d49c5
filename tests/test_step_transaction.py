"""A step is all or nothing, and a template that cannot express the env's replies is refused when the
env is made, never mid-episode."""

from __future__ import annotations

import asyncio

import gymnasium as gym
import pytest

import agent_gym  # noqa: F401  (registers the envs)
from agent_gym.chat.context import ChatContext
from agent_gym.chat.template import ChatTemplate, ChatTemplateError
from agent_gym.tools import HermesParser, ToolCall

# ChatML that numbers tool results (what it writes after an assistant turn depends on earlier turns,
# so suffixes are rendered after the real history) and refuses any message containing BOOM.
NUMBERING_TEMPLATE = (
    "{%- set ns = namespace(n=0) -%}"
    "{%- for m in messages -%}"
    "{%- if 'BOOM' in m['content'] -%}{{ raise_exception('this template refuses BOOM') }}{%- endif -%}"
    "{%- if m['role'] == 'tool' -%}{%- set ns.n = ns.n + 1 -%}"
    "{{ '<|im_start|>tool ' ~ ns.n ~ '\n' ~ m['content'] ~ '<|im_end|>\n' }}"
    "{%- else -%}{{ '<|im_start|>' ~ m['role'] ~ '\n' ~ m['content'] ~ '<|im_end|>\n' }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}"
)

# A template under which nothing may follow an assistant turn.
NO_REPLY_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if not loop.first and loop.previtem['role'] == 'assistant' -%}"
    "{{ raise_exception('nothing may follow an assistant turn') }}{%- endif -%}"
    "{{ '<|im_start|>' ~ m['role'] ~ '\n' ~ m['content'] ~ '<|im_end|>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}"
)


def call(name: str, **arguments) -> str:
    return HermesParser().format_calls([ToolCall(id="c", name=name, arguments=arguments, raw="")])


def state(env):
    ctx = env.unwrapped.context
    u = env.unwrapped
    return (list(ctx.ids), [dict(m) for m in ctx.messages], ctx.segment, ctx._awaiting_env, u._turn,
            dict(u._counts), dict(u._error_kinds), u._done)


@pytest.mark.parametrize("mode", ["step", "astep"])
def test_a_reply_the_template_raises_on_leaves_the_env_as_before_the_step(tokenizer, mode):
    env = gym.make("AgentR1/GSM8KTool-v0", tokenizer=tokenizer, split="test", chat_template=NUMBERING_TEMPLATE)
    template = env.unwrapped.template
    assert template.history_dependent and template.tool_role == "tool"

    def do(action):
        return env.step(action) if mode == "step" else asyncio.run(env.unwrapped.astep(action))

    obs, _ = env.reset(seed=0)
    obs, _, terminated, truncated, info = do(template.encode(call("calculate", expression="2*3")) + [2])
    assert not (terminated or truncated) and info["tool_calls"] == 1
    assert tokenizer.decode(obs["prompt_ids"][-12:]).endswith("<|im_start|>tool 1\n6<|im_end|>\n<|im_start|>assistant\n")
    before, before_obs = state(env), obs
    # An unknown tool named BOOM: its error message carries the name, and the template raises on it.
    obs, reward, terminated, truncated, info = do(template.encode(call("BOOM")) + [2])
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert info["truncated_reason"] == "render_error"
    assert "this template refuses BOOM" in info["render_error"]
    after = state(env)
    assert after[:7] == before[:7]  # ids, messages, segment, turn, counters: nothing of the step applied
    assert after[7] is True  # and the episode is over
    assert obs["prompt_ids"].tolist() == before_obs["prompt_ids"].tolist()
    assert obs["messages"] == before_obs["messages"]
    assert (info["turn"], info["tool_calls"], info["tool_errors"], info["context_tokens"]) == (1, 1, 0, len(before[0]))
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step([2])
    # the env itself is fine: the next episode runs
    obs, _ = env.reset(seed=1)
    obs, _, terminated, truncated, info = do(template.encode(call("calculate", expression="1+1")) + [2])
    assert not truncated and info["tool_calls"] == 1


def test_snapshot_restore_undoes_an_action_and_a_rewrite(tokenizer):
    template = ChatTemplate(tokenizer)
    ctx = ChatContext.start(template, [{"role": "user", "content": "q"}])
    ctx.append_action(template.encode("a") + [2], {"role": "assistant", "content": "a"})
    ctx.append_messages([{"role": "tool", "content": "1"}])
    ids, messages, segment = list(ctx.ids), [dict(m) for m in ctx.messages], ctx.segment
    snap = ctx.snapshot()
    ctx.append_action(template.encode("b") + [2], {"role": "assistant", "content": "b"})
    ctx.rewrite([{"role": "user", "content": "summary"}])
    assert ctx.segment == segment + 1
    ctx.restore(snap)
    assert (ctx.ids, ctx.messages, ctx.segment) == (ids, messages, segment)
    ctx.append_action(template.encode("c") + [2], {"role": "assistant", "content": "c"})  # usable as before
    added = ctx.append_messages([{"role": "tool", "content": "2"}])
    assert ctx.ids == ids + template.encode("c") + [2] + added


def test_a_failed_rewrite_changes_nothing(tokenizer):
    template = ChatTemplate(tokenizer, chat_template=NUMBERING_TEMPLATE)
    ctx = ChatContext.start(template, [{"role": "user", "content": "q"}])
    ids, messages = list(ctx.ids), list(ctx.messages)
    with pytest.raises(Exception, match="BOOM"):
        ctx.rewrite([{"role": "user", "content": "BOOM"}])
    assert (ctx.ids, ctx.messages, ctx.segment) == (ids, messages, 0)


def test_a_template_that_cannot_reply_is_refused_when_a_multi_turn_env_is_made(tokenizer):
    template = ChatTemplate(tokenizer, chat_template=NO_REPLY_TEMPLATE)
    assert template.reply_error is not None
    assert "cannot render a tool reply after an assistant turn" in template.reply_error
    assert "nothing may follow an assistant turn" in template.reply_error
    with pytest.raises(ChatTemplateError, match="cannot render a tool reply after an assistant turn"):
        gym.make("AgentR1/GSM8KTool-v0", tokenizer=tokenizer, split="test", chat_template=NO_REPLY_TEMPLATE)
    # A single-turn env never replies: the same template is fine there.
    env = gym.make("AgentR1/GSM8K-v0", tokenizer=tokenizer, split="test", chat_template=NO_REPLY_TEMPLATE)
    env.reset(seed=0)
    _, _, terminated, truncated, _ = env.step(template.encode("#### 3") + [2])
    assert terminated and not truncated


def test_a_template_that_drops_assistant_content_is_refused(tokenizer):
    dropping = (
        "{%- for m in messages -%}{%- if m['role'] != 'assistant' -%}"
        "{{ '<|im_start|>' ~ m['role'] ~ '\n' ~ m['content'] ~ '<|im_end|>\n' }}{%- endif -%}{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}"
    )
    with pytest.raises(ChatTemplateError, match="drops assistant content"):
        gym.make("AgentR1/GSM8K-v0", tokenizer=tokenizer, split="test", chat_template=dropping)


def test_consecutive_turns_are_merged_only_where_the_template_refuses_them(tokenizer):
    strict = (
        "{%- for m in messages -%}"
        "{%- if not loop.first and loop.previtem['role'] == m['role'] -%}"
        "{{ raise_exception('roles must alternate') }}{%- endif -%}"
        "{%- if m['role'] == 'tool' -%}{{ raise_exception('no tool role') }}{%- endif -%}"
        "{{ '<|im_start|>' ~ m['role'] ~ '\n' ~ m['content'] ~ '<|im_end|>\n' }}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}"
    )
    template = ChatTemplate(tokenizer, chat_template=strict)
    assert (template.tool_role, template.merges_turns, template.reply_error) == ("user", True, None)
    reply = [{"role": "tool", "content": "1"}, {"role": "tool", "content": "2"}, {"role": "user", "content": "go on"}]
    merged = template.template_messages(reply)
    assert merged == [{"role": "user", "content": "<tool_response>\n1\n</tool_response>\n<tool_response>\n2\n</tool_response>\ngo on"}]
    assert template.template_messages(merged) == merged  # idempotent
    # ChatML itself takes consecutive tool turns: nothing merged there
    plain = ChatTemplate(tokenizer)
    assert not plain.merges_turns and plain.template_messages(reply) == reply
