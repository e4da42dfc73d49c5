"""The ``pythonic`` tool-call format: a Python list of keyword-argument calls.

As Llama 3.2 and Gemma-style prompts ask for, the policy writes its calls as one Python list::

    [calculate(expression="2 + 3 * 4"), lookup(city="Paris", days=3)]

A ``[`` directly followed by a name and ``(`` (``[name(``) starts a call list anywhere in the text;
it runs to its matching ``]`` (brackets inside strings and comments do not count) and is removed
from the content. The list is read with :func:`ast.parse`, never evaluated: each element must be a
call of a plain name with keyword arguments whose values are literals (strings, numbers,
``True``/``False``/``None`` or JSON's ``true``/``false``/``null``, and lists, tuples and dicts of
them; a dict's keys are strings). Anything else is a ``"malformed"``
:class:`~agent_gym.tools.ToolCallError`, as for hermes: a list that is never closed, invalid
Python, an element that is not such a call, positional or ``**`` arguments, a repeated argument, a
value that is not a literal (a name, an operation, an f-string, bytes, a set).

String literals are decoded here rather than by Python's parser: parsing escapes such as ``"\\d"``
makes CPython emit a warning on every parse, and warning filters are process-wide state that tool
threads cannot change safely.

The system prompt offers the tools as Python function signatures with docstrings
(:meth:`PythonicParser.describe_tools`), so tool and argument names must be Python identifiers.
"""

from __future__ import annotations

import ast
import json
import keyword
import math
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

from agent_gym.tools.parsing import (
    BaseToolCallParser,
    ParsedResponse,
    ToolCall,
    ToolCallError,
    _Malformed,
    call_parts,
    function_of,
)

__all__ = ["PythonicParser"]

# "[" + a (possibly dotted, to report it) name + "(": the start of a call list.
_CALL_START = re.compile(r"\[\s*[^\W\d][\w.]*\(")
# The characters the bracket scanner stops at.
_SPECIAL = re.compile(r"[()\[\]{}'\"#]")
_CLOSERS = {")": "(", "]": "[", "}": "{"}
_STRING_PREFIXES = {"r", "u", "b", "f", "rb", "br", "fr", "rf"}
# The end of a string body: an escape (skipped), the closing quote(s), or (single-quoted) a line break.
_STRING_END = {
    (q, triple): re.compile(r"\\.|" + (q * 3 if triple else q + r"|\n"), re.S) for q in "'\"" for triple in (False, True)
}
_ESCAPE = re.compile(r"\\(?:[0-7]{1,3}|x[0-9a-fA-F]{0,2}|u[0-9a-fA-F]{0,4}|U[0-9a-fA-F]{0,8}|N(?:\{[^}\n]*\})?|.)", re.S)
_SIMPLE_ESCAPES = {
    "\n": "", "\\": "\\", "'": "'", '"': '"', "a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
}
_JSON_NAMES = {"true": True, "false": False, "null": None}
# A number literal directly followed by a keyword ("1if", "0x1for") makes CPython's tokenizer warn on
# every parse; digits inside a name ("md5_for") are not a number.
_NUMBER_BEFORE_KEYWORD = re.compile(
    r"(?:(?<!\w)(?:0[xXoObB][0-9a-fA-F_]*|[0-9][0-9_]*(?:\.[0-9_]*)?(?:[eE][+-]?[0-9_]*)?[jJ]?)"
    r"|\.[0-9][0-9_]*(?:[eE][+-]?[0-9_]*)?[jJ]?)"  # ".5" is a number even right after a name ("x.5")
    r"(?=and|else|for|if|in|is|not|or)"
)
_SNIPPET = 40
_PY_TYPES = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "None", "object": "dict", "array": "list"}


def _snippet(text: str) -> str:
    return repr(text[:_SNIPPET] + ("..." if len(text) > _SNIPPET else ""))


class _Scan:
    """Where a call list starting at a ``[`` ends, and the string literals inside it."""

    __slots__ = ("end", "strings", "problem")

    def __init__(self, end: int, strings: list[tuple[int, int]], problem: str | None):
        self.end = end  # index after the list (or where scanning stopped)
        self.strings = strings  # (start, end) of each string literal, prefix and quotes included
        self.problem = problem  # None: a complete bracketed candidate


