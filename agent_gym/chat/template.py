"""A tokenizer's chat template, seen from an environment that appends turns to a token sequence.

The env must turn "append these tool/user messages after the assistant's turn" into token ids
*without* re-tokenizing the conversation (that costs O(context) per step and, for templates that
rewrite history, changes tokens the policy already produced). :meth:`ChatTemplate.turn_suffix`
finds those ids by rendering a conversation whose last assistant turn ends with a placeholder: the
text after the placeholder is exactly what the template writes between the end of that assistant's
content and the start of the next assistant's content.

Which conversation is rendered is decided once, at construction, by probing the template:

- most templates write the same text after an assistant turn whatever came before it; for them a
  tiny fixed conversation stands in for the history, so the cost of a step does not grow with the
  episode (and per reply shape the text is compiled once and then filled in by string joining);
- a *history-dependent* template (DeepSeek-R1's writes a second tool round differently from the
  first) is rendered after the real history, so the appended ids are what the template itself
  writes there.

The same probing decides how the env's replies are expressed: tool results use the template's
``tool`` role where it has one, else user turns wrapped in ``<tool_response>`` tags; where the
template forbids two turns of one role in a row (strict user/assistant alternation, as Gemma's),
consecutive tool results are merged into one turn. :meth:`ChatTemplate.template_messages` is that
mapping; the context stores its result, so the messages of an observation render with the
tokenizer's own template.
"""

from __future__ import annotations

import re
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Literal, Sequence

from agent_gym.models import CHAT_TEMPLATES, builtin_chat_template

__all__ = ["ChatTemplate", "ChatTemplateError", "resolve_chat_template"]

# Never produced by a tokenizer's normaliser and never special: a safe marker to split rendered text.
_PLACEHOLDER = "\u2063AGENTGYMPLACEHOLDER\u2063"
_DUMMY_HISTORY = ({"role": "system", "content": "s"}, {"role": "user", "content": "u"})
# The replies an env gives after an assistant turn (tool results of one or more calls, feedback,
# both), as role sequences: every one must be expressible, or the template is refused.
_REPLY_SHAPES = (("tool",), ("tool", "tool"), ("tool", "tool", "tool"), ("user",), ("tool", "user"), ("user", "user"))
_PROBE_CALL = (
    '<think>Add them.</think>\n<tool_call>\n{"name": "calculate", "arguments": {"expression": "1+1"}}\n</tool_call>'
)

#: A reply shape's suffix as literal pieces and content indices, with the transform the template
#: applies to contents (``None``: pasted verbatim); ``False``: the shape needs a full render.
_CompiledSuffix = tuple[list[str | int], Callable[[str], str] | None] | Literal[False]


def resolve_chat_template(value: str | None) -> str | None:
    """A ``chat_template=`` argument as jinja text: a built-in name becomes its template, jinja text
    (anything with ``{{`` or ``{%``) is returned as it is, ``None`` stays ``None``.

    Raises:
        ValueError: a string that is neither a built-in name nor a jinja template (a template without
            any jinja markup could not render the messages).
    """
    if value is None:
        return None
    if value in CHAT_TEMPLATES:
        return builtin_chat_template(value)
    if "{{" in value or "{%" in value:
        return value
    raise ValueError(
        f"chat_template must be jinja text or a built-in name ({', '.join(CHAT_TEMPLATES)}); got {value[:60]!r}"
    )


class ChatTemplateError(ValueError):
    """The tokenizer's chat template cannot be used the way an agent env needs."""


