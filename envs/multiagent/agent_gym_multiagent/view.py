"""The single-agent view of a two-player game: the policy plays one role, ``opponent=`` the other.

An ordinary :class:`agent_gym.AgentEnv` (so ``play_episode``, ``agent-gym eval``/``check``, verl, TRL and
OpenEnv take it like any env): the observation is the learner's own chat context, a step is the
learner's move followed by the opponent's replies until the learner is to move again or the game is
over. The opponent is

- ``"random"``: a uniformly random legal move; ``"heuristic"``: the game's simple rule
  (:meth:`~agent_gym_multiagent.games.GameState.heuristic_move`: win or block at TicTacToe and Connect
  Four, bet with the king at Kuhn Poker, accept gainful trades at Negotiation), both drawn from the
  task's seed, so an episode is the same in any process;
- a policy: any object with the rollout's ``generate(prompts, *, max_new_tokens)``
  (:class:`agent_gym.rollout.Policy`: ``HFPolicy``, ``VLLMPolicy``, ``ScriptedPolicy``). It plays from its
  own role-conditioned chat context (exact prompt ids, no drift). Pass the learner's own policy for
  live self-play, or ``copy.deepcopy(policy)`` for a frozen copy;
- a function ``(state, player, rng) -> move text``.

Rewards (on the last step; 0.0 before): the learner's game return (win +1, draw 0, loss -1; Kuhn
Poker: the chips won, +-1 or +-2). The learner's unreadable or illegal move ends the game with
``-illegal_move_penalty`` and ``info["illegal_move"]`` saying why; the opponent's ends it with 0.0 and
``info["opponent_illegal_move"]``. ``info["outcome"]`` is one of ``win``, ``loss``, ``draw``,
``illegal_move``, ``opponent_illegal_move``, ``opponent_invalid_action`` (a model opponent's action was
no token sequence) or ``truncated`` (a model opponent's context reached ``max_context_tokens``);
``info["correct"]`` is ``outcome == "win"``. The learner's own invalid action is the base class's:
reward 0, ``info["invalid_action"]``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Mapping

import numpy as np

from agent_gym.core.env import AgentEnv, EnvReply, Grade, Turn
from agent_gym.core.tasks import GeneratedTaskId
from agent_gym.core.types import ResetInfo, StepInfo

from agent_gym_multiagent.games import GAMES, GameState, SpielState, load_pyspiel, new_game
from agent_gym_multiagent.match import Match, Prompts, Seat, read_action

__all__ = [
    "ConnectFourEnv",
    "KuhnPokerEnv",
    "MatchStepInfo",
    "MatchTask",
    "NegotiationEnv",
    "TicTacToeEnv",
    "TwoPlayerEnv",
    "game_rngs",
]

SPLITS = ("train", "test")
SCRIPTED = ("random", "heuristic")


@dataclass(frozen=True)
class MatchTask:
    """One game: the split and seed its chance (cards, resources, the scripted opponent) come from,
    and the learner's role."""

    id: str
    split: str
    role: str
    seed: int


class MatchStepInfo(StepInfo, total=False):
    """The ``info`` of a game step: :class:`~agent_gym.core.types.StepInfo` and the game's keys (see the
    module docstring); :class:`~agent_gym_multiagent.MultiAgentEnv` gives each agent the same keys."""

    role: str
    """The learner's role (``x``, ``player_0``, ...)."""
    opponent: str
    """``random``, ``heuristic``, or the class name of the policy or function that plays the other role."""
    opponent_moves: list[str]
    """The opponent's turns since the learner's move, as it wrote them."""
    outcome: str
    """On the last step: ``win``, ``loss``, ``draw``, ``illegal_move``, ``opponent_illegal_move``,
    ``invalid_action``, ``opponent_invalid_action`` or ``truncated``."""
    legal_moves: int
    """On the last step: the learner's legal moves in the game."""
    illegal_move: str
    """Why the learner's move was illegal (the game ended)."""
    opponent_illegal_move: str
    """Why the opponent's move was illegal (the game ended)."""
    opponent_invalid_action: str
    """Why a model opponent's action was no token sequence (the game ended)."""


