"""Prompt text lives in jinja2 templates next to each env, so users swap prompts without code."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["PromptTemplates", "tool_prompt_variables"]


class PromptTemplates:
    """Loads ``templates/*.j2`` from an env package, with an optional override folder searched first.

    Args:
        package: the env's import package (its ``templates/`` folder holds the defaults).
        override_dir: a folder of templates with the same file names; any file found there wins.
    """

    def __init__(self, package: str, override_dir: str | os.PathLike[str] | None = None):
        import jinja2  # imported here: env construction, not `import agent_gym`, pays for it

        loaders: list[jinja2.BaseLoader] = []
        if override_dir is not None:
            if not os.path.isdir(override_dir):
                raise FileNotFoundError(f"prompt template folder {override_dir} does not exist")
            loaders.append(jinja2.FileSystemLoader(os.fspath(override_dir)))
        loaders.append(jinja2.PackageLoader(package, "templates"))
        self._env = jinja2.Environment(
            loader=jinja2.ChoiceLoader(loaders),
            undefined=jinja2.StrictUndefined,  # a misspelt variable is an error, not an empty string
            keep_trailing_newline=False,
            autoescape=False,
            auto_reload=False,  # templates are read once per env; no file check on every render
        )

    def render(self, name: str, **variables: Any) -> str:
        """Render template ``name`` (e.g. ``"gsm8k_system.j2"``) with ``variables``; stripped."""
        return self._env.get_template(name).render(**variables).strip()


def tool_prompt_variables(
    parser: Any,
    schemas: Sequence[Mapping[str, Any]],
    example_calls: Sequence[Mapping[str, Any]] = (),
    *,
    template_renders_tools: bool = False,
) -> dict[str, Any]:
    """The variables a system-prompt template needs to offer tools in a tool-call format.

    Returns ``tools`` (the schemas; empty when the chat template renders them itself, since the
    chat template then offers them), ``tool_format`` (the parser's name), ``tools_text`` (the
    schemas as that format offers them, ``""`` when ``tools`` is empty) and ``call_example``
    (``example_calls`` written in that format, ``""`` for none).
    """
    from agent_gym.tools import describe_tools

    tools = [] if template_renders_tools else [dict(s) for s in schemas]
    return {
        "tools": tools,
        "tool_format": getattr(parser, "name", type(parser).__name__),
        "tools_text": describe_tools(parser, tools) if tools else "",
        "call_example": parser.format_calls(list(example_calls)) if example_calls else "",
    }