class ChatTemplate:
    """Renders and tokenizes chat messages with a Hugging Face tokenizer's chat template.

    Args:
        tokenizer: any Hugging Face tokenizer with a chat template.
        chat_template: a jinja chat template that replaces the tokenizer's own (optional), or the
            name of a built-in one (:data:`agent_gym.models.CHAT_TEMPLATES`: ``"completion"``).
        tool_role: ``"tool"`` to render tool results with the template's ``tool`` role, ``"user"`` to
            render them as user messages wrapped in ``<tool_response>`` tags, ``None`` (default) to use
            ``tool`` when the template renders it and fall back to ``user`` when it cannot.

    Attributes set by probing the template once (per tokenizer and template):
        tool_role: the role tool results are rendered with.
        merges_turns: consecutive tool (or user) turns are merged into one, because the template
            does not accept two turns of one role in a row.
        history_dependent: what the template writes after an assistant turn depends on earlier
            turns, so turn suffixes are rendered after the real history.
        reply_error: why the template cannot render any reply after an assistant turn (``None``
            when it can); an env that needs replies refuses such a template (:meth:`require_replies`).
        end_of_turn_ids: the ids a policy generates to end its turn.
    """

    def __init__(self, tokenizer: Any, *, chat_template: str | None = None, tool_role: str | None = None):
        self.tokenizer = tokenizer
        # A built-in name ("completion", for base models) stands for its template's text.
        self.chat_template = resolve_chat_template(chat_template) or getattr(tokenizer, "chat_template", None)
        if not self.chat_template:
            raise ChatTemplateError(
                f"tokenizer {getattr(tokenizer, 'name_or_path', '?')!r} has no chat template; pass chat_template="
            )
        if tool_role not in (None, "tool", "user"):
            raise ValueError(f"tool_role must be 'tool', 'user' or None, got {tool_role!r}")
        self._backend = _fast_backend(tokenizer)
        self.vocab_size = _vocab_size(tokenizer, self._backend)
        #: True when the template itself renders the ``tools`` argument (e.g. Qwen2.5, Llama 3.1).
        self.renders_tools = "tools" in self.chat_template
        self._suffix_parts: dict[tuple, _CompiledSuffix] = {}
        plan = _plans(tokenizer, self.chat_template, tool_role, self.vocab_size, lambda: self._probe(tool_role))
        self.tool_role: str = plan.tool_role
        self.merges_turns: bool = plan.merges_turns
        self.reply_error: str | None = plan.reply_error
        self.history_dependent: bool = plan.history_dependent
        self.end_of_turn_ids: list[int] = list(plan.end_of_turn_ids)
        self._end_of_turn_text: str = plan.end_of_turn_text
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
            self.template_messages(messages),
            chat_template=self.chat_template,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            **kwargs,
        )

    def template_messages(self, messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """``messages`` (OpenAI format) as this template takes them.

        Tool results become user turns wrapped in ``<tool_response>`` tags where the template has no
        tool role, and runs of tool (or user) turns are merged into one turn, their contents joined
        by newlines, where it does not accept two turns of one role in a row. Applying it twice
        changes nothing; the input is not modified (unchanged messages are passed through as they are).
        """
        out: list[dict[str, Any]] = []
        for message in messages:
            m = self._for_template(message)
            if self.merges_turns and out and m.get("role") in ("user", "tool") and out[-1].get("role") == m.get("role"):
                prev = out[-1]
                if isinstance(prev.get("content"), str) and isinstance(m.get("content"), str):
                    out[-1] = {"role": prev["role"], "content": prev["content"] + "\n" + m["content"]}
                    continue
            out.append(m)
        return out

    def require_replies(self) -> None:
        """Raise :class:`ChatTemplateError` if the template cannot render a reply after an assistant
        turn (an env with more than one turn needs that: it is checked when the env is made)."""
        if self.reply_error is not None:
            raise ChatTemplateError(self.reply_error)

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

    def turn_suffix(
        self,
        new_messages: Sequence[dict[str, Any]],
        action_ids: Sequence[int],
        history: Sequence[dict[str, Any]] | None = None,
        tools: Sequence[dict[str, Any]] | None = None,
    ) -> list[int]:
        """Ids to append after an assistant turn whose generated ids were ``action_ids``.

        The result closes the assistant turn (whatever part of the closing the policy did not generate
        itself, e.g. the newline after ``<|im_end|>``), renders ``new_messages`` and opens the next
        assistant turn (the generation prompt).

        ``history`` is the conversation so far, ending with that assistant turn's message (and
        ``tools`` the schemas offered). A history-dependent template is rendered after it; without
        it such a template gets the text it writes after a one-exchange conversation.
        """
        new = self.template_messages(new_messages)
        if self.history_dependent and history:
            text = self._render_suffix(new, history=history, tools=tools)
        else:
            text = self._suffix_text(new)
        ends_turn = bool(self.end_of_turn_ids) and list(action_ids[-len(self.end_of_turn_ids):]) == self.end_of_turn_ids
        closing = self._end_of_turn_text
        if ends_turn and closing and text.startswith(closing):
            text = text[len(closing):]
        return self.encode(text)

    # -- internals ----------------------------------------------------------------------------------

    def _suffix_text(self, new_messages: Sequence[dict[str, Any]]) -> str:
        # Fast path: for each shape of reply (roles and metadata, not contents) render once with
        # content markers, check that the template pastes content verbatim (or trimmed, as Gemma's
        # does), then fill in contents by string joining. Templates that transform content otherwise
        # get a full render.
        key = _shape_key(new_messages)
        if key is not None:
            compiled = self._suffix_parts.get(key)
            if compiled is None:
                compiled = self._compile_suffix(new_messages)
                if len(self._suffix_parts) < 1024:
                    self._suffix_parts[key] = compiled
            if compiled is not False:
                parts, transform = compiled
                contents = [m.get("content", "") for m in new_messages]
                if transform is not None:
                    contents = [transform(c) for c in contents]
                return "".join(p if isinstance(p, str) else contents[p] for p in parts)
        return self._render_suffix(new_messages)

    def _compile_suffix(self, new_messages: Sequence[dict[str, Any]]) -> _CompiledSuffix:
        marked = [{**m, "content": f"\u2063C{i}\u2063"} for i, m in enumerate(new_messages)]
        pieces = re.split("\u2063C(\\d+)\u2063", self._render_suffix(marked))
        parts: list[str | int] = [int(p) if i % 2 else p for i, p in enumerate(pieces)]
        if sorted(p for p in parts if isinstance(p, int)) != list(range(len(new_messages))):
            return False
        # Verify on contents that a transforming template would change (whitespace, markup).
        probes = [
            [f"  x{i} <b>\n{{{{y}}}}\n " for i in range(len(new_messages))],
            [f"\n\t{i}  &amp; z\t\n\n" for i in range(len(new_messages))],
        ]
        expected = [self._render_suffix([{**m, "content": p[i]} for i, m in enumerate(new_messages)]) for p in probes]
        for transform in (None, str.strip):
            if all(
                "".join(part if isinstance(part, str) else (probe[part] if transform is None else transform(probe[part]))
                        for part in parts) == want
                for probe, want in zip(probes, expected)
            ):
                return parts, transform
        return False

    def _render_suffix(
        self,
        new_messages: Sequence[dict[str, Any]],
        history: Sequence[dict[str, Any]] | None = None,
        tools: Sequence[dict[str, Any]] | None = None,
    ) -> str:
        """The text the template writes after the last assistant turn's content and ``new_messages``.

        Without ``history`` a constant one-exchange conversation stands in for it, so this costs the
        same at turn 1 and turn 100; with it, the last message of ``history`` is the assistant turn
        (rendered with its content, the placeholder after it, and without ``tool_calls``: the calls
        are part of the content the policy generated)."""
        if history is None:
            convo = [*_DUMMY_HISTORY, {"role": "assistant", "content": _PLACEHOLDER}, *new_messages]
        else:
            last = history[-1]
            if last.get("role") != "assistant":
                raise ValueError("the history of a turn suffix must end with the assistant turn")
            closing = {k: v for k, v in last.items() if k != "tool_calls"}
            closing["content"] = f"{last.get('content') or ''}{_PLACEHOLDER}"
            convo = [*history[:-1], closing, *new_messages]
        text = self.render(convo, tools, add_generation_prompt=True)
        at = text.find(_PLACEHOLDER)
        if at < 0:
            raise ChatTemplateError("the chat template drops assistant content; cannot build turn suffixes")
        return text[at + len(_PLACEHOLDER):]

    def _for_template(self, message: dict[str, Any]) -> dict[str, Any]:
        if message.get("role") == "tool" and self.tool_role == "user":
            return {"role": "user", "content": f"<tool_response>\n{message.get('content', '')}\n</tool_response>"}
        return message

    # -- probing (once per tokenizer and template) ---------------------------------------------------

    def _probe(self, requested_role: str | None) -> "_Plan":
        """Decide how replies are expressed, whether suffixes depend on history, and the end of turn."""
        candidates = [(requested_role, False), (requested_role, True)] if requested_role else [
            ("tool", False), ("tool", True), ("user", False), ("user", True)
        ]
        reply_error = None
        for role, merge in candidates:
            self.tool_role, self.merges_turns = role, merge
            reply_error = self._reply_problem()
            if reply_error is None:
                break
        if reply_error is not None:  # nothing works: keep the simplest mapping, refuse replies
            self.tool_role, self.merges_turns = candidates[-1]
        self.history_dependent = False
        closing = self._render_suffix(())  # raises ChatTemplateError if assistant content is dropped
        eot_ids, eot_text = self._end_of_turn(closing)
        dependent = reply_error is None and self._depends_on_history()
        return _Plan(self.tool_role, self.merges_turns, reply_error, dependent, tuple(eot_ids), eot_text)

    def _reply_problem(self) -> str | None:
        """Why some reply shape cannot be rendered after an assistant turn with the current mapping."""
        for shape in _REPLY_SHAPES:
            contents = [f"PROBE{i}" for i in range(len(shape))]
            reply = [{"role": r, "content": c} for r, c in zip(shape, contents)]
            try:
                text = self._render_suffix(self.template_messages(reply))
            except Exception as exc:  # noqa: BLE001 - jinja raise_exception, TemplateError, anything
                return (
                    f"the chat template cannot render a {' + '.join(shape)} reply after an assistant turn "
                    f"(tool results rendered as {self.tool_role!r} turns{', merged' if self.merges_turns else ''}): "
                    f"{type(exc).__name__}: {exc}"
                )
            at = 0
            for c in contents:
                at = text.find(c, at)
                if at < 0:
                    return f"the chat template drops the content of a {' + '.join(shape)} reply after an assistant turn"
        return None

    def _depends_on_history(self) -> bool:
        """Whether the text after an assistant turn changes with what came before it.

        Compared with the one-exchange stand-in: earlier tool rounds (one and several calls), an
        earlier user follow-up, no system prompt, a long episode, and reasoning in the last turn.
        """
        system, user = _DUMMY_HISTORY
        call = {"role": "assistant", "content": _PROBE_CALL}
        result = {"role": "tool", "content": "2"}
        histories = [
            [system, user],
            [user],
            [system, user, call, result],
            [system, user, call, result, result, call, result],
            [system, user, {"role": "assistant", "content": "Why?"}, {"role": "user", "content": "Go on."}],
            [system, user, call, result, {"role": "assistant", "content": "<think>ok</think>It is 2."}, user],
            [system, user, *[call, result] * 6],
        ]
        finals = ["", "<think>Check it.</think>\nIt is 2.", _PROBE_CALL]
        for shape in (("tool",), ("tool", "tool"), ("user",)):
            reply = self.template_messages([{"role": r, "content": f"R{i}"} for i, r in enumerate(shape)])
            stand_in = self._render_suffix(reply)
            for history in histories:
                for final in finals:
                    convo = self.template_messages(history) + [{"role": "assistant", "content": final}]
                    try:
                        text = self._render_suffix(reply, history=convo)
                    except Exception:  # noqa: BLE001 - a history this template cannot take at all
                        continue
                    if text != stand_in:
                        return True
        return False

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

    def _end_of_turn(self, closing: str) -> tuple[list[int], str]:
        """The ids a policy generates to end its turn (the template's first special token after
        content), and the text of the closing up to that token."""
        specials = sorted(
            (t for t in self.tokenizer.all_special_tokens + list(getattr(self.tokenizer, "added_tokens_encoder", {}))),
            key=len,
            reverse=True,
        )
        stripped = closing.lstrip(" ")
        for token in specials:
            if token and stripped.startswith(token):
                return self.encode(token), closing[: len(closing) - len(stripped) + len(token)]
        eos = getattr(self.tokenizer, "eos_token_id", None)
        return ([eos] if eos is not None else []), ""


@dataclass(frozen=True)
class _Plan:
    """What probing a template found (see :meth:`ChatTemplate._probe`)."""

    tool_role: str
    merges_turns: bool
    reply_error: str | None
    history_dependent: bool
    end_of_turn_ids: tuple[int, ...]
    end_of_turn_text: str


_PLANS: "weakref.WeakKeyDictionary[Any, dict[tuple[str, str | None, int], _Plan]]" = weakref.WeakKeyDictionary()


def _plans(tokenizer: Any, chat_template: str, tool_role: str | None, vocab_size: int, probe: Any) -> _Plan:
    """The probe result for this tokenizer and template, computed once (an env is made per episode
    runner, often hundreds per process, and probing renders the template some fifty times)."""
    key = (chat_template, tool_role, vocab_size)
    with _PREFIX_LOCK:
        try:
            plan = _PLANS.get(tokenizer, {}).get(key)
        except TypeError:  # not weak-referenceable
            return probe()
    if plan is not None:
        return plan
    plan = probe()
    with _PREFIX_LOCK:
        _PLANS.setdefault(tokenizer, {})[key] = plan
    return plan


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
