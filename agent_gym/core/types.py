"""The typed env contract: what ``reset`` and ``step`` return, key by key.

Every env of the suite returns these shapes, so a trainer written against them works with any env:

- :class:`Observation`: the chat context the policy continues from;
- :class:`ResetInfo`: the ``info`` of ``reset``;
- :class:`StepInfo`: the ``info`` of ``step`` (the keys every step has, and those only some steps have).

They are ``TypedDict``s, so at run time they are plain dicts (the gymnasium API is unchanged and they
pickle, serialise to JSON and cross a wire as they are); a type checker reads the keys and their types.
An env adds keys of its own to ``info`` (GSM8K's ``answer_check``, a game's ``invalid_moves``) by
extending these: ``class GSM8KStepInfo(StepInfo)`` declares them, and the env class names its info
types as its second and third type arguments, ``class GSM8KEnv(AgentEnv[GSM8KTask, ResetInfo,
GSM8KStepInfo])``, so that ``reset`` and ``step`` return them (to a type checker) and ``agent-gym check``
refuses a key that no info type declares. :func:`agent_gym.core.env.info_types` reads them back
from the class.
"""

from __future__ import annotations

import sys
from typing import Any, Literal

import numpy as np

if sys.version_info >= (3, 11):
    from typing import NotRequired, TypedDict
else:  # Python 3.10: typing_extensions comes with pydantic (and its TypedDict reads NotRequired at run time)
    from typing_extensions import NotRequired, TypedDict

__all__ = [
    "Message", "Observation", "ResetInfo", "StepInfo", "StepResult", "ResetResult", "TruncatedReason",
]

#: A chat message in the OpenAI format (``role``, ``content``, and ``tool_calls``, ``tool_call_id``,
#: ``name`` where they apply).
Message = dict[str, Any]

#: Why an episode was cut: the turn limit, the context limit, a reply the chat template cannot render.
TruncatedReason = Literal["max_turns", "max_context_tokens", "render_error"]


class Observation(TypedDict):
    """The observation of every agent env: the chat context the policy continues from."""

    messages: list[Message]
    """The conversation so far (system, user, assistant and tool turns), as the chat template renders it."""
    tools: list[dict[str, Any]]
    """The JSON schemas of the tools offered (OpenAI function format); empty for an env without tools."""
    prompt_ids: np.ndarray
    """The exact token ids (1-D ``int64``) the policy continues from: the last action's ids plus the
    env's reply and the next generation prompt, never re-tokenised (the no-drift invariant)."""


class ResetInfo(TypedDict):
    """The ``info`` of ``reset``."""

    task_id: str | None
    """The id of the episode's task (``reset(options={"task_id": ...})`` plays it again)."""
    context_tokens: int
    """Length of ``prompt_ids``."""


class StepInfo(TypedDict):
    """The ``info`` of ``step``: the keys every step carries, then those that only some steps carry."""

    task_id: str | None
    """The episode's task id."""
    turn: int
    """1-based number of the policy turn this step applied."""
    tool_calls: int
    """Tool calls parsed so far in the episode (cumulative)."""
    tool_errors: int
    """Tool calls that failed so far (cumulative): unknown tool, bad arguments, time-out, exception."""
    tool_error_kinds: dict[str, int]
    """``tool_errors`` by kind (``"unknown_tool"``, ``"invalid_arguments"``, ``"timeout"``, ...)."""
    format_errors: int
    """Malformed tool calls and invalid actions so far (cumulative)."""
    new_segment: bool
    """The env rewrote the context: the next ``prompt_ids`` do not extend the previous ones."""
    segment: int
    """0-based index of the context segment (incremented by each rewrite)."""
    context_tokens: int
    """Length of the next ``prompt_ids``."""
    # -- on the final step --------------------------------------------------------------------------
    answer_check: NotRequired[str]
    """Why the answer is right or wrong (``"correct"``, ``"wrong_answer"``, ``"no_final_answer"``, ...): the
    reason a right-or-wrong check gives :meth:`agent_gym.core.env.Grade.from_check`; each env documents its own."""
    correct: NotRequired[bool | None]
    """Whether the final answer is right (``None`` for an env that does not say)."""
    reward_components: NotRequired[dict[str, float]]
    """The reward by component (``{"outcome": 1.0}``; shaping wrappers add their own)."""
    truncated_reason: NotRequired[TruncatedReason | str]
    """Why the episode was cut (only when ``truncated``)."""
    # -- only where it happened ---------------------------------------------------------------------
    invalid_action: NotRequired[str]
    """Why the action was refused (unknown ids, too long, wrong shape); the episode ended with reward 0."""
    render_error: NotRequired[str]
    """What the chat template raised; the step was not applied and the episode ended truncated."""
    ids_after_end_of_turn: NotRequired[int]
    """How many ids the action held after its first end-of-turn id (cut: not graded, not appended)."""
    tool_results: NotRequired[list[str]]
    """This step's tool calls, each ``"ok"`` or its error kind."""
    tool_outputs: NotRequired[list[str]]
    """What each of this step's tool calls answered (the tool turns' text), in call order: what
    :func:`agent_gym.replay` serves with ``tools="recorded"``."""


#: ``reset``'s return value: ``(observation, info)``.
ResetResult = tuple[Observation, ResetInfo]
#: ``step``'s return value: ``(observation, reward, terminated, truncated, info)``.
StepResult = tuple[Observation, float, bool, bool, StepInfo]

