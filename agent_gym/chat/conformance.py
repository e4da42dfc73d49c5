"""The no-drift conformance check, runnable on any tokenizer / chat-template pair.

:func:`check_no_drift` plays a conversation through :class:`ChatContext` the way an env does (each
assistant turn is given as generated ids, each other turn is appended by the env) and checks:

1. **the invariant** (must hold for every pair): after every step the context ids are exactly
   ``previous ids + action ids + appended ids``, i.e. no id the policy saw or produced ever changes;
2. **agreement with the template** (informative): whether the final incremental ids equal a fresh
   render of the whole conversation. They differ when the template rewrites history (e.g. strips
   earlier ``<think>`` blocks) or when tokenization merges across a turn boundary; the report names
   the first diverging token, which is exactly where a trainer that re-renders each turn would drift.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from agent_gym.chat.context import ChatContext
from agent_gym.chat.template import ChatTemplate

__all__ = ["DriftReport", "check_no_drift", "DEFAULT_CONVERSATION"]

#: A tool-using conversation with reasoning, used when no conversation is given.
DEFAULT_CONVERSATION: tuple[dict[str, Any], ...] = (
    {"role": "system", "content": "You are a careful assistant. Use the calculator for arithmetic."},
    {"role": "user", "content": "A shop sells 12 boxes of 48 pens. How many pens is that?"},
    {"role": "assistant", "content": '<think>12 boxes times 48.</think>\n<tool_call>\n{"name": "calculate", "arguments": {"expression": "12*48"}}\n</tool_call>'},
    {"role": "tool", "content": "576"},
    {"role": "assistant", "content": "<think>Check: 48*12 = 576.</think>\nThat is 576 pens.\n#### 576"},
    {"role": "user", "content": "And half of that?"},
    {"role": "assistant", "content": "Half of 576 is 288.\n#### 288"},
)


@dataclass(frozen=True)
class DriftReport:
    """Result of :func:`check_no_drift`.

    Attributes:
        invariant_ok: every step kept ``prev + action + appended`` (the guarantee trainers rely on).
        invariant_error: what broke the invariant (``None`` when it held).
        matches_template: the final ids equal a fresh render of the whole conversation.
        first_divergence: index of the first id where they differ (``None`` when equal).
        incremental_token / template_token: the differing tokens, as text.
        rewrites_history: the template renders earlier turns differently from how they were generated.
        num_tokens: length of the final incremental ids.
    """

    invariant_ok: bool
    invariant_error: str | None
    matches_template: bool
    first_divergence: int | None
    incremental_token: str | None
    template_token: str | None
    rewrites_history: bool
    num_tokens: int

    @property
    def ok(self) -> bool:
        """The invariant held (template agreement is informative, not required)."""
        return self.invariant_ok

    def __str__(self) -> str:
        if not self.invariant_ok:
            return f"DRIFT: {self.invariant_error}"
        if self.matches_template:
            return f"ok: {self.num_tokens} ids, identical to a fresh render of the template"
        why = "the template rewrites earlier turns" if self.rewrites_history else "tokenization differs at a turn boundary"
        return (
            f"ok: the invariant holds ({self.num_tokens} ids); a fresh render differs from token "
            f"{self.first_divergence} on ({self.incremental_token!r} here vs {self.template_token!r} re-rendered): "
            f"{why}, so re-rendering each turn would drift there"
        )


def check_no_drift(
    tokenizer: Any,
    conversation: Sequence[dict[str, Any]] = DEFAULT_CONVERSATION,
    *,
    chat_template: str | None = None,
    tools: Sequence[dict[str, Any]] = (),
) -> DriftReport:
    """Play ``conversation`` through the incremental context and report drift.

    Args:
        tokenizer: any Hugging Face tokenizer (or a path / model name).
        conversation: OpenAI-format messages; every assistant message is treated as the policy's
            action (its content encoded plus the template's end-of-turn ids), every run of other
            messages after it as the env's reply. It must start with non-assistant messages.
        chat_template: a template replacing the tokenizer's own.
        tools: tool schemas passed to the template.
    """
    from agent_gym.models import load_tokenizer

    template = ChatTemplate(load_tokenizer(tokenizer), chat_template=chat_template)
    messages = list(conversation)
    first_assistant = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
    if first_assistant == 0:
        raise ValueError("the conversation must open with at least one non-assistant message")
    ctx = ChatContext.start(template, messages[:first_assistant], tools)
    error: str | None = None
    i, turn = first_assistant, 0
    while i < len(messages) and error is None:
        turn += 1
        action = template.encode(messages[i]["content"]) + template.end_of_turn_ids
        before = list(ctx.ids)
        ctx.append_action(action, messages[i])
        j = i + 1
        while j < len(messages) and messages[j]["role"] != "assistant":
            j += 1
        if j > i + 1 or j < len(messages):
            added = ctx.append_messages(messages[i + 1 : j])
        else:
            added = []
        expected = before + action + added
        if ctx.ids != expected:
            at = _first_difference(ctx.ids, expected)
            error = f"after assistant turn {turn}: id {at} differs from prev + action + appended"
        i = j
    final_ids = list(ctx.ids)
    generation_prompt = not (messages and messages[-1]["role"] == "assistant")
    rendered = template.render(messages, tools, add_generation_prompt=generation_prompt)
    fresh = template.encode(rendered)
    if not generation_prompt:
        # The last assistant turn ends with the policy's end-of-turn ids; the template may close the
        # turn with more (a newline): compare only up to what the incremental context holds.
        fresh = fresh[: len(final_ids)]
    at = _first_difference(final_ids, fresh)
    incremental_text = template.decode(final_ids)
    return DriftReport(
        invariant_ok=error is None,
        invariant_error=error,
        matches_template=at is None,
        first_divergence=at,
        incremental_token=None if at is None or at >= len(final_ids) else template.decode([final_ids[at]]),
        template_token=None if at is None or at >= len(fresh) else template.decode([fresh[at]]),
        rewrites_history=not (rendered.startswith(incremental_text) or incremental_text.startswith(rendered)),
        num_tokens=len(final_ids),
    )


def _first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    for k, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return k
    return None if len(a) == len(b) else min(len(a), len(b))
