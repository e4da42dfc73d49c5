"""Chat templates that ship with agent-gym, by name: ``chat_template="completion"`` anywhere an env,
the command line or the conformance check takes a chat template.

``completion`` is for pretrained base models, which have no chat format of their own: the
conversation is written as plain prose (the system prompt as a paragraph, ``Question:`` /
``Answer:`` for the user and the assistant) and an answer ends with a blank line. Its text is
``agent_gym/chat/templates/completion.j2``; docs/base-models.md says why it is shaped so.
"""

from __future__ import annotations

import functools
from importlib.resources import files

__all__ = ["CHAT_TEMPLATES", "builtin_chat_template", "resolve_chat_template"]

#: Built-in chat templates: name -> file in ``agent_gym/chat/templates``.
CHAT_TEMPLATES: dict[str, str] = {"completion": "completion.j2"}


@functools.lru_cache(maxsize=None)
def builtin_chat_template(name: str) -> str:
    """The jinja text of the built-in chat template ``name``.

    Raises:
        KeyError: an unknown name (the message lists the known ones).
    """
    if name not in CHAT_TEMPLATES:
        raise KeyError(f"unknown built-in chat template {name!r}; known: {', '.join(CHAT_TEMPLATES)}")
    return files("agent_gym.chat").joinpath("templates").joinpath(CHAT_TEMPLATES[name]).read_text(encoding="utf-8")


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
