"""A tokenizer's chat template, seen from an environment that appends turns to a token sequence.

The env must turn "append these tool/user messages after the assistant's turn" into token ids
*without* re-rendering the conversation (re-rendering costs O(context) per step and, for templates
that rewrite history, changes tokens the policy already produced). :meth:`ChatTemplate.turn_suffix`
finds those ids by rendering a tiny fixed conversation whose assistant turn is a placeholder: the
text after the placeholder is exactly what the template writes between the end of an assistant's
content and the start of the next assistant's content. Its cost is independent of how long the real
conversation is.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

__all__ = ["ChatTemplate", "ChatTemplateError"]

# Never produced by a tokenizer's normaliser and never special: a safe marker to split rendered text.
_PLACEHOLDER = "\u2063AGENTGYMPLACEHOLDER\u2063"
_DUMMY_HISTORY = ({"role": "system", "content": "s"}, {"role": "user", "content": "u"})


class ChatTemplateError(ValueError):
    """The tokenizer's chat template cannot be used the way an agent env needs."""


class ChatTemplate:
    """Renders and tokenizes chat messages with a Hugging Face tokenizer's chat template.

    Args:
        tokenizer: any Hugging Face tokenizer with a chat template.
        chat_template: a jinja chat template that replaces the tokenizer's own (optional).
        tool_role: ``"tool"`` to render tool results with the template's ``tool`` role, ``"user"`` to
            render them as user messages wrapped in ``<tool_response>`` tags, ``None`` (default) to use
            ``tool`` when the template accepts it and fall back to ``user`` when it raises.
    """

    def __init__(self, tokenizer: Any, *, chat_template: str | None = None, tool_role: str | None = None):
        self.tokenizer = tokenizer
        self.chat_template = chat_template or getattr(tokenizer, "chat_template", None)
        if not self.chat_template:
            raise ChatTemplateError(
                f"tokenizer {getattr(tokenizer, 'name_or_path', '?')!r} has no chat template; pass chat_template="
            )
        if tool_role not in (None, "tool", "user"):
            raise ValueError(f"tool_role must be 'tool', 'user' or None, got {tool_role!r}")
        self.vocab_size = len(tokenizer)
        self.tool_role = tool_role or self._detect_tool_role()
        #: True when the template itself renders the ``tools`` argument (e.g. Qwen2.5, Llama 3.1).
        self.renders_tools = "tools" in self.chat_template
        self._suffix_parts: dict[tuple, list[str | int] | bool] = {}
        self.end_of_turn_ids = self._detect_end_of_turn()

    # -- rendering ---------------------------------------------------------------------------------

    def render(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None = None,
        *,
        add_generation_prompt: bool = True,
    ) -> str:
        """Render messages to text, mapping tool messages to the role this template accepts."""
        kwargs: dict[str, Any] = {}
        if tools and self.renders_tools:
            kwargs["tools"] = list(tools)
        return self.tokenizer.apply_chat_template(
            [self._for_template(m) for m in messages],
            chat_template=self.chat_template,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            **kwargs,
        )

    def encode(self, text: str) -> list[int]:
        """Token ids of already-rendered text (special tokens in the text are recognised, none added)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        """Text of generated ids, special tokens kept (used for parsing, never re-encoded)."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def turn_suffix(self, new_messages: Sequence[dict[str, Any]], action_ids: Sequence[int]) -> list[int]:
        """Ids to append after an assistant turn whose generated ids were ``action_ids``.

        The result closes the assistant turn (whatever part of the closing the policy did not generate
        itself, e.g. the newline after ``<|im_end|>``), renders ``new_messages`` and opens the next
        assistant turn (the generation prompt).
        """
        text = self._suffix_text(new_messages)
        ends_turn = bool(self.end_of_turn_ids) and list(action_ids[-len(self.end_of_turn_ids):]) == self.end_of_turn_ids
        closing = self._end_of_turn_text
        if ends_turn and closing and text.startswith(closing):
            text = text[len(closing):]
        return self.encode(text)

    # -- internals ----------------------------------------------------------------------------------

    def _suffix_text(self, new_messages: Sequence[dict[str, Any]]) -> str:
        # Fast path: for each shape of reply (roles and metadata, not contents) render once with
        # content markers, check that the template pastes content verbatim, then fill in contents
        # by string joining. Most templates do; those that transform content get a full render.
        key = _shape_key(new_messages)
        if key is not None:
            parts = self._suffix_parts.get(key)
            if parts is None:
                parts = self._compile_suffix(new_messages)
                if len(self._suffix_parts) < 1024:
                    self._suffix_parts[key] = parts
            if parts is not False:
                contents = [m.get("content", "") for m in new_messages]
                return "".join(p if isinstance(p, str) else contents[p] for p in parts)
        return self._render_suffix(new_messages)

    def _compile_suffix(self, new_messages: Sequence[dict[str, Any]]) -> list[str | int] | bool:
        marked = [{**m, "content": f"\u2063C{i}\u2063"} for i, m in enumerate(new_messages)]
        pieces = re.split("\u2063C(\\d+)\u2063", self._render_suffix(marked))
        parts: list[str | int] = [int(p) if i % 2 else p for i, p in enumerate(pieces)]
        if sorted(p for p in parts if isinstance(p, int)) != list(range(len(new_messages))):
            return False
        # Verify on contents that a transforming template would change (whitespace, markup).
        probe = [f"  x{i} <b>\n{{{{y}}}}\n " for i in range(len(new_messages))]
        expected = self._render_suffix([{**m, "content": probe[i]} for i, m in enumerate(new_messages)])
        if "".join(p if isinstance(p, str) else probe[p] for p in parts) != expected:
            return False
        return parts

    def _render_suffix(self, new_messages: Sequence[dict[str, Any]]) -> str:
        # The dummy history is constant, so this render costs the same at turn 1 and turn 100.
        convo = [*_DUMMY_HISTORY, {"role": "assistant", "content": _PLACEHOLDER}, *new_messages]
        text = self.render(convo, add_generation_prompt=True)
        at = text.find(_PLACEHOLDER)
        if at < 0:
            raise ChatTemplateError("the chat template drops assistant content; cannot build turn suffixes")
        return text[at + len(_PLACEHOLDER):]

    def _for_template(self, message: dict[str, Any]) -> dict[str, Any]:
        if message.get("role") == "tool" and self.tool_role == "user":
            return {"role": "user", "content": f"<tool_response>\n{message.get('content', '')}\n</tool_response>"}
        return message

    def _detect_tool_role(self) -> str:
        probe = [*_DUMMY_HISTORY, {"role": "assistant", "content": "a"}, {"role": "tool", "content": "TOOLPROBE"}]
        try:
            text = self.tokenizer.apply_chat_template(
                probe, chat_template=self.chat_template, tokenize=False, add_generation_prompt=True
            )
        except Exception:  # templates that enforce user/assistant alternation raise on a tool role
            return "user"
        return "tool" if "TOOLPROBE" in text else "user"

    def _detect_end_of_turn(self) -> list[int]:
        """The ids a policy generates to end its turn: the template's first special token after content."""
        closing = self._suffix_text(())
        self._end_of_turn_text = ""
        specials = sorted(
            (t for t in self.tokenizer.all_special_tokens + list(getattr(self.tokenizer, "added_tokens_encoder", {}))),
            key=len,
            reverse=True,
        )
        stripped = closing.lstrip(" ")
        for token in specials:
            if token and stripped.startswith(token):
                self._end_of_turn_text = closing[: len(closing) - len(stripped) + len(token)]
                return self.encode(token)
        eos = getattr(self.tokenizer, "eos_token_id", None)
        return [eos] if eos is not None else []


def _shape_key(messages: Sequence[dict[str, Any]]) -> tuple | None:
    """What, besides content, a template may render of a reply; ``None`` if not hashable simply."""
    key = []
    for m in messages:
        items = tuple(sorted((k, v) for k, v in m.items() if k != "content"))
        if not all(isinstance(v, (str, int, float, bool, type(None))) for _, v in items):
            return None
        if not isinstance(m.get("content", ""), str):
            return None
        key.append(items)
    return tuple(key)
