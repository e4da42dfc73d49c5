"""The multi-turn game env: turn loop, rewards, and context management for long episodes.

Each turn the policy writes some text ending with an action tag; the env applies the action to the
game and answers with a ``user`` message: what happened and the current board. Episodes last many
turns, so the env decides what the policy sees next (``context``):

``"full"``
    Append every turn (the default). The no-drift invariant holds for the whole episode: the next
    prompt ids are the previous prompt ids + the action ids + the ids of the env's message.
``"last_k"``
    The system prompt, the first user message, and the last ``last_k`` exchanges (assistant turn +
    env reply). While the episode has at most ``last_k`` exchanges, the env appends; after that each
    step rewrites the context (a sliding window). A rewrite also happens early when appending would
    pass ``max_context_tokens``, and the window shrinks (down to one exchange) until the rewritten
    context fits.
``"board"``
    The system prompt and one user message holding the current state (board, last feedback, turns
    left): every step rewrites the context, so the prompt stays short however long the episode.

A rewrite goes through :class:`agent_gym.EnvReply` ``rewrite=[...]``: the base env renders the new
messages afresh, starts a new segment and reports ``info["new_segment"] = True``. The action ids of
that step stay exactly what the policy generated (they end the old segment); only the *next* prompt
is a fresh render.

Rewards (per step; ``info["reward_components"]`` splits each step's reward and sums to it):

- ``outcome``: 1.0 on the step that wins the game, else 0.0;
- ``shaping``: ``shaping * (potential after - potential before)`` (potential-based, so it adds up to
  ``shaping * (final - initial potential)`` over an episode; off by default: ``shaping=0``);
- ``invalid_penalty``: ``-invalid_action_penalty`` on a step whose action was invalid (off by
  default). An invalid action (no action tag, an unknown move, a malformed guess) changes nothing in
  the game, is counted in ``info["invalid_actions"]`` and explained in ``info["action_error"]``;
  the episode goes on (it still uses up a turn).

Token-level problems (ids outside the vocabulary, more than ``max_action_tokens`` ids) end the
episode at once with ``info["invalid_action"]`` (see :class:`agent_gym.AgentEnv`).
"""

from __future__ import annotations

import os
from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

import numpy as np

from agent_gym.core.env import AgentEnv, EnvReply, Grade, Turn
from agent_gym.core.prompts import PromptTemplates
from agent_gym.core.tasks import GeneratedTaskId
from agent_gym.core.types import ResetInfo, StepInfo

from agent_gym_games.common import SPLITS

__all__ = ["CONTEXT_MODES", "GameEnv", "MoveReport"]

CONTEXT_MODES = ("full", "last_k", "board")


@dataclass
class MoveReport:
    """What one turn's action did.

    Attributes:
        lines: sentences for the policy ("You moved up.", "You pushed a box.").
        error: why the action was invalid (then nothing happened in the game), else ``None``.
        moves: moves (or guesses) applied.
        blocked: moves that had no effect (a wall, the edge).
        ignored: moves dropped because the turn had more than ``max_moves_per_turn``.
    """

    lines: list[str] = field(default_factory=list)
    error: str | None = None
    moves: int = 0
    blocked: int = 0
    ignored: int = 0


class GameStepInfo(StepInfo, total=False):
    """The ``info`` of a game step: :class:`~agent_gym.core.types.StepInfo` and the game's counters (every
    valid action; see the module docstring)."""

    action_error: str | None
    """Why the action could not be played (``None``: it could)."""
    moves: int
    """Moves played so far."""
    blocked_moves: int
    """Moves into a wall (or off the board) so far: no effect."""
    ignored_moves: int
    """Moves past ``max_moves_per_turn`` so far: dropped."""
    invalid_actions: int
    """Actions that could not be played so far."""
    success: bool
    """The game is won."""
    board: str
    """The board (or the guesses) as the policy sees it."""
    difficulty: str
    context_mode: str
    """``full``, ``last_k`` or ``board``."""