def game_rngs(split: str, seed: int) -> tuple[np.random.Generator, np.random.Generator]:
    """The game's chance and the scripted players' generators of a task: the same in any process, and
    disjoint between the splits."""
    base = [int(seed), SPLITS.index(split)]
    return np.random.default_rng([*base, 0]), np.random.default_rng([*base, 1])


def _scripted(kind: str) -> Callable[[GameState, int, np.random.Generator], str]:
    if kind == "random":
        return lambda state, player, rng: state.random_move(player, rng)
    return lambda state, player, rng: state.heuristic_move(player, rng)


class TwoPlayerEnv(AgentEnv[MatchTask, ResetInfo, MatchStepInfo]):
    """The single-agent view (see the module docstring).

    Args:
        tokenizer: see :class:`agent_gym.AgentEnv`.
        opponent: ``"random"``, ``"heuristic"``, a policy, or a ``(state, player, rng) -> str`` function.
        role: the learner's role (``"x"``/``"o"``, ``"player_0"``/``"player_1"``); ``None``: drawn per
            episode from the seed, so the learner plays both sides.
        split: ``"train"`` or ``"test"`` (disjoint seeds of chance).
        illegal_move_penalty: what an illegal move costs its maker (>= 0).
        legal_move_bonus: opt-in shaping, paid on the last step for each legal move the learner made
            (``info["reward_components"]["legal_moves"]``): a game lost by an illegal move on the fourth
            move then pays more than one lost on the first, which gives a policy that cannot finish games
            yet a gradient. 0 (the default): the game's outcome alone.
        opponent_max_tokens: a model opponent's longest turn.
        prompt_dir: a folder of templates overriding the packaged ones (same file names).
        **kwargs: passed to :class:`agent_gym.AgentEnv` (``max_turns`` defaults to the most moves the
            learner can make in one game).
    """

    game: ClassVar[str] = ""
    episode_state: ClassVar[tuple[str, ...]] = ("match", "_opponent_rng", "_opponent_seat", "_opponent_moves")

    def __init__(
        self,
        tokenizer: Any = None,
        *,
        opponent: Any = "random",
        role: str | None = None,
        split: str = "train",
        illegal_move_penalty: float = 1.0,
        legal_move_bonus: float = 0.0,
        opponent_max_tokens: int = 256,
        prompt_dir: str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ):
        state = GAMES[self.game]
        if issubclass(state, SpielState):
            load_pyspiel(state.title)  # here, not at the first reset: the error says what to install
        roles = state.roles
        if role is not None and role not in roles:
            raise ValueError(f"role must be one of {roles} or None (both, drawn per episode), got {role!r}")
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        if illegal_move_penalty < 0:
            raise ValueError(f"illegal_move_penalty must be >= 0 (it is subtracted), got {illegal_move_penalty}")
        if legal_move_bonus < 0:
            raise ValueError(f"legal_move_bonus must be >= 0 (0 turns the shaping off), got {legal_move_bonus}")
        self._move: Callable[[GameState, int, np.random.Generator], str] | None = None
        self.opponent_policy: Any = None
        if isinstance(opponent, str):
            if opponent not in SCRIPTED:
                raise ValueError(
                    f"opponent must be one of {SCRIPTED}, a policy (an object with generate(prompts, *, max_new_tokens): "
                    "pass the learner's own policy for self-play, copy.deepcopy(policy) for a frozen copy) "
                    f"or a function (state, player, rng) -> move; got {opponent!r}"
                )
            self._move = _scripted(opponent)
        elif callable(getattr(opponent, "generate", None)):
            self.opponent_policy = opponent
        elif callable(opponent):
            self._move = opponent
        else:
            raise TypeError(f"opponent must be a name, a policy or a function, got {type(opponent).__name__}")
        self.opponent_name = opponent if isinstance(opponent, str) else type(opponent).__name__
        kwargs.setdefault("max_turns", self.most_moves())
        kwargs.setdefault("max_context_tokens", state.context_tokens)
        super().__init__(tokenizer, **kwargs)
        self.role = role
        self.split = split
        self.illegal_move_penalty = float(illegal_move_penalty)
        self.legal_move_bonus = float(legal_move_bonus)
        self.opponent_max_tokens = int(opponent_max_tokens)
        self.prompts = Prompts(self.game, prompt_dir)
        self.match: Match | None = None
        self._opponent_rng: np.random.Generator | None = None
        self._opponent_seat: Seat | None = None
        self._opponent_moves: list[str] = []

    @classmethod
    def roles(cls) -> tuple[str, str]:
        return GAMES[cls.game].roles

    @property
    def title(self) -> str:
        return GAMES[self.game].title

    def game_options(self) -> dict[str, Any]:
        """The game's own settings (Negotiation's ``max_moves``), passed to :func:`new_game`."""
        return {}

    def most_moves(self) -> int:
        """The most moves the learner makes in one game: the default ``max_turns``."""
        return GAMES[self.game].most_moves

    # -- AgentEnv hooks --------------------------------------------------------------------------------

    def sample_task(self, rng: np.random.Generator) -> MatchTask:
        roles = self.roles()
        role = self.role or roles[int(rng.integers(2))]
        return self._task(self.split, role, int(rng.integers(0, 2**31)))

    def get_task(self, task_id: str) -> MatchTask:
        split, role, n = GeneratedTaskId.parse(
            task_id, splits=SPLITS, variants=self.roles(), name=f"{self.title} game", variant_name="role"
        )
        return self._task(split, role, n)

    def task_from_dict(self, task: Mapping[str, Any]) -> MatchTask:
        if "id" in task:
            return self.get_task(str(task["id"]))
        unknown = set(task) - {"role", "seed", "split"}
        if unknown or "seed" not in task:
            raise ValueError(f"a {self.title} task is {{'id': ...}} or {{'seed': int, 'role': ..., 'split': ...}}, got {dict(task)}")
        return self._task(str(task.get("split", self.split)), str(task.get("role", self.roles()[0])), int(task["seed"]))

    def _task(self, split: str, role: str, seed: int) -> MatchTask:
        GeneratedTaskId.check(split, role, splits=SPLITS, variants=self.roles(), env=self.title)
        return MatchTask(str(GeneratedTaskId(split, role, seed)), split, role, seed)

    @property
    def player(self) -> int:
        assert isinstance(self.task, MatchTask)
        return self.roles().index(self.task.role)

    def initial_messages(self, task: MatchTask) -> list[dict[str, Any]]:
        chance, self._opponent_rng = game_rngs(task.split, task.seed)
        self.match = Match(new_game(self.game, chance, **self.game_options()), self.illegal_move_penalty)
        self._opponent_seat = Seat(self.template) if self.opponent_policy is not None else None
        player = self.roles().index(task.role)
        self._opponent_moves = []
        self._play_opponent(player)
        # The opponent cannot end the game before the learner's first move: every game here lets
        # the second player move at least once.
        return self.prompts.opening(self.match, player)

    def grade(self, task: MatchTask, turn: Turn) -> Grade:
        assert self.match is not None
        info = self.match.outcome_info(self.player)
        return Grade(reward=self.match.rewards()[self.player], correct=info["correct"],
                     info={k: v for k, v in info.items() if k not in ("correct", "reward_components")})

    def respond(self, turn: Turn) -> EnvReply:
        match, player = self.match, self.player
        assert match is not None
        moves_before = len(self._opponent_moves)
        if match.move(player, turn.text) is None:
            self._play_opponent(player)
        info: dict[str, Any] = {
            "role": self.roles()[player],
            "opponent": self.opponent_name,
            "opponent_moves": self._opponent_moves[moves_before:],
        }
        if match.ended is not None and match.ended[1] == "truncated":  # a model opponent's context is full
            info.update(match.outcome_info(player))
            return EnvReply(truncated=True, info=info)
        if not match.over:
            if turn.index >= self.max_turns:
                info.update(correct=False, truncated_reason="max_turns", outcome="", reward_components={"outcome": 0.0})
                return EnvReply(truncated=True, info=info)
            return EnvReply(messages=[self.prompts.turn(match, player)], info=info)
        info.update(match.outcome_info(player))
        legal = match.moves[player] - (match.ended is not None and match.ended[:2] == (player, "illegal_move"))
        info["legal_moves"] = legal
        reward = match.rewards()[player]
        if self.legal_move_bonus:  # opt-in shaping, its own component
            info["reward_components"] = {**info["reward_components"], "legal_moves": self.legal_move_bonus * legal}
            reward += self.legal_move_bonus * legal
        return EnvReply(messages=[self.prompts.result(match, player)], reward=reward, terminated=True, info=info)

    async def arespond(self, turn: Turn) -> EnvReply:
        if self.opponent_policy is None:
            return self.respond(turn)  # pure computation: no thread hop needed
        return await super().arespond(turn)  # a model opponent generates: off the event loop

    def fork_blocker(self) -> str | None:
        if self.opponent_policy is not None:
            return ("a model opponent's moves come from its sampler, which a snapshot cannot hold; "
                    "play against a scripted opponent to fork or replay")
        return super().fork_blocker()

    # -- the opponent ----------------------------------------------------------------------------------

    def _play_opponent(self, player: int) -> None:
        """Let the opponent move until it is ``player``'s turn again or the game is over."""
        match = self.match
        assert match is not None and self._opponent_rng is not None
        other = 1 - player
        while match.current == other:
            if self._move is not None:
                text = f"<move>{self._move(match.game, other, self._opponent_rng)}</move>"
                self._opponent_moves.append(text)
                match.move(other, text)
                continue
            seat = self._opponent_seat
            assert seat is not None
            if not seat.give_turn(self.prompts, match, other, self.max_context_tokens):
                match.end(other, "truncated", f"context would pass max_context_tokens={self.max_context_tokens}")
                break
            assert seat.context is not None
            generation = self.opponent_policy.generate([seat.context.ids], max_new_tokens=self.opponent_max_tokens)[0]
            action = read_action(self, list(generation.ids))
            self._opponent_moves.append(action.text)
            if action.problem is not None:
                match.end(other, "invalid_action", action.problem)
                break
            seat.act(action.ids, action.text)
            match.move(other, action.text)


