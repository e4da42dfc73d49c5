"""Core tool abstraction: a named callable with a pydantic argument model.

A :class:`Tool` couples three things an LLM-agent environment needs:

* an OpenAI-style *function schema* to show the policy (``Tool.schema()``),
* *validation* of the arguments the policy produced (``Tool.validate()``),
* an *async invocation* that never blocks the event loop (``Tool.acall()``).

Tools are usually built with the :func:`tool` decorator, which derives the
argument model from the function signature and its Google-style docstring::

    @tool(timeout_s=2.0)
    def add(a: int, b: int = 1) -> int:
        \"\"\"Add two integers.

        Args:
            a: The first addend.
            b: The second addend.
        \"\"\"
        return a + b

A tool can also be written as a subclass of :class:`Tool` with an explicit
argument model (see the class docstring).
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import inspect
import json
import re
import threading
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, overload

import pydantic
from pydantic import BaseModel, ConfigDict

__all__ = ["Tool", "ToolError", "tool"]

# OpenAI (and most chat templates) only accept these characters in function names.
_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

# Sentinel distinguishing "not passed" from an explicit ``timeout_s=None`` (no timeout).
_UNSET: Any = object()

_T = TypeVar("_T")


class ToolError(Exception):
    """An error whose message is written for the policy, not for a developer.

    The executor reports these as ``"Error: <message>"`` without the exception
    class name, so tools can give the model clean, actionable feedback (for
    example ``"division by zero"``).  Any other exception class can opt into the
    same treatment by defining a class attribute ``user_message = True``.

    ``kind`` names the error in ``info["tool_error_kinds"]`` (``"empty_query"``, ``"not_verified"``, ...);
    without one it counts as ``"exception"``. An opted-in exception class may carry a ``kind`` too.
    """

    user_message: typing.ClassVar[bool] = True
    kind: str | None = None

    def __init__(self, message: str = "", *, kind: str | None = None):
        super().__init__(message)
        if kind is not None:
            self.kind = kind


class Tool:
    """A callable tool exposed to an LLM policy.

    Attributes:
        name: Function name shown to the model (``[A-Za-z0-9_-]{1,64}``).
        description: What the tool does, shown to the model.
        args_model: Pydantic model describing (and validating) the arguments.
            Unknown arguments are always rejected, so the model matches the
            advertised schema (``additionalProperties: false``); if the given
            model does not already forbid extras, a subclass that does is used.
        fn: The implementation, called with the validated fields as keyword
            arguments.  It may be sync (run in a worker thread) or async.
        timeout_s: Seconds the executor waits for one call, or ``None`` for no
            limit.

    Two ways to build one besides the :func:`tool` decorator::

        Tool(name="echo", description="Echo text.", args_model=EchoArgs, fn=echo)

        class Echo(Tool):
            name = "echo"
            description = "Echo text."
            args_model = EchoArgs
            timeout_s = 1.0

            async def run(self, text: str) -> str:
                return text

    In the subclass form, constructor arguments override class attributes and
    ``fn`` defaults to the overridden :meth:`run` method.
    """

    name: str
    description: str
    args_model: type[BaseModel]
    fn: Callable[..., Any]
    timeout_s: float | None = 10.0
    inline: bool = False

    def __init__(
        self,
        name: str | None = None,
        description: str | None = None,
        args_model: type[BaseModel] | None = None,
        fn: Callable[..., Any] | None = None,
        timeout_s: float | None = _UNSET,
        inline: bool | None = None,
    ) -> None:
        cls = type(self)
        # Constructor arguments win; otherwise fall back to class attributes so
        # that the declarative subclass form works without calling super().__init__
        # with every field.
        resolved_name = name if name is not None else getattr(cls, "name", None)
        if not isinstance(resolved_name, str) or not _NAME_RE.match(resolved_name):
            raise ValueError(
                f"invalid tool name {resolved_name!r}: tool names must match [A-Za-z0-9_-]{{1,64}}"
            )
        resolved_description = (
            description if description is not None else getattr(cls, "description", "")
        )
        if not isinstance(resolved_description, str):
            raise TypeError(f"tool {resolved_name!r}: description must be a str")
        model = args_model if args_model is not None else getattr(cls, "args_model", None)
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise TypeError(
                f"tool {resolved_name!r}: args_model must be a pydantic BaseModel subclass, got {model!r}"
            )
        if fn is None:
            if cls.run is Tool.run:
                raise TypeError(
                    f"tool {resolved_name!r}: pass fn=... or override the run() method"
                )
            fn = self.run
        if not callable(fn):
            raise TypeError(f"tool {resolved_name!r}: fn must be callable, got {fn!r}")
        resolved_timeout = cls.timeout_s if timeout_s is _UNSET else timeout_s
        if resolved_timeout is not None:
            if isinstance(resolved_timeout, bool) or not isinstance(resolved_timeout, (int, float)):
                raise TypeError(f"tool {resolved_name!r}: timeout_s must be a number or None")
            if not resolved_timeout > 0:
                raise ValueError(f"tool {resolved_name!r}: timeout_s must be positive or None")
            resolved_timeout = float(resolved_timeout)

        self.name = resolved_name
        self.description = resolved_description
        self.args_model = _forbid_extra(model)
        self.fn = fn
        self.timeout_s = resolved_timeout
        self.inline = bool(cls.inline if inline is None else inline)
        if self.inline and _is_async_callable(fn):
            raise ValueError(f"tool {resolved_name!r}: inline=True is for sync functions; async tools never block")
        # Built eagerly so that a tool whose arguments cannot be expressed as JSON
        # schema fails when it is defined, not in the middle of a rollout.
        self._parameters = _build_parameters(self.args_model)

    def run(self, **kwargs: Any) -> Any:
        """Implementation hook for subclass-style tools (sync or ``async def``)."""
        raise NotImplementedError

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly, bypassing validation.

        This keeps a decorated function usable as plain Python (in tests, or
        from other tools).
        """
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, timeout_s={self.timeout_s!r})"

    def schema(self) -> dict[str, Any]:
        """Return the OpenAI function-calling schema for this tool.

        The result has the form ``{"type": "function", "function": {"name",
        "description", "parameters"}}``; ``parameters`` is the JSON schema of
        :attr:`args_model` without pydantic's auto-generated ``title`` keys,
        always with a ``required`` list and ``additionalProperties: false``.
        A fresh copy is returned, so callers may mutate it.
        """
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": copy.deepcopy(self._parameters),
            },
        }

    def validate(self, arguments: Mapping[str, Any]) -> BaseModel:
        """Validate raw arguments (as decoded from the model's JSON).

        Raises:
            pydantic.ValidationError: If the arguments do not match the model,
                including unknown argument names.
        """
        return self.args_model.model_validate(arguments)

    async def acall(self, arguments: Mapping[str, Any]) -> str:
        """Validate ``arguments``, run the tool and return its output as text.

        Raises:
            pydantic.ValidationError: If the arguments are invalid.
            Exception: Whatever the tool itself raises.
        """
        return await self.ainvoke(self.validate(arguments))

    async def ainvoke(self, args: BaseModel) -> str:
        """Run the tool on already validated arguments and return its output as text.

        Async functions are awaited on the running loop.  Sync functions run in
        a dedicated daemon thread so a blocking tool never stalls the event loop
        (see :func:`_run_in_thread` for why not ``asyncio.to_thread``).
        """
        # Read the attributes rather than model_dump(): nested models and other
        # rich values reach the function exactly as pydantic built them.
        kwargs = {field: getattr(args, field) for field in type(args).model_fields}
        if _is_async_callable(self.fn):
            result = await self.fn(**kwargs)
        else:
            result = await _run_in_thread(self.fn, kwargs, thread_name=f"tool-{self.name}")
            # A sync-looking callable may still hand back an awaitable (e.g. a
            # partial of an async function); finish it on the loop.
            if inspect.isawaitable(result):
                result = await result
        return _to_text(result)

    def invoke_inline(self, args: BaseModel) -> str:
        """Run an ``inline`` tool in the calling thread (no thread hop, no timeout)."""
        kwargs = {field: getattr(args, field) for field in type(args).model_fields}
        return _to_text(self.fn(**kwargs))