def _scan(text: str, start: int) -> _Scan:
    stack: list[str] = []
    strings: list[tuple[int, int]] = []
    pos, n = start, len(text)
    while True:
        match = _SPECIAL.search(text, pos)
        if match is None:
            return _Scan(n, strings, "unterminated call list (missing ])")
        i, c = match.start(), match.group()
        if c in "([{":
            stack.append(c)
            pos = i + 1
        elif c in _CLOSERS:
            if not stack or stack[-1] != _CLOSERS[c]:
                return _Scan(i + 1, strings, None)  # a mismatched bracket: ast.parse says which
            stack.pop()
            pos = i + 1
            if not stack:
                return _Scan(pos, strings, None)
        elif c == "#":
            newline = text.find("\n", i)
            pos = n if newline < 0 else newline
        else:
            begin = i
            while begin > start and i - begin < 2 and text[begin - 1].isalpha():
                begin -= 1
            if text[begin:i].lower() not in _STRING_PREFIXES or (begin > start and (text[begin - 1].isalnum() or text[begin - 1] == "_")):
                begin = i
            triple = text.startswith(c * 3, i)
            pattern = _STRING_END[(c, triple)]
            pos = i + (3 if triple else 1)
            while True:
                end = pattern.search(text, pos)
                if end is None or end.group() == "\n":
                    stop = n if end is None else end.start()
                    return _Scan(stop, strings, "unterminated string literal in the call list")
                pos = end.end()
                if not end.group().startswith("\\"):
                    break
            strings.append((begin, pos))


def _decode_string(literal: str) -> str:
    prefix_len = 0
    while literal[prefix_len] not in "'\"":
        prefix_len += 1
    prefix = literal[:prefix_len].lower()
    if "f" in prefix:
        raise _Malformed("f-strings are not literal values; write a plain string")
    if "b" in prefix:
        raise _Malformed("bytes literals are not allowed; write a string")
    quotes = 3 if literal.startswith(literal[prefix_len] * 3, prefix_len) and len(literal) - prefix_len >= 6 else 1
    body = literal[prefix_len + quotes : len(literal) - quotes]
    if "r" in prefix:
        return body
    return _ESCAPE.sub(_unescape, body)


def _unescape(match: re.Match[str]) -> str:
    escape = match.group()[1:]
    head = escape[:1]
    if head in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[head]
    if head in "01234567":
        return chr(int(escape, 8))
    if head in ("x", "u", "U"):
        digits = {"x": 2, "u": 4, "U": 8}[head]
        if len(escape) != digits + 1:
            raise _Malformed(f"truncated \\{head} escape in a string: \\{escape}")
        code = int(escape[1:], 16)
        if code > 0x10FFFF:
            raise _Malformed(f"\\{escape} is not a Unicode character")
        return chr(code)
    if head == "N":
        if not escape.startswith("N{"):
            raise _Malformed("malformed \\N escape in a string; write \\N{NAME}")
        try:
            return unicodedata.lookup(escape[2:-1])
        except KeyError:
            raise _Malformed(f"unknown Unicode character name in \\{escape}") from None
    return "\\" + escape  # an unknown escape keeps its backslash, as in Python


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    parts.append(node.id if isinstance(node, ast.Name) else "...")
    return ".".join(reversed(parts))


