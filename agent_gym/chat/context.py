"""The chat context an agent env keeps: messages plus the exact token ids the policy continues from.

The no-drift invariant
----------------------
When the env *appends* to the context, the next prompt ids are exactly::

    previous prompt ids + action ids + ids of the appended turn(s)

The action's ids are stored as generated: they are decoded only to parse tool calls and to record
the message text, and never re-encoded. The appended ids come from :meth:`ChatTemplate.turn_suffix`,
which renders only the new turns. So a trainer can take any prefix of the context, and the tokens
it trains on are the tokens the policy produced and saw.

Templates that rewrite history
------------------------------
Some chat templates render earlier assistant turns differently from how they were generated, e.g.
Qwen3 and DeepSeek-R1 strip ``<think>...</think>`` from assistant turns before the last user
message. Re-rendering such a conversation each turn would silently change tokens the policy has
already produced (and the log-probs computed for them). This context never re-renders: the
reasoning stays in the ids exactly as generated, which is what the policy conditioned on at the
time, so training ids remain drift-free. An env that *wants* the template's view (e.g. to save
context) calls :meth:`ChatContext.rewrite`, which renders afresh and starts a new *segment*; the
step that crosses a segment boundary says so (``new_segment``), and concat-mode trainers must not
join samples across it.

Messages
--------
``messages`` holds the conversation as the template takes it (:meth:`ChatTemplate.template_messages`):
for a template with a ``tool`` role that is the OpenAI format unchanged; for one without (Gemma),
tool results are user turns in ``<tool_response>`` tags, merged into one turn per reply where the
template requires strict alternation. So ``tokenizer.apply_chat_template(ctx.messages)`` renders.

Steps are transactional: :meth:`ChatContext.snapshot` / :meth:`ChatContext.restore` put the context
back exactly as it was (in O(1)), so an env whose reply cannot be rendered applies nothing of the step.
"""

from __future__ import annotations

import copy
from typing import Any, Sequence

import numpy as np

from agent_gym.chat.template import ChatTemplate

__all__ = ["ChatContext"]


class ChatContext:
    """Messages, tool schemas and prompt token ids of one episode.

    Create one with :meth:`start`; then alternate :meth:`append_action` (the policy's ids) and
    :meth:`append_messages` (what the env says back), or :meth:`rewrite` the whole context.
    """

    def __init__(self, template: ChatTemplate):
        self.template = template
        self.messages: list[dict[str, Any]] = []
        self.tools: list[dict[str, Any]] = []
        self.ids: list[int] = []
        #: Index of the current segment; increases each time the context is rendered afresh.
        self.segment = -1
        #: Position in ``ids`` where the last action starts (``None`` before any action).
        self._awaiting_env = False

    @classmethod
    def start(
        cls, template: ChatTemplate, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] = ()
    ) -> "ChatContext":
        """A context rendered from ``messages`` with the generation prompt appended."""
        ctx = cls(template)
        ctx.rewrite(messages, tools)
        return ctx

    def rewrite(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None) -> None:
        """Replace the whole context, render it afresh and start a new segment."""
        new_messages = self.template.template_messages(copy.deepcopy(list(messages)))
        new_tools = copy.deepcopy(list(tools)) if tools is not None else self.tools
        # Render first: if the template raises, the context is unchanged.
        ids = self.template.encode_prompt(self.template.render(new_messages, new_tools, add_generation_prompt=True))
        self.messages, self.tools, self.ids = new_messages, new_tools, ids
        self.segment += 1
        self._awaiting_env = False

    def append_action(self, action_ids: Sequence[int], message: dict[str, Any]) -> None:
        """Append the policy's generated ids verbatim, and the assistant message they stand for."""
        if self._awaiting_env:
            raise RuntimeError("append_action called twice without append_messages in between")
        self.ids.extend(int(t) for t in action_ids)
        self.messages.append(message)
        self._last_action = [int(t) for t in action_ids]
        self._awaiting_env = True

    def pending_suffix(self, messages: Sequence[dict[str, Any]]) -> list[int]:
        """The ids :meth:`append_messages` would append for ``messages`` (to check limits first)."""
        if not self._awaiting_env:
            raise RuntimeError("append_messages must follow append_action")
        return self.template.turn_suffix(messages, self._last_action, history=self.messages, tools=self.tools)

    def append_messages(self, messages: Sequence[dict[str, Any]], suffix_ids: Sequence[int] | None = None) -> list[int]:
        """Append the env's reply turns after the last action; returns the ids that were appended.

        ``suffix_ids`` may pass the result of :meth:`pending_suffix` for the same messages, to avoid
        computing it twice.
        """
        if not self._awaiting_env:
            raise RuntimeError("append_messages must follow append_action")
        added = list(suffix_ids) if suffix_ids is not None else self.pending_suffix(messages)
        self.ids.extend(added)
        self.messages.extend(self.template.template_messages(copy.deepcopy(list(messages))))
        self._awaiting_env = False
        return added

    def record(self, messages: Sequence[dict[str, Any]]) -> None:
        """Keep messages for the record only (the reply of a final step: no ids follow it)."""
        self.messages.extend(self.template.template_messages(copy.deepcopy(list(messages))))

    def snapshot(self) -> tuple:
        """A token for :meth:`restore` (O(1): the lists are only ever extended or replaced)."""
        return (self.ids, len(self.ids), self.messages, len(self.messages), self.tools, self.segment,
                self._awaiting_env, getattr(self, "_last_action", None))

    def restore(self, snapshot: tuple) -> None:
        """Put the context back exactly as it was when ``snapshot`` was taken."""
        ids, n_ids, messages, n_messages, tools, segment, awaiting, last_action = snapshot
        del ids[n_ids:]
        del messages[n_messages:]
        self.ids, self.messages, self.tools, self.segment, self._awaiting_env = ids, messages, tools, segment, awaiting
        if last_action is None:
            self.__dict__.pop("_last_action", None)
        else:
            self._last_action = last_action

    @property
    def prompt_ids(self) -> np.ndarray:
        """The ids the policy continues from, as an int64 array (a copy)."""
        return np.asarray(self.ids, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.ids)

    def observation(self) -> dict[str, Any]:
        """The env observation: messages, tool schemas and prompt ids.

        The lists and message dicts are fresh shallow copies (a deep copy would make every step cost
        O(context)); nested values such as ``tool_calls`` are shared and must be treated as read-only.
        """
        return {
            "messages": [dict(m) for m in self.messages],
            "tools": list(self.tools),
            "prompt_ids": self.prompt_ids,
        }