def _is_async_callable(fn: Callable[..., Any]) -> bool:
    """True for coroutine functions, including ones wrapped in partials or callable objects."""
    # iscoroutinefunction already sees through functools.partial and bound methods.
    if inspect.iscoroutinefunction(fn):
        return True
    # Callable objects with an ``async def __call__``.
    return not inspect.isroutine(fn) and inspect.iscoroutinefunction(
        getattr(type(fn), "__call__", None)
    )


async def _run_in_thread(
    fn: Callable[..., _T], kwargs: dict[str, Any], *, thread_name: str
) -> _T:
    """Run a blocking ``fn(**kwargs)`` in a fresh daemon thread and await its result.

    Why not ``asyncio.to_thread``: that uses the loop's default executor, and
    ``asyncio.run`` joins those threads on shutdown, so one timed-out tool that
    keeps sleeping would hold ``ToolExecutor.execute`` until it finishes anyway;
    a few hung tools would also exhaust the bounded shared pool and starve every
    later call.  A per-call daemon thread is abandoned cleanly on timeout (it
    cannot be killed; its result is discarded) and never blocks interpreter exit.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[_T] = loop.create_future()
    # Propagate context variables, as asyncio.to_thread does.
    context = contextvars.copy_context()

    def deliver(setter: Callable[[Any], None], value: Any) -> None:
        # The awaiting side may have given up (timeout / cancellation).
        if not future.done():
            setter(value)

    def runner() -> None:
        outcome: tuple[Callable[[Any], None], Any]
        try:
            result = context.run(fn, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - forwarded to the awaiting coroutine
            if isinstance(exc, StopIteration):
                # Futures refuse StopIteration; without this the caller would hang.
                exc = RuntimeError(f"tool raised StopIteration: {exc}")
            outcome = (future.set_exception, exc)
        else:
            outcome = (future.set_result, result)
        try:
            loop.call_soon_threadsafe(deliver, *outcome)
        except RuntimeError:
            # The loop is already closed: nobody is waiting for this result.
            pass

    threading.Thread(target=runner, name=thread_name, daemon=True).start()
    return await future


def _to_text(result: Any) -> str:
    """Render a tool's return value as the text the policy will read."""
    if isinstance(result, str):
        return result
    if isinstance(result, BaseModel):
        return result.model_dump_json()
    if isinstance(result, (dict, list, tuple)):
        # default=str keeps odd values (dates, paths) from turning a successful
        # call into an error.
        return json.dumps(result, ensure_ascii=False, default=str)
    return str(result)


