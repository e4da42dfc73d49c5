"""The OpenEnv wire types of an agent-gym env: action, observation, state.

They subclass openenv-core's own ``Action`` / ``Observation`` / ``State`` (pydantic models), so the
server validates requests with them, ``/schema`` publishes their JSON schemas, and any OpenEnv client
(typed or ``GenericEnvClient``) can read what the server sends.

- :class:`TokenAction`: the ids the policy generated (canonical), or a text as a convenience.
- :class:`ChatObservation`: what ``env.reset`` / ``env.step`` return in process, as JSON: the chat
  context (``prompt_ids``, ``messages``, ``tools``), ``terminated`` / ``truncated`` and ``info``;
  OpenEnv's own ``reward`` and ``done`` (``terminated or truncated``) travel beside it.
- :class:`EpisodeState`: the answer to OpenEnv's ``state`` request.
"""

from __future__ import annotations

from typing import Any, Optional

from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field, StrictInt, StrictStr, model_validator
from pydantic_core import PydanticCustomError

__all__ = ["TokenAction", "ChatObservation", "EpisodeState"]


class TokenAction(Action):
    """One policy turn: ``token_ids`` (what the policy generated, up to and including its end-of-turn
    id) or ``text`` (encoded by the env's tokenizer, end of turn not added). Exactly one of the two.

    The ids are checked for being JSON integers here; whether they are in the vocabulary, and not too
    many, is the env's call (an env ends the episode on such an action, with ``info["invalid_action"]``,
    exactly as in process)."""

    token_ids: Optional[list[StrictInt]] = Field(
        default=None, description="generated token ids (canonical); include the end-of-turn id"
    )
    text: Optional[StrictStr] = Field(
        default=None, description="the turn as text (a convenience: the env encodes it; ids are canonical)"
    )

    @model_validator(mode="after")
    def _one_of(self) -> "TokenAction":
        if (self.token_ids is None) == (self.text is None):
            # A PydanticCustomError, not a ValueError: the error's context must stay JSON (openenv-core
            # sends the validation errors back to the client as they are).
            raise PydanticCustomError(
                "one_of_token_ids_text",
                "an action carries exactly one of token_ids and text; got {given}",
                {"given": "both" if self.token_ids is not None else "neither"},
            )
        return self


class ChatObservation(Observation):
    """The env's observation and step result as JSON (``reward``/``done`` are OpenEnv's own fields)."""

    prompt_ids: list[int] = Field(default_factory=list, description="the exact ids the policy continues from")
    messages: list[dict[str, Any]] = Field(default_factory=list, description="the chat so far (OpenAI format)")
    tools: list[dict[str, Any]] = Field(default_factory=list, description="the tool schemas offered (OpenAI format)")
    terminated: bool = Field(default=False, description="the episode reached a real end")
    truncated: bool = Field(default=False, description="the episode was cut (turn or token limit)")
    info: dict[str, Any] = Field(default_factory=dict, description="the env's info dict of this reset or step")


class EpisodeState(State):
    """OpenEnv's ``state``: the session's env and episode (``episode_id``, ``step_count`` from the base)."""

    env_id: str = Field(description="the registered env id served")
    task_id: Optional[str] = Field(default=None, description="the task of the current episode")
    in_episode: bool = Field(default=False, description="an episode is in progress (reset, not yet done)")