class TicTacToeEnv(TwoPlayerEnv):
    """TicTacToe against ``opponent``: ``AgentR1/TicTacToe-v0`` (roles ``x``, who moves first, and ``o``)."""

    game = "tictactoe"


class ConnectFourEnv(TwoPlayerEnv):
    """Connect Four (6 x 7) against ``opponent``: ``AgentR1/ConnectFour-v0`` (roles ``x`` first, ``o``)."""

    game = "connectfour"


class KuhnPokerEnv(TwoPlayerEnv):
    """Kuhn Poker against ``opponent``: ``AgentR1/KuhnPoker-v0`` (``player_0`` acts first)."""

    game = "kuhnpoker"


class NegotiationEnv(TwoPlayerEnv):
    """Simple Negotiation against ``opponent``: ``AgentR1/Negotiation-v0``.

    Args:
        max_moves: moves in the whole game (both players, in turn; even, >= 2).
        **kwargs: see :class:`TwoPlayerEnv`.
    """

    game = "negotiation"

    def __init__(self, tokenizer: Any = None, *, max_moves: int = 8, **kwargs: Any):
        if int(max_moves) < 2 or int(max_moves) % 2:
            raise ValueError(f"max_moves must be even and >= 2 (both players move as often), got {max_moves}")
        self.max_moves = int(max_moves)
        super().__init__(tokenizer, **kwargs)

    def game_options(self) -> dict[str, Any]:
        return {"max_moves": self.max_moves}

    def most_moves(self) -> int:
        return self.max_moves // 2
