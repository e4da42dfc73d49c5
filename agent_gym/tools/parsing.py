"""Parsing tool calls out of assistant text.

Policies emit tool calls as text in some model-family-specific format.  A
:class:`ToolCallParser` turns one assistant turn into a :class:`ParsedResponse`:
the remaining prose, the well-formed calls, and an error for every attempted
call that could not be understood.  Parsers never raise on any input: a
malformed call is feedback for the policy (and a training signal), not a crash.

This module holds the types every format shares and ``hermes`` (JSON in
``<tool_call>`` tags, the default); the other formats' modules build on it and
:mod:`agent_gym.tools.formats` registers them all by name.  Every format reports
what it cannot parse as a ``"malformed"`` :class:`ToolCallError`; unknown tools
and invalid arguments are found by the executor, the same way for every format.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

__all__ = [
    "BaseToolCallParser",
    "HermesParser",
    "ParsedResponse",
    "TaggedBlockParser",
    "ToolCall",
    "ToolCallError",
    "ToolCallParser",
]


@dataclass(frozen=True)
class ToolCall:
    """One well-formed tool call.

    Attributes:
        id: Deterministic id within the turn (``call_0``, ``call_1``, ...).
        name: Name of the tool to call (not yet checked against any registry).
        arguments: Decoded JSON arguments (always a dict).
        raw: The exact text of the call, including its delimiters (``pythonic``: the whole list
            the call was written in).
    """

    id: str
    name: str
    arguments: dict[str, Any]
    raw: str


@dataclass(frozen=True)
class ToolCallError:
    """An attempted tool call that could not be parsed.

    Attributes:
        raw: The offending text, including delimiters.
        kind: Error category; parsers produce ``"malformed"``.
        message: Human-readable reason, written to be shown to the policy.
    """

    raw: str
    kind: str
    message: str


@dataclass(frozen=True)
class ParsedResponse:
    """One assistant turn split into prose and tool calls.

    Attributes:
        content: The text with every tool-call block removed, stripped.
        calls: Well-formed calls in the order they appeared.
        errors: Malformed call attempts in the order they appeared.
    """

    content: str
    calls: tuple[ToolCall, ...] = ()
    errors: tuple[ToolCallError, ...] = ()

    @property
    def has_tool_calls(self) -> bool:
        """True if the policy *attempted* at least one tool call (valid or not)."""
        return bool(self.calls or self.errors)


@runtime_checkable
class ToolCallParser(Protocol):
    """Interface of a tool-call format (:class:`BaseToolCallParser` implements ``describe_tools``)."""

    @property
    def name(self) -> str:  # read-only: BaseToolCallParser's is a class attribute
        ...

    def parse(self, text: str) -> ParsedResponse:
        """Split assistant text into content, calls and errors; never raises."""
        ...

    def format_calls(self, calls: Iterable[ToolCall | Mapping[str, Any]]) -> str:
        """Render calls the way an assistant in this format would write them."""
        ...


def _json_type(value: Any) -> str:
    """JSON type name of a decoded value, for error messages aimed at the policy."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


class _Malformed(Exception):
    """Internal: carries the reason a block is malformed."""


