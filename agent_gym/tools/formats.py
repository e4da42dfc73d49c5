"""Tool-call formats by name: ``get_parser("hermes")`` and every env's ``tool_format=``.

Built in: ``hermes`` (JSON in ``<tool_call>`` tags, the default, :mod:`agent_gym.tools.parsing`),
``qwen3_coder`` (Qwen3-Coder's ``<function=NAME><parameter=ARG>`` XML, :mod:`agent_gym.tools.qwen3_coder`)
and ``pythonic`` (a Python list of calls, :mod:`agent_gym.tools.pythonic`). :func:`register_parser` adds
one; :func:`get_parser` builds one for a set of tool schemas. The registry sits above the formats'
modules (they share the types of :mod:`agent_gym.tools.parsing` and never import the registry), so
importing any of them registers nothing and needs nothing registered.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agent_gym.tools.parsing import BaseToolCallParser, HermesParser, ToolCallParser
from agent_gym.tools.pythonic import PythonicParser
from agent_gym.tools.qwen3_coder import Qwen3CoderParser

__all__ = ["PARSERS", "ParserFactory", "describe_tools", "get_parser", "register_parser"]

#: A parser factory: a class (or any callable) that builds a parser, given ``tools=`` when it
#: takes that keyword.
ParserFactory = Callable[..., ToolCallParser]

#: Registry of tool-call formats by name.
PARSERS: dict[str, ParserFactory] = {}


def register_parser(
    name: str, factory: ParserFactory | None = None, *, replace: bool = False
) -> Any:
    """Register a tool-call format under ``name``, so that ``get_parser(name)`` and every env's
    ``tool_format=name`` use it.

    ``factory`` builds the parser: usually a class implementing :class:`ToolCallParser` (subclass
    :class:`BaseToolCallParser` or :class:`TaggedBlockParser` to inherit the schema keeping and the
    hermes-style :meth:`~BaseToolCallParser.describe_tools`). It is called with ``tools=`` (the
    OpenAI schemas of the env's tools) when it accepts that keyword, else with no arguments.
    Without ``factory`` this is a class decorator::

        @register_parser("my_format")
        class MyParser(BaseToolCallParser): ...

    Raises:
        ValueError: ``name`` is empty or already registered (pass ``replace=True`` to override).
        TypeError: ``factory`` is not callable.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a tool-call format needs a non-empty name, got {name!r}")

    def add(f: ParserFactory) -> ParserFactory:
        if not callable(f):
            raise TypeError(f"the parser of tool-call format {name!r} must be a class or callable, got {f!r}")
        if name in PARSERS and PARSERS[name] is not f and not replace:
            raise ValueError(f"tool-call format {name!r} is already registered; pass replace=True to override it")
        PARSERS[name] = f
        return f

    return add if factory is None else add(factory)


def _accepts_tools(factory: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature
        return False
    return any(p.name == "tools" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def get_parser(name: str | ToolCallParser, tools: Sequence[Mapping[str, Any]] = ()) -> ToolCallParser:
    """The parser of format ``name`` for the tools with these OpenAI schemas.

    A parser object (anything with ``parse`` and ``format_calls``) is returned as it is.

    Raises:
        ValueError: If no such format is registered, or the format cannot express these tools
            (``pythonic`` needs tool and argument names that are Python identifiers).
    """
    if not isinstance(name, str) and callable(getattr(name, "parse", None)) and callable(
        getattr(name, "format_calls", None)
    ):
        return name
    if not isinstance(name, str) or name not in PARSERS:
        known = ", ".join(sorted(PARSERS))
        raise ValueError(f"unknown tool-call format {name!r}; known: {known}")
    factory = PARSERS[name]
    return factory(tools=list(tools)) if _accepts_tools(factory) else factory()


def describe_tools(parser: ToolCallParser, tools: Sequence[Mapping[str, Any]]) -> str:
    """``parser.describe_tools(tools)``, or the hermes-style JSON lines for a parser without one."""
    describe = getattr(parser, "describe_tools", None)
    if callable(describe):
        return describe(list(tools))
    return BaseToolCallParser.describe_tools(BaseToolCallParser(), list(tools))


register_parser(HermesParser.name, HermesParser)
register_parser(Qwen3CoderParser.name, Qwen3CoderParser)
register_parser(PythonicParser.name, PythonicParser)
