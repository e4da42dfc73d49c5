"""One game between two seats, as both the multi-agent env and the single-agent view play it.

A :class:`Match` is the game state plus what each player has been told: every legal move becomes a
public sentence ("O played cell 5."), and a player's turn message holds the sentences since its own
last turn and the state as it sees it. A player's move is read from the last ``<move>...</move>`` of
its text; an unreadable or illegal move ends the game: the mover gets ``-illegal_move_penalty``, the
other player 0, and the reason is kept (:attr:`Match.ended`).

A :class:`Seat` is one player's own chat context (exact prompt ids, appended turn by turn, so they
never drift); the multi-agent env keeps one per agent, the single-agent view one for a model opponent.
:func:`read_action` turns an action (token ids) into the kept ids and their text exactly as
:class:`agent_gym.AgentEnv` does for its own steps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from agent_gym.chat.context import ChatContext
from agent_gym.chat.template import ChatTemplate
from agent_gym.core.env import AgentEnv
from agent_gym.core.prompts import PromptTemplates

from agent_gym_multiagent.games import GameState

__all__ = ["Action", "Match", "Prompts", "Seat", "read_action", "read_move"]

_NO_MOVE = "no <move>...</move> tag found (end your turn with your move in one)"


def read_move(text: str) -> str | None:
    """The content of the last ``<move>...</move>`` in ``text`` (a last tag left open counts up to the
    end: the turn was cut at its stop token), or ``None``."""
    closed = list(re.finditer(r"<move>(.*?)</move>", text, re.DOTALL | re.IGNORECASE))
    opened = list(re.finditer(r"<move>", text, re.IGNORECASE))
    if opened and (not closed or opened[-1].start() > closed[-1].start()):
        return text[opened[-1].end():].strip()
    return closed[-1].group(1).strip() if closed else None


@dataclass
class Match:
    """A game, its public record, and each player's place in it (see the module docstring)."""

    game: GameState
    illegal_move_penalty: float = 1.0
    events: list[str] = field(default_factory=list)
    seen: list[int] = field(default_factory=lambda: [0, 0])
    moves: list[int] = field(default_factory=lambda: [0, 0])
    #: ``(player, kind, why)`` once the game ended outside its rules: ``kind`` is ``"illegal_move"`` (the
    #: player's move broke them: it loses ``illegal_move_penalty``), ``"invalid_action"`` (its action was no
    #: token sequence: no rewards, as in every env) or ``"truncated"`` (its context would pass its limit).
    ended: tuple[int, str, str] | None = None

    @property
    def roles(self) -> tuple[str, str]:
        return self.game.roles

    @property
    def current(self) -> int | None:
        return None if self.ended is not None else self.game.current

    @property
    def over(self) -> bool:
        return self.current is None

    def move(self, player: int, text: str) -> str | None:
        """Play ``player``'s turn from its text; ``None``, or why it was illegal (the game is then over)."""
        content = read_move(text)
        error = _NO_MOVE if content is None else self.game.play(player, content)
        self.moves[player] += 1
        if error is not None:
            self.end(player, "illegal_move", error)
            return error
        assert content is not None
        self.events.append(self.game.describe(player, content))
        return None

    def end(self, player: int, kind: str, why: str) -> None:
        """End the game outside its rules because of ``player`` (see :attr:`ended`)."""
        if kind not in _ENDINGS:
            raise ValueError(f"kind must be one of {sorted(_ENDINGS)}, got {kind!r}")
        self.ended = (player, kind, why)
        self.events.append(_ENDINGS[kind].format(who=self.game.role_name(player), why=why))

    def rewards(self) -> list[float]:
        """Each player's reward once the game is over (all 0.0 before)."""
        if self.ended is not None:
            out = [0.0, 0.0]
            if self.ended[1] == "illegal_move":
                out[self.ended[0]] = -self.illegal_move_penalty
            return out
        return self.game.returns() if self.game.over else [0.0, 0.0]

    def outcome(self, player: int) -> str:
        """``"win"``, ``"loss"``, ``"draw"``; ``"illegal_move"``, ``"invalid_action"`` (``player``'s) or
        ``"opponent_illegal_move"``, ``"opponent_invalid_action"``; ``"truncated"``; ``""`` while the game goes on."""
        if self.ended is not None:
            who, kind, _ = self.ended
            return kind if who == player or kind == "truncated" else f"opponent_{kind}"
        if not self.game.over:
            return ""
        mine, theirs = self.game.returns()[player], self.game.returns()[1 - player]
        return "win" if mine > theirs else "loss" if mine < theirs else "draw"

    def outcome_info(self, player: int) -> dict[str, Any]:
        """The final ``info`` entries of ``player``: ``outcome``, ``correct`` (a win), ``reward_components``
        and, where the game ended outside its rules, the reason under the outcome's name
        (``info["illegal_move"]``, ``info["opponent_illegal_move"]``, ...)."""
        outcome, reward = self.outcome(player), self.rewards()[player]
        info: dict[str, Any] = {"outcome": outcome, "correct": outcome == "win", "reward_components": {"outcome": reward}}
        if self.ended is not None:
            info["truncated_reason" if outcome == "truncated" else outcome] = self.ended[2]
        return info

    def new_events(self, player: int) -> list[str]:
        """The public sentences ``player`` has not been told yet (they count as told from now on)."""
        events = self.events[self.seen[player]:]
        self.seen[player] = len(self.events)
        return events