def function_of(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """The function part of a tool schema: ``{"type": "function", "function": {...}}`` or the bare
    ``{"name", "description", "parameters"}`` mapping (both forms are in use)."""
    function = schema.get("function")
    return function if isinstance(function, Mapping) else schema


def call_parts(call: ToolCall | Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """``(name, arguments)`` of a :class:`ToolCall` or of a ``{"name", "arguments"}`` mapping."""
    if isinstance(call, ToolCall):
        return call.name, call.arguments
    return call["name"], call.get("arguments", {})


def _tojson(value: Any) -> str:
    # The bytes of jinja2's ``tojson`` filter (sorted keys, HTML-safe escapes), so hermes' schema
    # block here equals the one the env templates write with ``{{ tool | tojson }}``.
    return (
        json.dumps(value, sort_keys=True)
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("'", "\\u0027")
    )


class BaseToolCallParser:
    """A base for tool-call formats: keeps the tool schemas and offers them hermes-style.

    Args:
        tools: the OpenAI schemas of the tools the policy may call. Formats that type argument
            values by the schema (``qwen3_coder``) or must check tool names (``pythonic``) use them;
            parsing itself never rejects a call for naming an unknown tool (the executor does).

    A subclass sets :attr:`name` and implements :meth:`parse` and :meth:`format_calls`; it may
    override :meth:`describe_tools`.
    """

    name: ClassVar[str] = ""

    def __init__(self, tools: Sequence[Mapping[str, Any]] = ()) -> None:
        self.tools: list[Mapping[str, Any]] = list(tools)

    def parse(self, text: str) -> ParsedResponse:  # pragma: no cover - interface
        raise NotImplementedError

    def format_calls(self, calls: Iterable[ToolCall | Mapping[str, Any]]) -> str:  # pragma: no cover
        raise NotImplementedError

    def describe_tools(self, tools: Sequence[Mapping[str, Any]] | None = None) -> str:
        """The schemas (default: the parser's own) as JSON lines in ``<tools>`` tags; ``""`` for none."""
        tools = self.tools if tools is None else tools
        if not tools:
            return ""
        return "<tools>\n" + "\n".join(_tojson(dict(t)) for t in tools) + "\n</tools>"


class TaggedBlockParser(BaseToolCallParser):
    """Calls written one per ``OPEN ... CLOSE`` block; subclasses decode a block's body.

    Outside the blocks everything is content. An ``OPEN`` with no ``CLOSE`` (a new ``OPEN`` before
    the closing tag also ends the previous, unterminated block) and a stray ``CLOSE`` are
    ``"malformed"`` errors; so is every block whose body :meth:`_decode` refuses.
    """

    OPEN: ClassVar[str] = "<tool_call>"
    CLOSE: ClassVar[str] = "</tool_call>"
    _TAG_RE: ClassVar[re.Pattern[str]]  # set per subclass, from its OPEN and CLOSE

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._TAG_RE = re.compile(re.escape(cls.OPEN) + "|" + re.escape(cls.CLOSE))

    def _decode(self, body: str) -> tuple[str, dict[str, Any]]:  # pragma: no cover - interface
        """``(name, arguments)`` of a block's body; raises ``_Malformed`` with the reason."""
        raise NotImplementedError

    def parse(self, text: str) -> ParsedResponse:
        """Parse one assistant turn.  Never raises, whatever ``text`` is."""
        if not isinstance(text, str):
            # Defensive: keep the "never raises" contract even for misuse.
            text = "" if text is None else str(text)
        content_parts: list[str] = []
        calls: list[ToolCall] = []
        errors: list[ToolCallError] = []

        cursor = 0  # end of the last consumed region
        open_start: int | None = None  # start of the currently open block
        for match in self._TAG_RE.finditer(text):
            tag = match.group()
            if open_start is None:
                content_parts.append(text[cursor : match.start()])
                if tag == self.OPEN:
                    open_start = match.start()
                else:
                    errors.append(
                        ToolCallError(
                            raw=tag,
                            kind="malformed",
                            message=f"stray {self.CLOSE} without a matching {self.OPEN}",
                        )
                    )
                cursor = match.end()
            elif tag == self.OPEN:
                # A new block starts before the previous one was closed.
                errors.append(self._unterminated(text[open_start : match.start()]))
                open_start = match.start()
                cursor = match.end()
            else:
                raw = text[open_start : match.end()]
                body = text[open_start + len(self.OPEN) : match.start()]
                try:
                    name, arguments = self._decode(body)
                except _Malformed as exc:
                    errors.append(ToolCallError(raw=raw, kind="malformed", message=str(exc)))
                except (RecursionError, MemoryError, ValueError) as exc:
                    # A decoder bug or pathological input must not escape: it is a malformed call.
                    errors.append(
                        ToolCallError(raw=raw, kind="malformed", message=f"unreadable call ({type(exc).__name__})")
                    )
                else:
                    calls.append(
                        ToolCall(id=f"call_{len(calls)}", name=name, arguments=arguments, raw=raw)
                    )
                open_start = None
                cursor = match.end()

        if open_start is not None:
            errors.append(self._unterminated(text[open_start:]))
        else:
            content_parts.append(text[cursor:])
        return ParsedResponse(
            content="".join(content_parts).strip(), calls=tuple(calls), errors=tuple(errors)
        )

    def _unterminated(self, raw: str) -> ToolCallError:
        return ToolCallError(
            raw=raw, kind="malformed", message=f"unterminated {self.OPEN} block (missing {self.CLOSE})"
        )


class HermesParser(TaggedBlockParser):
    """The Hermes / Qwen tool-call format.

    Each call is a JSON object between tags, one block per call; several blocks
    in one turn are parallel calls::

        <tool_call>
        {"name": "calculate", "arguments": {"expression": "2+2"}}
        </tool_call>

    Leniencies (models in the wild do these): ``arguments`` may be a JSON
    *string* that decodes to an object; a missing ``arguments`` means ``{}``;
    raw control characters (e.g. newlines) inside JSON strings are accepted.

    Everything else is reported as a ``"malformed"`` :class:`ToolCallError`:
    invalid JSON, a non-object payload, a missing or non-string ``name``,
    non-object ``arguments``, an ``<tool_call>`` with no closing tag (a new
    ``<tool_call>`` before the closing tag also ends the previous, unterminated
    block) and a stray ``</tool_call>``.

    The system prompt offers the tools as their JSON schemas, one per line, in
    ``<tools></tools>`` tags (:meth:`describe_tools`).
    """

    name = "hermes"

    @staticmethod
    def _loads(text: str) -> Any:
        # strict=False accepts raw newlines/tabs inside strings, which models
        # often emit for multi-line arguments such as code.
        return json.loads(text, strict=False)

    def _decode(self, body: str) -> tuple[str, dict[str, Any]]:
        stripped = body.strip()
        if not stripped:
            raise _Malformed(f"empty {self.OPEN} block")
        try:
            payload = self._loads(stripped)
        except json.JSONDecodeError as exc:
            raise _Malformed(f"invalid JSON in {self.OPEN} block: {exc}") from None
        except (ValueError, RecursionError) as exc:
            # RecursionError: absurdly deep nesting; ValueError: e.g. huge ints.
            raise _Malformed(f"invalid JSON in {self.OPEN} block: {exc}") from None

        if not isinstance(payload, dict):
            raise _Malformed(
                'tool call must be a JSON object like {"name": ..., "arguments": {...}}, '
                f"got {_json_type(payload)}"
            )
        if "name" not in payload:
            raise _Malformed("tool call is missing the 'name' field")
        name = payload["name"]
        if not isinstance(name, str) or not name:
            raise _Malformed(f"'name' must be a non-empty string, got {_json_type(name)}")

        arguments = payload.get("arguments", {})
        if isinstance(arguments, str):
            try:
                decoded = self._loads(arguments)
            except (ValueError, RecursionError) as exc:
                raise _Malformed(
                    f"'arguments' for {name!r} is a string that is not valid JSON: {exc}"
                ) from None
            if not isinstance(decoded, dict):
                raise _Malformed(
                    f"'arguments' for {name!r} must be a JSON object, "
                    f"got a string containing {_json_type(decoded)}"
                )
            arguments = decoded
        elif not isinstance(arguments, dict):
            raise _Malformed(
                f"'arguments' for {name!r} must be a JSON object, got {_json_type(arguments)}"
            )
        return name, arguments

    def format_calls(self, calls: Iterable[ToolCall | Mapping[str, Any]]) -> str:
        """Render calls as an assistant would write them (blocks joined by newlines).

        Accepts :class:`ToolCall` objects or mappings with ``name`` and
        ``arguments``.  ``parse(format_calls(calls))`` recovers the same names and
        arguments, even when argument strings contain the tags themselves.
        """
        blocks = []
        for call in calls:
            name, arguments = call_parts(call)
            payload = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
            # Tags can only occur inside JSON strings here, where "<" may be
            # written as the escape \u003c: the JSON value is unchanged but the
            # block can no longer be cut short by a tag inside an argument.
            payload = payload.replace(self.OPEN, "\\u003c" + self.OPEN[1:]).replace(
                self.CLOSE, "\\u003c" + self.CLOSE[1:]
            )
            blocks.append(f"{self.OPEN}\n{payload}\n{self.CLOSE}")
        return "\n".join(blocks)
