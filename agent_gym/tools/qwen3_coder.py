"""The ``qwen3_coder`` tool-call format: Qwen3-Coder's XML-style calls.

One call per ``<tool_call>`` block; the function and each argument are tags whose values are
written as they are (code spans lines without any escaping)::

    <tool_call>
    <function=calculate>
    <parameter=expression>
    2 + 3 * 4
    </parameter>
    </function>
    </tool_call>

Values are text, so they are typed by the tool's schema: a ``string`` parameter keeps the text
exactly (one newline after the opening and before the closing tag belongs to the layout, not the
value); ``integer``, ``number``, ``boolean``, ``null``, ``object`` and ``array`` parameters are
read as JSON (``True``/``False``/``None`` too); a value that does not read as its type is passed on
as text, so the executor reports it as ``invalid_arguments`` in the tool's own words. Parameters of
unknown tools, unknown parameters and parameters whose schema names no type stay text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

from agent_gym.tools.parsing import TaggedBlockParser, ToolCall, _Malformed, call_parts, function_of

__all__ = ["Qwen3CoderParser"]

_FUNCTION = "<function="
_END_FUNCTION = "</function>"
_PARAMETER = "<parameter="
_END_PARAMETER = "</parameter>"
_SNIPPET = 40  # characters of offending text quoted back to the policy

#: JSON schema type names and the Python types a decoded JSON value of that type has.
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
    "object": (dict,),
    "array": (list,),
}


def _snippet(text: str) -> str:
    return repr(text[:_SNIPPET] + ("..." if len(text) > _SNIPPET else ""))


def schema_types(schema: Any) -> set[str]:
    """The JSON types a parameter schema allows (``type``, ``anyOf``/``oneOf``/``allOf``, ``enum``,
    ``const``, a ``$ref`` or ``properties``/``items``); empty when it names none."""
    if not isinstance(schema, Mapping):
        return set()
    found: set[str] = set()
    kind = schema.get("type")
    if isinstance(kind, str):
        found.add(kind)
    elif isinstance(kind, list):
        found.update(k for k in kind if isinstance(k, str))
    for key in ("anyOf", "oneOf", "allOf"):
        members = schema.get(key)
        if isinstance(members, list):
            for member in members:
                found |= schema_types(member)
    if not found:
        enum = schema.get("enum")
        values: list[Any] = enum if isinstance(enum, list) else []
        values = [*values, schema["const"]] if "const" in schema else values
        found.update(_json_type_of(v) for v in values)
    if not found and ("$ref" in schema or "properties" in schema):
        found.add("object")
    if not found and "items" in schema:
        found.add("array")
    return found


def _json_type_of(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    for name, py in _JSON_TYPES.items():
        if isinstance(value, py):
            return name
    return "string"


_SPELLINGS: dict[str, Any] = {"true": True, "false": False, "none": None, "null": None}


class Qwen3CoderParser(TaggedBlockParser):
    """Qwen3-Coder's ``<tool_call><function=NAME><parameter=ARG>VALUE</parameter></function>`` calls.

    Malformed (each a ``"malformed"`` :class:`~agent_gym.tools.ToolCallError`, as for hermes):
    the block scanning errors of :class:`~agent_gym.tools.parsing.TaggedBlockParser`, an empty
    block, a block that does not hold exactly one ``<function=NAME>...</function>``, an unclosed
    ``<function=``/``<parameter=`` tag or a missing ``</parameter>``/``</function>``, a repeated
    parameter, and text between the tags.

    The system prompt offers the tools as ``<function>`` descriptions (name, description,
    parameters with their types) in ``<tools></tools>`` tags (:meth:`describe_tools`).
    """

    name: ClassVar[str] = "qwen3_coder"  # annotated: parsing.py reads it while the two modules import each other

    def __init__(self, tools: Sequence[Mapping[str, Any]] = ()) -> None:
        super().__init__(tools)
        # tool name -> parameter name -> the JSON types its schema allows
        self._types: dict[str, dict[str, set[str]]] = {}
        for schema in self.tools:
            function = function_of(schema)
            params = function.get("parameters") or {}
            props = params.get("properties") if isinstance(params, Mapping) else None
            self._types[str(function.get("name"))] = {
                str(p): schema_types(s) for p, s in (props.items() if isinstance(props, Mapping) else ())
            }

    # -- parsing ------------------------------------------------------------------------------------

    def _decode(self, body: str) -> tuple[str, dict[str, Any]]:
        text = body.strip()
        if not text:
            raise _Malformed(f"empty {self.OPEN} block")
        if not text.startswith(_FUNCTION):
            raise _Malformed(f"a {self.OPEN} block must start with {_FUNCTION}NAME>, got {_snippet(text)}")
        name, pos = self._tag_name(text, len(_FUNCTION), "function")
        arguments: dict[str, Any] = {}
        n = len(text)
        while True:
            while pos < n and text[pos].isspace():
                pos += 1
            if text.startswith(_END_FUNCTION, pos):
                pos += len(_END_FUNCTION)
                break
            if text.startswith(_PARAMETER, pos):
                param, value_start = self._tag_name(text, pos + len(_PARAMETER), "parameter")
                end = text.find(_END_PARAMETER, value_start)
                if end < 0:
                    raise _Malformed(f"parameter {param!r} of {name!r} has no closing {_END_PARAMETER}")
                if param in arguments:
                    raise _Malformed(f"parameter {param!r} of {name!r} is given twice")
                arguments[param] = self._typed(name, param, text[value_start:end])
                pos = end + len(_END_PARAMETER)
                continue
            if pos >= n:
                raise _Malformed(f"{_FUNCTION}{name}> is not closed with {_END_FUNCTION}")
            raise _Malformed(
                f"unexpected text in {_FUNCTION}{name}>: {_snippet(text[pos:])}; "
                f"expected {_PARAMETER}NAME> or {_END_FUNCTION}"
            )
        if text[pos:].strip():
            raise _Malformed(
                f"unexpected text after {_END_FUNCTION}: {_snippet(text[pos:].strip())}; "
                f"write one {_FUNCTION}...> per {self.OPEN} block"
            )
        return name, arguments

    @staticmethod
    def _tag_name(text: str, start: int, what: str) -> tuple[str, int]:
        """The name in ``<function=NAME>`` / ``<parameter=NAME>`` starting at ``start``, and the index
        after the ``>``."""
        end = text.find(">", start)
        newline = text.find("\n", start)
        if end < 0 or (0 <= newline < end):
            raise _Malformed(f"unclosed <{what}= tag: {_snippet(text[start - len(what) - 2 :])}")
        name = text[start:end].strip()
        if not name or "<" in name:
            raise _Malformed(f"<{what}=...> needs a name, got {_snippet(text[start:end])}")
        return name, end + 1

    def _typed(self, tool: str, param: str, raw: str) -> Any:
        value = raw[1:] if raw.startswith("\n") else raw
        value = value[:-1] if value.endswith("\n") else value
        types = self._types.get(tool, {}).get(param)
        if not types or types == {"string"}:
            return value
        stripped = value.strip()
        try:
            decoded = json.loads(stripped)
        except (ValueError, RecursionError):
            lowered = stripped.lower()
            if lowered in _SPELLINGS and _json_type_of(_SPELLINGS[lowered]) in types:
                return _SPELLINGS[lowered]
            return value
        kind = _json_type_of(decoded)
        if kind in types or (kind == "integer" and "number" in types) or "string" not in types:
            return decoded
        return value

    # -- writing ------------------------------------------------------------------------------------

    def format_calls(self, calls: Iterable[ToolCall | Mapping[str, Any]]) -> str:
        """Render calls as Qwen3-Coder writes them (one block per call, joined by newlines).

        String values are written as they are, others as JSON. The format has no escapes, so a
        value holding ``</parameter>`` or a ``<tool_call>``/``</tool_call>`` tag, and a name holding
        ``<``, ``>`` or a line break, cannot be written: they raise ``ValueError``.
        """
        blocks = []
        for call in calls:
            name, arguments = call_parts(call)
            self._check_name(name, "tool")
            lines = [self.OPEN, f"{_FUNCTION}{name}>"]
            for param, value in arguments.items():
                self._check_name(param, "parameter")
                text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
                for tag in (_END_PARAMETER, self.OPEN, self.CLOSE):
                    if tag in text:
                        raise ValueError(
                            f"the value of {param!r} holds {tag}, which the qwen3_coder format cannot write"
                        )
                lines += [f"{_PARAMETER}{param}>", text, _END_PARAMETER]
            lines += [_END_FUNCTION, self.CLOSE]
            blocks.append("\n".join(lines))
        return "\n".join(blocks)

    @staticmethod
    def _check_name(name: Any, what: str) -> None:
        if not isinstance(name, str) or not name.strip() or name != name.strip() or any(c in name for c in "<>\n"):
            raise ValueError(f"{what} name {name!r} cannot be written in the qwen3_coder format")

    # -- the prompt ---------------------------------------------------------------------------------

    def describe_tools(self, tools: Sequence[Mapping[str, Any]] | None = None) -> str:
        """Each tool as a ``<function>`` element (name, description, parameters with type, description
        and any other schema keys as JSON, the required list) in ``<tools></tools>``; ``""`` for none."""
        tools = self.tools if tools is None else tools
        if not tools:
            return ""
        lines = ["<tools>"]
        for schema in tools:
            function = function_of(schema)
            lines += ["<function>", f"<name>{function.get('name', '')}</name>"]
            if function.get("description"):
                lines.append(f"<description>{function['description']}</description>")
            params = function.get("parameters") or {}
            props = params.get("properties") or {}
            lines.append("<parameters>")
            for param, spec in props.items():
                spec = spec if isinstance(spec, Mapping) else {}
                lines += ["<parameter>", f"<name>{param}</name>"]
                types = schema_types(spec)
                if types:
                    lines.append(f"<type>{' | '.join(sorted(types))}</type>")
                if spec.get("description"):
                    lines.append(f"<description>{spec['description']}</description>")
                for key, value in spec.items():
                    if key not in ("type", "description", "title"):
                        lines.append(f"<{key}>{json.dumps(value, ensure_ascii=False)}</{key}>")
                lines.append("</parameter>")
            if params.get("required"):
                lines.append(f"<required>{json.dumps(list(params['required']), ensure_ascii=False)}</required>")
            lines += ["</parameters>", "</function>"]
        lines.append("</tools>")
        return "\n".join(lines)