_ENDINGS = {
    "illegal_move": "{who} made an illegal move ({why}).",
    "invalid_action": "{who}'s action was not a valid token sequence ({why}).",
    "truncated": "The game was cut: {who}'s {why}.",
}


class Prompts:
    """The game's prompt templates (``templates/<game>_system.j2``, ``turn.j2``, ``result.j2``)."""

    def __init__(self, game: str, prompt_dir: Any = None):
        self.game = game
        self.templates = PromptTemplates("agent_gym_multiagent", prompt_dir)

    def opening(self, match: Match, player: int) -> list[dict[str, Any]]:
        """The chat that opens ``player``'s context: its role-conditioned system prompt and first turn."""
        roles = match.roles
        system = self.templates.render(
            f"{self.game}_system.j2", role=roles[player], opponent=roles[1 - player], first=player == 0,
            **match.game.prompt_variables(),
        )
        return [{"role": "system", "content": system}, self.turn(match, player)]

    def turn(self, match: Match, player: int) -> dict[str, Any]:
        text = self.templates.render(
            "turn.j2", events=match.new_events(player), view=match.game.view(player),
            legal=match.game.legal_moves(player), first=match.moves[player] == 0,
        )
        return {"role": "user", "content": text}

    def result(self, match: Match, player: int) -> dict[str, Any]:
        text = self.templates.render(
            "result.j2", events=match.new_events(player), view=match.game.view(player), outcome=match.outcome(player),
            reward=match.rewards()[player],
        )
        return {"role": "user", "content": text}


class Action(NamedTuple):
    """An action as a seat reads it (see :func:`read_action`)."""

    ids: list[int]
    text: str
    #: why it is not a valid token sequence, or ``None``
    problem: str | None
    #: how many ids followed the first end-of-turn id (cut, as ``info["ids_after_end_of_turn"]`` says)
    cut: int


def read_action(holder: Any, action: Any) -> Action:
    """An action (token ids) read exactly as :class:`agent_gym.AgentEnv` reads its own: coerced to ids
    (``problem`` says why it is not a valid token sequence), cut after the first end-of-turn id,
    decoded once for parsing. ``holder`` has ``template`` and ``max_action_tokens`` (the env that reads it)."""
    # AgentEnv's own reading, so that a seat's action means what a single-agent step's does.
    ids, problem = AgentEnv._coerce_action(holder, action)
    if problem is not None:
        return Action([], "", problem, 0)
    ids, cut = AgentEnv._cut_at_end_of_turn(holder, ids)
    text = holder.template.decode(ids[: len(ids) - AgentEnv._end_len(holder, ids)])
    return Action(ids, text, None, cut)


class Seat:
    """One player's own chat context: opened at its first turn, appended to at each later turn."""

    def __init__(self, template: ChatTemplate):
        self.template = template
        self.context: ChatContext | None = None

    def give_turn(self, prompts: Prompts, match: Match, player: int, max_context_tokens: int) -> bool:
        """Open or extend the context with ``player``'s turn message; ``False`` (nothing changed) when
        it would pass ``max_context_tokens``."""
        if self.context is None:
            ctx = ChatContext.start(self.template, prompts.opening(match, player))
            if len(ctx) > max_context_tokens:
                return False
            self.context = ctx
            return True
        message = prompts.turn(match, player)
        suffix = self.context.pending_suffix([message])
        if len(self.context) + len(suffix) > max_context_tokens:
            return False
        self.context.append_messages([message], suffix)
        return True

    def act(self, ids: list[int], text: str) -> None:
        assert self.context is not None
        self.context.append_action(ids, {"role": "assistant", "content": text})

    def finish(self, prompts: Prompts, match: Match, player: int) -> None:
        """Record the game's end in the context (kept for the record: no ids follow it)."""
        if self.context is not None:
            self.context.record([prompts.result(match, player)])

    def __deepcopy__(self, memo: dict[int, Any]) -> Seat:
        # The template (and its tokenizer) is shared, never copied: only the context is episode state.
        import copy

        new = Seat(self.template)
        if self.context is not None:
            new.context = ChatContext(self.template)
            state = {k: v for k, v in self.context.__dict__.items() if k != "template"}
            new.context.__dict__.update(copy.deepcopy(state, memo))
        return new