class PythonicParser(BaseToolCallParser):
    """Calls written as a Python list: ``[name(arg=value, ...), ...]`` (see the module docstring).

    Args:
        tools: the tools' OpenAI schemas; their names and argument names must be Python identifiers
            (not keywords), since the prompt shows them as Python functions.

    Raises:
        ValueError: a tool or argument name is not a Python identifier.
    """

    name: ClassVar[str] = "pythonic"  # annotated: parsing.py reads it while the two modules import each other

    def __init__(self, tools: Sequence[Mapping[str, Any]] = ()) -> None:
        super().__init__(tools)
        for schema in self.tools:
            function = function_of(schema)
            tool = function.get("name")
            self._check_name(tool, "tool name")
            props = (function.get("parameters") or {}).get("properties") or {}
            for param in props:
                self._check_name(param, f"argument name of {tool!r}")

    @staticmethod
    def _check_name(name: Any, what: str) -> None:
        if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
            raise ValueError(f"{what} {name!r} cannot be used in the pythonic tool-call format: it is not a Python identifier")

    # -- parsing ------------------------------------------------------------------------------------

    def parse(self, text: str) -> ParsedResponse:
        """Parse one assistant turn.  Never raises, whatever ``text`` is."""
        if not isinstance(text, str):
            text = "" if text is None else str(text)
        content: list[str] = []
        calls: list[ToolCall] = []
        errors: list[ToolCallError] = []
        cursor = 0
        while True:
            match = _CALL_START.search(text, cursor)
            if match is None:
                break
            start = match.start()
            content.append(text[cursor:start])
            scan = _scan(text, start)
            raw = text[start : scan.end]
            try:
                if scan.problem is not None:
                    raise _Malformed(scan.problem)
                found = self._read_list(text, start, scan)
            except _Malformed as exc:
                errors.append(ToolCallError(raw=raw, kind="malformed", message=str(exc)))
            except (RecursionError, MemoryError, ValueError, OverflowError) as exc:
                errors.append(ToolCallError(raw=raw, kind="malformed", message=f"unreadable call list ({type(exc).__name__})"))
            else:
                for name, arguments in found:
                    calls.append(ToolCall(id=f"call_{len(calls)}", name=name, arguments=arguments, raw=raw))
            cursor = scan.end
        content.append(text[cursor:])
        return ParsedResponse(content="".join(content).strip(), calls=tuple(calls), errors=tuple(errors))

    def _read_list(self, text: str, start: int, scan: _Scan) -> list[tuple[str, dict[str, Any]]]:
        # Every string literal becomes a placeholder name (decoded here; see the module docstring).
        source = text[start : scan.end]
        base = "_s"
        while base in source:
            base += "_"
        pieces: list[str] = []
        values: dict[str, str] = {}
        cursor = start
        placeholder = ""  # the name of the last literal, extended by the adjacent ones after it
        for s_start, s_end in scan.strings:
            value = _decode_string(text[s_start:s_end])
            if values and not text[cursor:s_start].strip():
                values[placeholder] += value  # adjacent literals are one string, as in Python
            else:
                placeholder = f"{base}{len(values)}"
                values[placeholder] = value
                pieces += [text[cursor:s_start], f" {placeholder} "]
            cursor = s_end
        pieces.append(text[cursor : scan.end])
        code = "".join(pieces)
        if _NUMBER_BEFORE_KEYWORD.search(code):
            # CPython warns on "1if"-style text at every parse; it is never a valid call anyway.
            raise _Malformed("invalid Python in the call list: a number is directly followed by a word")
        try:
            tree = ast.parse(code, mode="eval")
        except SyntaxError as exc:
            detail = "a number has too many digits" if "integer string conversion" in str(exc.msg) else exc.msg
            raise _Malformed(f"invalid Python in the call list: {detail}") from None
        body = tree.body
        if not isinstance(body, ast.List):
            raise _Malformed("the call list must be a plain list of calls, like [name(arg=value)]")
        found = []
        for index, element in enumerate(body.elts, 1):
            if not isinstance(element, ast.Call):
                raise _Malformed(f"element {index} of the call list is not a call like name(arg=value)")
            if not isinstance(element.func, ast.Name):
                raise _Malformed(f"element {index} calls {_dotted(element.func)!r}: a tool is called by its plain name")
            name = element.func.id
            if name in values:
                raise _Malformed(f"element {index} of the call list calls a string, not a tool")
            if element.args:
                raise _Malformed(f"arguments of {name!r} must be given by keyword, like {name}(arg=value)")
            arguments: dict[str, Any] = {}
            for kw in element.keywords:
                if kw.arg is None:
                    raise _Malformed(f"**arguments are not allowed in a call of {name!r}; name each argument")
                if kw.arg in arguments:
                    raise _Malformed(f"argument {kw.arg!r} of {name!r} is given twice")
                arguments[kw.arg] = self._literal(kw.value, values, name, kw.arg)
            found.append((name, arguments))
        return found

    def _literal(self, node: ast.AST, strings: Mapping[str, str], tool: str, arg: str) -> Any:
        if isinstance(node, ast.Name):
            if node.id in strings:
                return strings[node.id]
            if node.id in _JSON_NAMES:
                return _JSON_NAMES[node.id]
            raise _Malformed(f"argument {arg!r} of {tool!r} is the name {node.id}, not a literal value; quote strings")
        if isinstance(node, ast.Constant) and (node.value is None or type(node.value) in (bool, int, float)):
            return node.value
        if (
            isinstance(node, ast.UnaryOp)
            and isinstance(node.op, (ast.USub, ast.UAdd))
            and isinstance(node.operand, ast.Constant)
            and isinstance(number := node.operand.value, (int, float))
            and not isinstance(number, bool)
        ):
            return -number if isinstance(node.op, ast.USub) else number
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self._literal(e, strings, tool, arg) for e in node.elts]
        if isinstance(node, ast.Dict):
            result: dict[str, Any] = {}
            for key, value in zip(node.keys, node.values):
                if not (isinstance(key, ast.Name) and key.id in strings):
                    raise _Malformed(f"argument {arg!r} of {tool!r}: dict keys must be strings")
                result[strings[key.id]] = self._literal(value, strings, tool, arg)
            return result
        what = type(node.value).__name__ if isinstance(node, ast.Constant) else type(node).__name__
        raise _Malformed(
            f"argument {arg!r} of {tool!r} is not a literal value ({what}); use strings, numbers, True/False/None, lists and dicts"
        )

    # -- writing ------------------------------------------------------------------------------------

    def format_calls(self, calls: Iterable[ToolCall | Mapping[str, Any]]) -> str:
        """Render calls as one Python list (``""`` for no calls); ``parse`` reads back the same names
        and arguments (tuples come back as lists).

        Raises:
            ValueError: a name is not a Python identifier, or a value has no literal (a non-string
                dict key, an infinite or NaN number, an object).
        """
        written = []
        for call in calls:
            name, arguments = call_parts(call)
            self._check_name(name, "tool name")
            args = []
            for key, value in arguments.items():
                self._check_name(key, f"argument name of {name!r}")
                args.append(f"{key}={_literal_text(value)}")
            written.append(f"{name}({', '.join(args)})")
        return f"[{', '.join(written)}]" if written else ""

    # -- the prompt ---------------------------------------------------------------------------------

    def describe_tools(self, tools: Sequence[Mapping[str, Any]] | None = None) -> str:
        """Each tool as a Python ``def`` with typed arguments (required ones first; optional ones with
        their default, else ``None``) and a docstring of its description and ``Args:``; ``""`` for
        no tools."""
        tools = self.tools if tools is None else tools
        return "\n\n".join(_signature(function_of(t)) for t in tools)


