"""The no-drift conformance check, runnable on any tokenizer / chat-template pair.

:func:`check_no_drift` plays conversations through :class:`ChatContext` the way an env does (each
assistant turn is given as generated ids, each run of other turns is appended by the env) and checks,
per conversation:

1. **the invariant** (must hold for every pair): after every step the context ids are exactly
   ``previous ids + action ids + appended ids``, i.e. no id the policy saw or produced ever changes;
2. **the appended turns are the template's** (must hold): the ids appended after each assistant turn
   equal what the tokenizer's own template writes at that point after the real conversation so far
   (rendered whole with ``tokenizer.apply_chat_template``, independently of the env's fast paths);
3. **agreement with a fresh render** (informative): whether the final incremental ids equal a fresh
   render of the whole conversation. They differ when the template rewrites history (e.g. strips
   earlier ``<think>`` blocks) or when tokenization merges across a turn boundary; the report names
   the first diverging token, which is exactly where a trainer that re-renders each turn would drift.

By default it plays :data:`CONVERSATIONS`: one tool call, several calls in one turn, several tool
rounds, a malformed call, a long final answer. Each report shows, where something differs, the first
diverging token and both renders around it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

from agent_gym.chat.context import ChatContext
from agent_gym.chat.template import ChatTemplate

__all__ = ["DriftReport", "DriftSuite", "check_no_drift", "DEFAULT_CONVERSATION", "CONVERSATIONS"]

_SYSTEM = {"role": "system", "content": "You are a careful assistant. Use the calculator for arithmetic."}


def _call(expression: str) -> str:
    return f'<tool_call>\n{{"name": "calculate", "arguments": {{"expression": "{expression}"}}}}\n</tool_call>'


#: A tool-using conversation with reasoning and a follow-up question (one call).
DEFAULT_CONVERSATION: tuple[dict[str, Any], ...] = (
    _SYSTEM,
    {"role": "user", "content": "A shop sells 12 boxes of 48 pens. How many pens is that?"},
    {"role": "assistant", "content": '<think>12 boxes times 48.</think>\n<tool_call>\n{"name": "calculate", "arguments": {"expression": "12*48"}}\n</tool_call>'},
    {"role": "tool", "content": "576"},
    {"role": "assistant", "content": "<think>Check: 48*12 = 576.</think>\nThat is 576 pens.\n#### 576"},
    {"role": "user", "content": "And half of that?"},
    {"role": "assistant", "content": "Half of 576 is 288.\n#### 288"},
)

_LONG_ANSWER = "\n\n".join(
    [
        "<think>The total is the sum of the three weekly amounts; the tool gave 1,234.5 for it.</think>",
        "Here is the full working, step by step:",
        *[f"{i}. Week {i}: {100 + 37 * i} units at 1.5 each = {(100 + 37 * i) * 1.5} (checked twice)." for i in range(1, 16)],
        "```python\ntotal = sum((100 + 37 * i) * 1.5 for i in range(1, 16))\nprint(f\"{total:,.1f}\")\n```",
        "Unicode and spacing survive as generated: é ü 数学 🙂, tabs\there, trailing spaces   ",
        "#### 1234.5",
    ]
)

#: The conversations :func:`check_no_drift` plays by default, by name.
CONVERSATIONS: dict[str, tuple[dict[str, Any], ...]] = {
    "one call": DEFAULT_CONVERSATION,
    "several calls in one turn": (
        _SYSTEM,
        {"role": "user", "content": "What are 17*23 and 19*29?"},
        {"role": "assistant", "content": "<think>Two products.</think>\n" + _call("17*23") + "\n" + _call("19*29")},
        {"role": "tool", "content": "391"},
        {"role": "tool", "content": "551"},
        {"role": "assistant", "content": "17*23 = 391 and 19*29 = 551.\n#### 391, 551"},
    ),
    "several tool rounds": (
        _SYSTEM,
        {"role": "user", "content": "Compute ((3+4)*5)-6 one operation at a time."},
        {"role": "assistant", "content": "<think>First the sum.</think>\n" + _call("3+4")},
        {"role": "tool", "content": "7"},
        {"role": "assistant", "content": "<think>Now times 5.</think>\n" + _call("7*5")},
        {"role": "tool", "content": "35"},
        {"role": "assistant", "content": _call("35-6") + "\n" + _call("35-6+0")},
        {"role": "tool", "content": "29"},
        {"role": "tool", "content": "29"},
        {"role": "assistant", "content": "The result is 29.\n#### 29"},
    ),
    "malformed call": (
        _SYSTEM,
        {"role": "user", "content": "What is 81 / 9?"},
        {"role": "assistant", "content": _call("81/9") + '\n<tool_call>\n{"name": "calculate", "arguments": {expression: 81/9}\n</tool_call>'},
        {"role": "tool", "content": "9"},
        {"role": "tool", "content": "Error: malformed tool call: invalid JSON in <tool_call> block"},
        {"role": "assistant", "content": '<tool_call>{"name": "calc", "arguments": {}}</tool_call>'},
        {"role": "tool", "content": "Error: unknown tool 'calc'; available tools: calculate"},
        {"role": "assistant", "content": "81 / 9 = 9.\n#### 9"},
    ),
    "long final answer": (
        _SYSTEM,
        {"role": "user", "content": "Add up the weekly totals and show your working."},
        {"role": "assistant", "content": _call("sum(range(3))")},
        {"role": "tool", "content": "1234.5"},
        {"role": "assistant", "content": _LONG_ANSWER},
    ),
}

_MARK = "\u2063AGENTGYMCONFORMANCE\u2063"


@dataclass(frozen=True)
class DriftReport:
    """Result of playing one conversation (see :func:`check_no_drift`).

    Attributes:
        invariant_ok: every step kept ``prev + action + appended`` (the guarantee trainers rely on).
        invariant_error: what broke the invariant (``None`` when it held).
        matches_template: the final ids equal a fresh render of the whole conversation.
        first_divergence: index of the first id where they differ (``None`` when equal).
        incremental_token / template_token: the differing tokens, as text.
        rewrites_history: the template renders earlier turns differently from how they were generated.
        num_tokens: length of the final incremental ids.
        name: the conversation's name.
        suffix_ok: every appended run of ids equals what the template writes there after the real
            conversation so far.
        suffix_error: the first step where it did not: the step, the token index within the appended
            ids and both tokens (``None`` when all agreed).
        incremental_render / template_render: where something differs (the appended ids, else the
            fresh render), the text of both sides from a few tokens before the first difference on.
        error: an exception that stopped the conversation (the template raised), else ``None``.
    """

    invariant_ok: bool
    invariant_error: str | None
    matches_template: bool
    first_divergence: int | None
    incremental_token: str | None
    template_token: str | None
    rewrites_history: bool
    num_tokens: int
    name: str = "conversation"
    suffix_ok: bool = True
    suffix_error: str | None = None
    incremental_render: str | None = None
    template_render: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        """The invariant held and every appended turn is the template's (agreement with a fresh
        render is informative, not required)."""
        return self.invariant_ok and self.suffix_ok and self.error is None

    def __str__(self) -> str:
        if self.error is not None:
            return f"FAIL [{self.name}]: the conversation could not be played: {self.error}"
        if not self.invariant_ok:
            return f"DRIFT [{self.name}]: {self.invariant_error}"
        if not self.suffix_ok:
            return (
                f"FAIL [{self.name}]: {self.suffix_error}\n"
                f"    appended: {self.incremental_render!r}\n    template: {self.template_render!r}"
            )
        if self.matches_template:
            return f"ok: [{self.name}] {self.num_tokens} ids, identical to a fresh render of the template"
        why = "the template rewrites earlier turns" if self.rewrites_history else "tokenization differs at a turn boundary"
        return (
            f"ok: [{self.name}] the invariant holds and every appended turn is the template's ({self.num_tokens} ids); "
            f"a fresh render differs from token {self.first_divergence} on ({self.incremental_token!r} here vs "
            f"{self.template_token!r} re-rendered): {why}, so re-rendering each turn would drift there\n"
            f"    incremental: {self.incremental_render!r}\n    re-render:   {self.template_render!r}"
        )


@dataclass(frozen=True)
class DriftSuite:
    """The reports of several conversations (what :func:`check_no_drift` returns by default).

    ``ok`` holds when every conversation passed. The single-report attributes (``invariant_ok``,
    ``matches_template``, ``first_divergence``, ...) are those of the first conversation that
    failed, else of the first that differs from a fresh render, else of the first one.
    """

    reports: Mapping[str, DriftReport] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.reports.values())

    @property
    def invariant_ok(self) -> bool:
        return all(r.invariant_ok for r in self.reports.values())

    @property
    def matches_template(self) -> bool:
        return all(r.matches_template for r in self.reports.values())

    @property
    def failures(self) -> list[DriftReport]:
        return [r for r in self.reports.values() if not r.ok]

    def _representative(self) -> DriftReport:
        reports = list(self.reports.values())
        for r in reports:
            if not r.ok:
                return r
        for r in reports:
            if not r.matches_template:
                return r
        return reports[0]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "reports":
            raise AttributeError(name)
        return getattr(self._representative(), name)

    def __iter__(self) -> Iterator[DriftReport]:
        return iter(self.reports.values())

    def __len__(self) -> int:
        return len(self.reports)

    def __getitem__(self, name: str) -> DriftReport:
        return self.reports[name]

    def __str__(self) -> str:
        failed = self.failures
        head = (
            f"ok: {len(self.reports)} conversations, no drift, every appended turn is the template's"
            if not failed
            else f"FAIL: {len(failed)} of {len(self.reports)} conversations"
        )
        return "\n".join([head, *(f"  {line}" for r in self.reports.values() for line in str(r).splitlines())])


def check_no_drift(
    tokenizer: Any,
    conversation: Sequence[dict[str, Any]] | None = None,
    *,
    chat_template: str | None = None,
    tools: Sequence[dict[str, Any]] = (),
    conversations: Mapping[str, Sequence[dict[str, Any]]] | None = None,
) -> DriftReport | DriftSuite:
    """Play conversations through the incremental context and report drift.

    Args:
        tokenizer: any Hugging Face tokenizer (or a path / model name).
        conversation: one conversation to play (a :class:`DriftReport` is returned). OpenAI-format
            messages; every assistant message is treated as the policy's action (its content encoded
            plus the template's end-of-turn ids), every run of other messages after it as the env's
            reply. It must start with non-assistant messages.
        chat_template: a template replacing the tokenizer's own.
        tools: tool schemas passed to the template.
        conversations: several named conversations (default, when ``conversation`` is not given:
            :data:`CONVERSATIONS`); a :class:`DriftSuite` is returned.
    """
    from agent_gym.models import load_tokenizer

    template = ChatTemplate(load_tokenizer(tokenizer), chat_template=chat_template)
    if conversation is not None:
        return _play(template, "conversation", list(conversation), tools)
    chosen = CONVERSATIONS if conversations is None else conversations
    return DriftSuite({name: _play(template, name, list(messages), tools) for name, messages in chosen.items()})


def _play(template: ChatTemplate, name: str, messages: list[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> DriftReport:
    first_assistant = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
    if first_assistant == 0:
        raise ValueError("the conversation must open with at least one non-assistant message")
    try:
        return _play_checked(template, name, messages, first_assistant, tools)
    except Exception as exc:  # noqa: BLE001 - reported, not raised: the report is the check's answer
        return DriftReport(
            invariant_ok=True, invariant_error=None, matches_template=False, first_divergence=None,
            incremental_token=None, template_token=None, rewrites_history=False, num_tokens=0,
            name=name, error=f"{type(exc).__name__}: {exc}",
        )


def _play_checked(
    template: ChatTemplate, name: str, messages: list[dict[str, Any]], first_assistant: int, tools: Sequence[dict[str, Any]]
) -> DriftReport:
    ctx = ChatContext.start(template, messages[:first_assistant], tools)
    error: str | None = None
    suffix_error: str | None = None
    renders: tuple[str, str] | None = None
    i, turn = first_assistant, 0
    while i < len(messages) and error is None:
        turn += 1
        action = template.encode(messages[i]["content"]) + template.end_of_turn_ids
        before = list(ctx.ids)
        ctx.append_action(action, messages[i])
        j = i + 1
        while j < len(messages) and messages[j]["role"] != "assistant":
            j += 1
        reply = messages[i + 1 : j]
        if reply or j < len(messages):
            history = list(ctx.messages)
            added = ctx.append_messages(reply)
            if suffix_error is None:
                expected = _template_suffix(template, history, reply, action, tools)
                at = _first_difference(added, expected)
                if at is not None:
                    suffix_error = (
                        f"after assistant turn {turn}: appended id {at} is "
                        f"{_token(template, added, at)!r}, the template writes {_token(template, expected, at)!r}"
                    )
                    renders = (_window(template, added, at), _window(template, expected, at))
        else:
            added = []
        if ctx.ids != before + action + added:
            at = _first_difference(ctx.ids, before + action + added)
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
    if renders is None and at is not None:
        renders = (_window(template, final_ids, at), _window(template, fresh, at))
    return DriftReport(
        invariant_ok=error is None,
        invariant_error=error,
        matches_template=at is None,
        first_divergence=at,
        incremental_token=_token(template, final_ids, at),
        template_token=_token(template, fresh, at),
        rewrites_history=not (rendered.startswith(incremental_text) or incremental_text.startswith(rendered)),
        num_tokens=len(final_ids),
        name=name,
        suffix_ok=suffix_error is None,
        suffix_error=suffix_error,
        incremental_render=None if renders is None else renders[0],
        template_render=None if renders is None else renders[1],
    )


def _template_suffix(
    template: ChatTemplate,
    history: list[dict[str, Any]],
    reply: Sequence[dict[str, Any]],
    action: Sequence[int],
    tools: Sequence[dict[str, Any]],
) -> list[int]:
    """What the tokenizer's template writes after the last assistant turn of ``history`` and ``reply``:
    the whole conversation rendered with ``apply_chat_template`` (a marker after that turn's
    content), minus the closing the policy generated itself."""
    last = {k: v for k, v in history[-1].items() if k != "tool_calls"}
    last["content"] = f"{last.get('content') or ''}{_MARK}"
    convo = template.template_messages([*history[:-1], last, *reply])
    kwargs: dict[str, Any] = {"tools": list(tools)} if tools and template.renders_tools else {}
    text = template.tokenizer.apply_chat_template(
        convo, chat_template=template.chat_template, tokenize=False, add_generation_prompt=True, **kwargs
    )
    text = text[text.index(_MARK) + len(_MARK):]
    eot = template.end_of_turn_ids
    closing = template._end_of_turn_text
    if eot and list(action[-len(eot):]) == eot and closing and text.startswith(closing):
        text = text[len(closing):]
    return template.encode(text)


def _token(template: ChatTemplate, ids: Sequence[int], at: int | None) -> str | None:
    return None if at is None or at >= len(ids) else template.decode([ids[at]])


def _window(template: ChatTemplate, ids: Sequence[int], at: int, before: int = 8, after: int = 24) -> str:
    """Text of ``ids`` from a few tokens before ``at`` on (where two renders part ways)."""
    return template.decode(list(ids[max(0, at - before) : at + after]))


def _first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    for k, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return k
    return None if len(a) == len(b) else min(len(a), len(b))


def _load_for_check(name: str, chat_template: str | None) -> Any:
    """A tokenizer from a matrix family name, a GGUF file (its header is enough), or anything
    :func:`agent_gym.models.load_tokenizer` takes."""
    import os

    from agent_gym.models.gguf import FAMILIES, family_tokenizer, tokenizer_from_gguf
    from agent_gym.models import load_tokenizer

    if name in FAMILIES:
        return family_tokenizer(name)
    if os.path.isfile(name):
        with open(name, "rb") as fh:
            is_gguf = fh.read(4) == b"GGUF"
        if is_gguf:
            return tokenizer_from_gguf(name, chat_template=chat_template)
    return load_tokenizer(name)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m agent_gym.chat.conformance TOKENIZER [--chat-template FILE_OR_NAME]``: print the report
    of :func:`check_no_drift`; exit status 0 when every conversation passed, 1 otherwise."""
    import argparse
    import os

    parser = argparse.ArgumentParser(
        prog="python -m agent_gym.chat.conformance",
        description="Check that an agent env's incremental token ids are drift-free with a tokenizer's chat template.",
    )
    parser.add_argument(
        "tokenizer",
        help="a tokenizer / model folder, a hub name, a GGUF file (or the first part of one), "
        "or a template-matrix family (smollm2, gemma3, deepseek-r1-qwen)",
    )
    parser.add_argument("--chat-template", help="a file with a jinja chat template replacing the tokenizer's own, "
                        "or a built-in template's name (completion)")
    args = parser.parse_args(argv)
    template = None
    if args.chat_template:
        from agent_gym.models import CHAT_TEMPLATES, builtin_chat_template

        if args.chat_template in CHAT_TEMPLATES and not os.path.isfile(args.chat_template):
            template = builtin_chat_template(args.chat_template)
        else:
            with open(args.chat_template, encoding="utf-8") as fh:
                template = fh.read()
    tokenizer = _load_for_check(args.tokenizer, template)
    suite = check_no_drift(tokenizer, chat_template=template)
    probe = ChatTemplate(tokenizer, chat_template=template)
    print(
        f"template: tool results as {probe.tool_role!r} turns{' (merged per reply)' if probe.merges_turns else ''}; "
        f"history-dependent: {probe.history_dependent}; end of turn: {probe.decode(probe.end_of_turn_ids)!r}"
        + (f"; cannot reply: {probe.reply_error}" if probe.reply_error else "")
    )
    print(suite)
    return 0 if suite.ok else 1


if __name__ == "__main__":  # pragma: no cover - exercised through the command line
    raise SystemExit(main())