def _forbid_extra(model: type[BaseModel]) -> type[BaseModel]:
    """Return ``model`` itself if it forbids extra fields, else a subclass that does."""
    if model.model_config.get("extra") == "forbid":
        return model
    namespace = {
        "model_config": ConfigDict(extra="forbid"),
        "__module__": model.__module__,
        # pydantic puts the class docstring into the schema; keep it identical.
        "__doc__": model.__doc__,
        "__qualname__": model.__qualname__,
    }
    return typing.cast("type[BaseModel]", type(model.__name__, (model,), namespace))


# Keys of a JSON-schema object whose values are themselves schemas (or maps /
# lists of schemas).  Used to strip "title" only where it is a schema keyword,
# never where it is the name of a property.
_SUBSCHEMA_KEYS = ("items", "additionalProperties", "not", "contains", "propertyNames")
_SUBSCHEMA_LIST_KEYS = ("anyOf", "allOf", "oneOf", "prefixItems")
_SUBSCHEMA_MAP_KEYS = ("properties", "$defs", "definitions", "patternProperties")


def _strip_titles(schema: Any) -> Any:
    """Remove pydantic's auto-generated ``title`` keywords from a JSON schema.

    Titles like ``"Expression"`` are noise in the prompt and are not part of
    the OpenAI function format.
    """
    if not isinstance(schema, dict):
        return schema
    cleaned = {key: value for key, value in schema.items() if key != "title"}
    for key in _SUBSCHEMA_KEYS:
        if isinstance(cleaned.get(key), dict):
            cleaned[key] = _strip_titles(cleaned[key])
    for key in _SUBSCHEMA_LIST_KEYS:
        if isinstance(cleaned.get(key), list):
            cleaned[key] = [_strip_titles(item) for item in cleaned[key]]
    for key in _SUBSCHEMA_MAP_KEYS:
        if isinstance(cleaned.get(key), dict):
            cleaned[key] = {name: _strip_titles(sub) for name, sub in cleaned[key].items()}
    return cleaned


def _build_parameters(model: type[BaseModel]) -> dict[str, Any]:
    parameters: dict[str, Any] = _strip_titles(model.model_json_schema())
    parameters.setdefault("type", "object")
    parameters.setdefault("properties", {})
    # pydantic omits "required" when nothing is required; some templates and
    # strict-mode validators expect the key to exist.
    parameters.setdefault("required", [])
    parameters["additionalProperties"] = False
    return parameters


# --------------------------------------------------------------------------- decorator

_SECTION_RE = re.compile(r"^\s*([A-Z][A-Za-z ]*):\s*$")
_ARGS_SECTIONS = frozenset({"Args", "Arguments", "Parameters", "Params"})
_ARG_LINE_RE = re.compile(r"^\s*\**(?P<name>\w+)\s*(?:\([^)]*\))?\s*:(?P<desc>.*)$")