def _literal_text(value: Any) -> str:
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # JSON's string escapes are all Python escapes
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} has no literal in the pythonic tool-call format")
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_literal_text(v) for v in value) + "]"
    if isinstance(value, Mapping):
        items = []
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"dict key {key!r} is not a string; the pythonic tool-call format writes JSON-like values")
            items.append(f"{json.dumps(key, ensure_ascii=False)}: {_literal_text(item)}")
        return "{" + ", ".join(items) + "}"
    raise ValueError(f"{type(value).__name__} value {value!r} has no literal in the pythonic tool-call format")


def _annotation(schema: Any) -> str:
    if not isinstance(schema, Mapping):
        return "Any"
    if isinstance(schema.get("enum"), list):
        return "Literal[" + ", ".join(_literal_text(v) if _is_literal(v) else repr(v) for v in schema["enum"]) + "]"
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return " | ".join(dict.fromkeys(_annotation(m) for m in schema[key]))
    if isinstance(schema.get("$ref"), str):
        return schema["$ref"].rsplit("/", 1)[-1]
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(dict.fromkeys(_annotation({**schema, "type": k}) for k in kind))
    if kind == "array" and isinstance(schema.get("items"), Mapping):
        return f"list[{_annotation(schema['items'])}]"
    if kind == "object" and isinstance(schema.get("additionalProperties"), Mapping):
        return f"dict[str, {_annotation(schema['additionalProperties'])}]"
    return _PY_TYPES.get(kind, "Any") if isinstance(kind, str) else "Any"


def _is_literal(value: Any) -> bool:
    try:
        _literal_text(value)
    except ValueError:
        return False
    return True


def _signature(function: Mapping[str, Any]) -> str:
    params = function.get("parameters") or {}
    props: Mapping[str, Any] = params.get("properties") or {}
    required = [p for p in props if p in set(params.get("required") or ())]
    optional = [p for p in props if p not in required]
    args = []
    for param in required + optional:
        spec = props[param] if isinstance(props[param], Mapping) else {}
        arg = f"{param}: {_annotation(spec)}"
        if param in optional:
            default = spec.get("default")
            arg += f" = {_literal_text(default) if _is_literal(default) else 'None'}"
        args.append(arg)
    doc = [str(function.get("description") or "").strip()]
    documented = [(p, str(props[p].get("description")).strip()) for p in required + optional
                  if isinstance(props[p], Mapping) and props[p].get("description")]
    if documented:
        doc += ["", "Args:"] + [f"    {p}: {d}" for p, d in documented]
    doc_text = "\n".join(doc).strip().replace('"""', '\\"\\"\\"')
    if doc_text.endswith('"'):
        doc_text += " "  # a quote right before the closing quotes would end the docstring early
    doc_lines = doc_text.split("\n") if doc_text else []
    lines = [f"def {function.get('name', '')}({', '.join(args)}):"]
    if not doc_lines:
        lines.append("    ...")
    elif len(doc_lines) == 1:
        lines.append(f'    """{doc_lines[0]}"""')
    else:
        lines.append(f'    """{doc_lines[0]}')
        lines += [f"    {line}" if line else "" for line in doc_lines[1:]]
        lines.append('    """')
    return "\n".join(lines)