class GameEnv(AgentEnv[Any, ResetInfo, GameStepInfo]):
    """Base class of the game envs (see the module docstring for context modes and rewards).

    Subclasses set :attr:`game`, :attr:`levels` and implement :meth:`generate`, :meth:`make_task`,
    :meth:`new_game`, :meth:`play`, :meth:`view`, :meth:`won`, :meth:`over` and :meth:`potential`.

    Args:
        tokenizer: see :class:`agent_gym.AgentEnv`.
        difficulty: a key of :attr:`levels` (``"easy"``, ``"medium"``, ``"hard"``).
        split: ``"train"`` or ``"test"``: disjoint level sets (by a hash of each level's content).
        context: ``"full"``, ``"last_k"`` or ``"board"``.
        last_k: exchanges kept by ``context="last_k"``.
        invalid_action_penalty: subtracted from the reward of a step with an invalid action (>= 0).
        shaping: weight of the potential-based shaping reward (0 disables it).
        max_turns: assistant turns per episode (default: the difficulty's).
        prompt_dir: a folder of jinja2 templates overriding the packaged ones (same file names).
        **kwargs: passed to :class:`agent_gym.AgentEnv` (``max_context_tokens`` defaults to 8192 here).
    """

    #: Template prefix and display name, e.g. ``"sokoban"``.
    game: ClassVar[str] = ""
    title: ClassVar[str] = ""
    #: Difficulty presets; each has a ``max_turns``.
    levels: ClassVar[Mapping[str, Any]] = {}
    #: The game's episode: the board (with its own random generator, for slippery ice), the exchanges a
    #: rewritten context keeps, the counters, the shaping potential and the opening (see AgentEnv.snapshot).
    episode_state: ClassVar[tuple[str, ...]] = ("state", "_exchanges", "_stats", "_potential", "_opening")

    def __init__(
        self,
        tokenizer: Any = None,
        *,
        difficulty: str = "easy",
        split: str = "train",
        context: str = "full",
        last_k: int = 3,
        invalid_action_penalty: float = 0.0,
        shaping: float = 0.0,
        max_turns: int | None = None,
        prompt_dir: str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ):
        GeneratedTaskId.check(split, difficulty, splits=SPLITS, variants=self.levels, env=self.title)
        if context not in CONTEXT_MODES:
            raise ValueError(f"context must be one of {CONTEXT_MODES}, got {context!r}")
        if int(last_k) < 1:
            raise ValueError(f"last_k must be >= 1, got {last_k}")
        if invalid_action_penalty < 0:
            raise ValueError(f"invalid_action_penalty must be >= 0 (it is subtracted), got {invalid_action_penalty}")
        kwargs.setdefault("max_context_tokens", 8192)
        super().__init__(tokenizer, max_turns=int(max_turns or self.levels[difficulty].max_turns), **kwargs)
        self.difficulty = difficulty
        self.split = split
        self.context_mode = context
        self.last_k = int(last_k)
        self.invalid_action_penalty = float(invalid_action_penalty)
        self.shaping = float(shaping)
        self.prompts = PromptTemplates("agent_gym_games", prompt_dir)
        self.state: Any = None

    # -- game hooks ------------------------------------------------------------------------------------

    @abstractmethod
    def generate(self, n: int, difficulty: str, split: str) -> Any:
        """The level/task number ``n`` of a difficulty and split (deterministic)."""

    @abstractmethod
    def make_task(self, task: Mapping[str, Any]) -> Any:
        """A custom task from ``reset(options={"task": {...}})``."""

    @abstractmethod
    def new_game(self, task: Any) -> Any:
        """A fresh game state for ``task``."""

    @abstractmethod
    def play(self, state: Any, text: str) -> MoveReport:
        """Read the action out of the turn's text and apply it to ``state``."""

    @abstractmethod
    def view(self, state: Any) -> dict[str, Any]:
        """Template variables describing ``state`` (at least ``board``)."""

    @abstractmethod
    def won(self, state: Any) -> bool: ...

    @abstractmethod
    def over(self, state: Any) -> bool:
        """The game reached a real end (won or lost)."""

    @abstractmethod
    def potential(self, state: Any) -> float:
        """Progress in [0, 1] for the optional shaping reward."""

    def system_variables(self) -> dict[str, Any]:
        """Variables of the system prompt template."""
        return {"max_turns": self.max_turns}

    # -- AgentEnv hooks ----------------------------------------------------------------------------------

    def sample_task(self, rng: np.random.Generator) -> Any:
        return self.generate(int(rng.integers(0, 2**31)), self.difficulty, self.split)

    def get_task(self, task_id: str) -> Any:
        split, difficulty, n = GeneratedTaskId.parse(task_id, splits=SPLITS, variants=self.levels, name=f"{self.title} level")
        return self.generate(n, difficulty, split)

    def task_from_dict(self, task: Mapping[str, Any]) -> Any:
        return self.make_task(task)

    def initial_messages(self, task: Any) -> list[dict[str, Any]]:
        # Called once by reset() with the episode's task: the game starts here.
        self.state = self.new_game(task)
        self._exchanges: list[tuple[str, str]] = []
        self._stats = {"invalid_actions": 0, "moves": 0, "blocked_moves": 0, "ignored_moves": 0}
        self._potential = self.potential(self.state)
        system = self.prompts.render(f"{self.game}_system.j2", **self.system_variables())
        self._opening = [
            {"role": "system", "content": system},
            {"role": "user", "content": self._state_message(feedback=[], turn=0)},
        ]
        return [dict(m) for m in self._opening]

    def grade(self, task: Any, turn: Turn) -> Grade:
        return Grade.from_check(self.won(self.state))

    def respond(self, turn: Turn) -> EnvReply:
        state = self.state
        report = self.play(state, turn.text)
        stats = self._stats
        stats["moves"] += report.moves
        stats["blocked_moves"] += report.blocked
        stats["ignored_moves"] += report.ignored
        if report.error is not None:
            stats["invalid_actions"] += 1
        potential = self.potential(state)
        won, over = self.won(state), self.over(state)
        components = {
            "outcome": 1.0 if won else 0.0,
            "shaping": self.shaping * (potential - self._potential),
            "invalid_penalty": -self.invalid_action_penalty if report.error is not None else 0.0,
        }
        self._potential = potential
        truncated = not over and turn.index >= self.max_turns
        feedback = list(report.lines)
        if report.error is not None:
            feedback.append(f"Invalid action: {report.error}. Nothing happened.")
        if won:
            feedback.append("You won!")
        elif over:
            feedback.append("Game over: you lost.")
        elif truncated:
            feedback.append("Out of turns.")
        content = self._state_message(feedback=feedback, turn=turn.index)
        message = {"role": "user", "content": content}
        info: dict[str, Any] = {
            "action_error": report.error,
            **stats,
            "success": won,
            "board": self.view(state)["board"],
            "difficulty": self.difficulty,
            "context_mode": self.context_mode,
            "reward_components": components,
        }
        reply = EnvReply(messages=[message], reward=float(sum(components.values())), terminated=over, truncated=truncated, info=info)
        if over or truncated:
            info["correct"] = won
            if truncated:
                info["truncated_reason"] = "max_turns"
            return reply
        self._exchanges.append((turn.text, content))
        rewrite, fits = self._next_context(turn, message)
        if not fits:  # even the smallest rewritten context is over the limit
            reply.truncated = True
            info["correct"] = False
            info["truncated_reason"] = "max_context_tokens"
        else:
            reply.rewrite = rewrite
        return reply

    async def arespond(self, turn: Turn) -> EnvReply:
        return self.respond(turn)  # pure computation, no waiting: no thread hop needed

    # -- context management ------------------------------------------------------------------------------

    def _state_message(self, *, feedback: list[str], turn: int) -> str:
        return self.prompts.render(
            f"{self.game}_state.j2",
            feedback=feedback,
            turn=turn,
            turns_left=self.max_turns - turn,
            first=turn == 0,
            context=self.context_mode,
            **self.view(self.state),
        )

    def _next_context(self, turn: Turn, message: dict[str, Any]) -> tuple[list[dict[str, Any]] | None, bool]:
        """``(None, True)`` to append ``message``; ``(messages, True)`` to replace the context with
        ``messages``; ``(None, False)`` when no allowed context fits in ``max_context_tokens``."""
        if self.context_mode == "full":
            return None, True  # the base env truncates if the appended turn does not fit
        if self.context_mode == "board":
            messages = [dict(self._opening[0]), dict(message)]
            return messages, self._tokens(messages) <= self.max_context_tokens
        if len(self._exchanges) <= self.last_k and self._append_fits(turn, message):
            return None, True
        for window in range(min(self.last_k, len(self._exchanges)), 0, -1):
            messages = self._window(window)
            if self._tokens(messages) <= self.max_context_tokens:
                return messages, True
        return None, False

    def _window(self, k: int) -> list[dict[str, Any]]:
        messages = [dict(m) for m in self._opening]
        for assistant, user in self._exchanges[-k:]:
            messages.append({"role": "assistant", "content": assistant})
            messages.append({"role": "user", "content": user})
        return messages

    def _append_fits(self, turn: Turn, message: dict[str, Any]) -> bool:
        assert self.context is not None
        # The real history (with this turn's assistant message): a history-dependent template writes
        # its suffix after it, and the length must be the one the context will get.
        history = [*self.context.messages, *self.template.template_messages([self._assistant_message(turn)])]
        suffix = self.template.turn_suffix([message], list(turn.ids), history=history, tools=self.context.tools)
        return len(self.context) + len(turn.ids) + len(suffix) <= self.max_context_tokens

    def _tokens(self, messages: list[dict[str, Any]]) -> int:
        return len(self.template.encode(self.template.render(messages, add_generation_prompt=True)))
