"""Parsing tool calls out of assistant text.

Policies emit tool calls as text in some model-family-specific format.  A
:class:`ToolCallParser` turns one assistant turn into a :class:`ParsedResponse`:
the remaining prose, the well-formed calls, and an error for every attempted
call that could not be understood.  Parsers never raise on any input: a
malformed call is feedback for the policy (and a training signal), not a crash.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "PARSERS",
    "HermesParser",
    "ParsedResponse",
    "ToolCall",
    "ToolCallError",
    "ToolCallParser",
    "get_parser",
]


@dataclass(frozen=True)
class ToolCall:
    """One well-formed tool call.

    Attributes:
        id: Deterministic id within the turn (``call_0``, ``call_1``, ...).
        name: Name of the tool to call (not yet checked against any registry).
        arguments: Decoded JSON arguments (always a dict).
        raw: The exact text of the call, including its delimiters.
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
    """Interface of a tool-call format."""

    name: str

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


class HermesParser:
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
    """

    name = "hermes"
    OPEN = "<tool_call>"
    CLOSE = "</tool_call>"

    _TAG_RE = re.compile(re.escape(OPEN) + "|" + re.escape(CLOSE))

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
            if isinstance(call, ToolCall):
                name, arguments = call.name, call.arguments
            else:
                name, arguments = call["name"], call.get("arguments", {})
            payload = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
            # Tags can only occur inside JSON strings here, where "<" may be
            # written as the escape \u003c: the JSON value is unchanged but the
            # block can no longer be cut short by a tag inside an argument.
            payload = payload.replace(self.OPEN, "\\u003c" + self.OPEN[1:]).replace(
                self.CLOSE, "\\u003c" + self.CLOSE[1:]
            )
            blocks.append(f"{self.OPEN}\n{payload}\n{self.CLOSE}")
        return "\n".join(blocks)


#: Registry of tool-call formats by name.
PARSERS: dict[str, type[ToolCallParser]] = {HermesParser.name: HermesParser}


def get_parser(name: str) -> ToolCallParser:
    """Instantiate the parser registered under ``name``.

    Raises:
        ValueError: If no such format is registered.
    """
    try:
        parser_cls = PARSERS[name]
    except (KeyError, TypeError):
        known = ", ".join(sorted(PARSERS))
        raise ValueError(f"unknown tool-call format {name!r}; known: {known}") from None
    return parser_cls()
