"""Prompt text lives in jinja2 templates next to each env, so users swap prompts without code."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["PromptTemplates"]


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