def _split_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (summary paragraph, {param: description})."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()

    summary_lines: list[str] = []
    for line in lines:
        # The summary is the first paragraph, and never runs into a section.
        if not line.strip() or _SECTION_RE.match(line):
            break
        summary_lines.append(line.strip())
    summary = " ".join(summary_lines)

    params: dict[str, str] = {}
    in_args = False
    section_indent = 0
    entry_indent: int | None = None
    current: str | None = None
    for line in lines:
        indent = len(line) - len(line.lstrip())
        header = _SECTION_RE.match(line)
        if header and (not in_args or indent <= section_indent):
            in_args = header.group(1).strip() in _ARGS_SECTIONS
            section_indent, entry_indent, current = indent, None, None
            continue
        if not in_args:
            continue
        if not line.strip():
            continue
        if indent <= section_indent:  # dedent ends the section (e.g. trailing prose)
            in_args, current = False, None
            continue
        if entry_indent is None:
            entry_indent = indent
        match = _ARG_LINE_RE.match(line)
        if indent == entry_indent and match:
            current = match.group("name")
            params[current] = match.group("desc").strip()
        elif current is not None and indent > entry_indent:
            # Continuation line of the previous parameter's description.
            params[current] = f"{params[current]} {line.strip()}".strip()
    return summary, params


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part) or "Tool"


def _model_from_signature(fn: Callable[..., Any], tool_name: str) -> type[BaseModel]:
    """Build a pydantic model whose fields mirror ``fn``'s parameters."""
    signature = inspect.signature(fn)
    try:
        # include_extras keeps Annotated[..., Field(...)] constraints; resolving
        # here also handles `from __future__ import annotations` string hints.
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:  # NameError for unresolvable forward references, etc.
        raise TypeError(f"tool {tool_name!r}: cannot resolve type hints: {exc}") from exc
    _, param_docs = _split_docstring(inspect.getdoc(fn))

    fields: dict[str, Any] = {}
    for param in signature.parameters.values():
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            star = "*" if param.kind is inspect.Parameter.VAR_POSITIONAL else "**"
            raise TypeError(
                f"tool {tool_name!r}: parameter '{star}{param.name}' is not supported; "
                "tool parameters must be named and typed so a schema can be generated"
            )
        if param.kind is inspect.Parameter.POSITIONAL_ONLY:
            # Tools are called with keyword arguments (the model sends a JSON object).
            raise TypeError(
                f"tool {tool_name!r}: parameter {param.name!r} is positional-only; "
                "tool parameters must be passable by keyword"
            )
        if param.name not in hints:
            raise TypeError(
                f"tool {tool_name!r}: parameter {param.name!r} has no type hint; "
                "every tool parameter needs one so the argument schema can be generated"
            )
        if param.name.startswith("_"):
            # pydantic treats underscore names as private attributes, not fields.
            raise TypeError(
                f"tool {tool_name!r}: parameter {param.name!r} must not start with an underscore"
            )
        default = ... if param.default is inspect.Parameter.empty else param.default
        field = pydantic.Field(default, description=param_docs.get(param.name))
        fields[param.name] = (hints[param.name], field)

    return pydantic.create_model(
        f"{_camel(tool_name)}Args",
        __config__=ConfigDict(extra="forbid"),
        __module__=getattr(fn, "__module__", None) or __name__,
        **fields,
    )


@overload
def tool(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = 10.0,
    inline: bool = False,
) -> Tool: ...


@overload
def tool(
    fn: None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = 10.0,
    inline: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = 10.0,
    inline: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a typed function into a :class:`Tool`.

    Usable bare (``@tool``) or with options (``@tool(timeout_s=2)``).  The
    argument model is generated from the signature: every parameter needs a
    type hint; defaults make a parameter optional.  The description defaults to
    the docstring's first paragraph and each parameter's description comes from
    the docstring's Google-style ``Args:`` section.

    Args:
        fn: The function to wrap (sync or ``async def``).
        name: Tool name; defaults to ``fn.__name__``.
        description: Tool description; defaults to the docstring summary.
        timeout_s: Per-call time limit in seconds, or ``None`` for none.
        inline: The function is fast and bounded (pure CPU work that enforces its own
            input limits, like the calculator): call it directly in the calling thread,
            with no thread hop and no timeout. Microsecond tools would otherwise pay
            more for the thread than for the work.

    Raises:
        TypeError: If a parameter lacks a type hint, is ``*args``/``**kwargs``
            or positional-only.
    """

    def build(func: Callable[..., Any]) -> Tool:
        tool_name = name if name is not None else getattr(func, "__name__", None)
        if not isinstance(tool_name, str):
            raise TypeError(f"cannot infer a tool name from {func!r}; pass name=...")
        summary, _ = _split_docstring(inspect.getdoc(func))
        return Tool(
            name=tool_name,
            description=description if description is not None else summary,
            args_model=_model_from_signature(func, tool_name),
            fn=func,
            timeout_s=timeout_s,
            inline=inline,
        )

    if fn is None:
        return build
    return build(fn)
