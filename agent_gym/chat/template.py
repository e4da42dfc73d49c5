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
import threading
import weakref
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
        self._backend = _fast_backend(tokenizer)
        self.vocab_size = _vocab_size(tokenizer, self._backend)
        self.tool_role = tool_role or self._detect_tool_role()
        #: True when the template itself renders the ``tools`` argument (e.g. Qwen2.5, Llama 3.1).
        self.renders_tools = "tools" in self.chat_template
        self._suffix_parts: dict[tuple, list[str | int] | bool] = {}
        self.end_of_turn_ids = self._detect_end_of_turn()
        # Prompt prefix cache (see encode_prompt): ids of the text up to the first end of turn (the
        # system turn, usually the same in every episode), once the split is checked to be exact.
        # Shared by the templates of one tokenizer and chat template (one per env, often hundreds).
        boundary = self._safe_prefix_boundary()
        self._prefixes = _prefix_cache(tokenizer, self.chat_template, boundary, self.vocab_size) if boundary else None

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
        backend = self._backend
        if (
            backend is not None
            and backend.truncation is None
            and backend.padding is None
            and backend.encode_special_tokens == bool(getattr(self.tokenizer, "split_special_tokens", False))
        ):
            # What the tokenizer's own encode does for one text with these settings, without its
            # per-call Python overhead (batching, BatchEncoding); the ids are the same.
            return backend.encode(text, add_special_tokens=False).ids
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def encode_prompt(self, text: str) -> list[int]:
        """:meth:`encode` for a rendered conversation, reusing the ids of a prefix seen before.

        The text up to the end of its first turn (usually the system prompt with the tool schemas,
        the same in every episode and most of the prompt) is encoded once and kept; only the rest is
        encoded per call. The ids are exactly :meth:`encode`'s: the split is made only after an
        end-of-turn special token that the tokenizer matches on its own (not normalised, no
        stripping, contained in no other added token), and each prefix is checked against a full
        encoding the second time it is seen before its ids are reused; if a check ever fails the
        cache is turned off for this tokenizer. The cache is shared by the templates of one tokenizer
        (every env made with it) and holds at most 256 prefixes.
        """
        prefixes = self._prefixes
        if prefixes is None or not prefixes.ok or self._backend.encode_special_tokens:
            return self.encode(text)
        at = text.find(prefixes.boundary)
        if at < 0:
            return self.encode(text)
        cut = at + len(prefixes.boundary)
        prefix = text[:cut]
        cache = prefixes.ids
        if prefix not in cache:  # first sighting: remember the prefix, encode as usual
            if len(cache) >= 256:
                cache.clear()
            cache[prefix] = None
            return self.encode(text)
        head = cache[prefix]
        if head is None:  # second sighting: check that splitting here is exact, then keep its ids
            full = self.encode(text)
            head = self.encode(prefix)
            if head + self.encode(text[cut:]) == full:
                cache[prefix] = head
            else:
                prefixes.ok = False
                cache.clear()
            return full
        return head + self.encode(text[cut:])

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

    def _safe_prefix_boundary(self) -> str | None:
        """The end-of-turn token text after which :meth:`encode_prompt` may split, or ``None``.

        Only for fast tokenizers, whose added tokens are matched on the raw text before anything else
        (so the text on either side of such a token is tokenized independently), and only for a
        token that cannot take part in a different match across the split.
        """
        backend = self._backend
        if backend is None or not self.end_of_turn_ids or len(self.end_of_turn_ids) != 1:
            return None
        try:
            added = backend.get_added_tokens_decoder()
        except Exception:  # noqa: BLE001 - an old tokenizers release: no cache
            return None
        token = added.get(self.end_of_turn_ids[0])
        text = self._end_of_turn_text.lstrip(" ")
        if token is None or token.content != text or not text:
            return None
        if token.normalized or token.rstrip or token.lstrip or token.single_word:
            return None
        for other in added.values():
            c = other.content
            if c == text:
                continue
            # contains it, or overlaps its start or its end: a match could then straddle the split
            if text in c or any(c.endswith(text[:k]) or c.startswith(text[-k:]) for k in range(1, len(text))):
                return None
        return text

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


class _PrefixCache:
    """Ids of prompt prefixes (see :meth:`ChatTemplate.encode_prompt`); ``ok`` turns it off for good."""

    def __init__(self, boundary: str):
        self.boundary = boundary
        self.ids: dict[str, list[int] | None] = {}
        self.ok = True


_PREFIX_CACHES: "weakref.WeakKeyDictionary[Any, dict[tuple[str, str, int], _PrefixCache]]" = weakref.WeakKeyDictionary()
_PREFIX_LOCK = threading.Lock()


def _prefix_cache(tokenizer: Any, chat_template: str, boundary: str, vocab_size: int) -> _PrefixCache | None:
    """The prefix cache shared by every template of this tokenizer (``None`` if it cannot be keyed)."""
    with _PREFIX_LOCK:
        try:
            per_tokenizer = _PREFIX_CACHES.setdefault(tokenizer, {})
        except TypeError:  # not weak-referenceable
            return None
        # (the vocabulary size is part of the key: tokens added later change how text is split)
        return per_tokenizer.setdefault((chat_template, boundary, vocab_size), _PrefixCache(boundary))


_VOCAB_SIZES: "weakref.WeakKeyDictionary[Any, tuple[tuple[int, int], int]]" = weakref.WeakKeyDictionary()


def _vocab_size(tokenizer: Any, backend: Any) -> int:
    """``len(tokenizer)``, remembered per tokenizer: for a fast tokenizer it builds the whole
    vocabulary (about 10 ms), once per env otherwise. The remembered size is used only while the
    model's vocabulary size and the number of added tokens are unchanged."""
    try:
        from transformers import PreTrainedTokenizerFast
    except ImportError:
        return len(tokenizer)
    if backend is None or type(tokenizer).__len__ is not PreTrainedTokenizerFast.__len__:
        return len(tokenizer)
    try:
        signature = (backend.get_vocab_size(with_added_tokens=False), len(backend.get_added_tokens_decoder()))
        with _PREFIX_LOCK:
            entry = _VOCAB_SIZES.get(tokenizer)
    except Exception:  # noqa: BLE001 - not weak-referenceable, an old tokenizers release
        return len(tokenizer)
    if entry is not None and entry[0] == signature:
        return entry[1]
    size = len(tokenizer)
    with _PREFIX_LOCK:
        _VOCAB_SIZES[tokenizer] = (signature, size)
    return size


def _fast_backend(tokenizer: Any) -> Any:
    """The ``tokenizers.Tokenizer`` behind a Hugging Face fast tokenizer whose ``encode`` is the
    library's own (so calling the backend directly gives the same ids), else ``None``."""
    backend = getattr(tokenizer, "_tokenizer", None)
    try:
        from tokenizers import Tokenizer
        from transformers import PreTrainedTokenizerFast
        from transformers.tokenization_utils_base import PreTrainedTokenizerBase
    except ImportError:
        return None
    if not isinstance(backend, Tokenizer) or not isinstance(tokenizer, PreTrainedTokenizerFast):
        return None
    cls = type(tokenizer)
    if cls.encode is not PreTrainedTokenizerBase.encode or not hasattr(backend, "encode_special_tokens"):
        return None
    for name in ("encode_plus", "_encode_plus", "_batch_encode_plus", "set_truncation_and_padding"):
        if getattr(cls, name, None) is not getattr(PreTrainedTokenizerFast, name, None):
            return None
    return backend


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
