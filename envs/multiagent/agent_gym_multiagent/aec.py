"""The multi-agent API: a two-player game in PettingZoo's AEC (agent environment cycle) style.

One agent acts at a time (``agent_selection``); each agent has its own chat context, the one its
single-agent view would give it (its role-conditioned system prompt, the public record of the moves,
the state as it sees it), with the exact prompt ids its policy continues from; an action is the token
ids that policy generated. The loop is PettingZoo's::

    env = MultiAgentEnv("tictactoe", tokenizer=tok)
    env.reset(seed=0)
    for agent in env.agent_iter():
        obs, reward, terminated, truncated, info = env.last()     # obs: agent's messages, prompt_ids
        action = None if terminated or truncated else policies[agent](obs["prompt_ids"])
        env.step(action)                                          # None: the finished agent leaves

No PettingZoo import: the class has the attributes and methods of ``pettingzoo.AECEnv`` (``agents``,
``possible_agents``, ``rewards``, ``terminations``, ``truncations``, ``infos``, ``observe``, ``last``,
``agent_iter``, ``observation_space(agent)``, ``action_space(agent)``) and plays by its rules: after the
game ends, every agent is stepped once more with ``None`` and leaves ``agents``.

A game ends by its rules (rewards: the game's returns, zero-sum), by an illegal move (the mover gets
``-illegal_move_penalty``, the other 0, ``infos[agent]["illegal_move"]`` says why), by an action that
is no token sequence (no rewards, ``infos[agent]["invalid_action"]``), or, truncated, when a turn would
push an agent's context past ``max_context_tokens``. Each agent's ``info`` has the step-info keys of
every env (``task_id``, ``turn``, ``context_tokens``, ``new_segment``, ``segment``, at the end
``outcome``, ``correct``, ``reward_components``), so that :func:`agent_gym.rollout.play_selfplay`
records each role's turns as an ordinary :class:`~agent_gym.trajectory.Trajectory`.

Tasks are the single-agent view's: agent ``x`` of the game seeded ``n`` in ``train`` has task id
``train-x-n``, and its context is the one ``gym.make("AgentR1/TicTacToe-v0", role="x")`` gives on task
``train-x-n`` when the other role makes the same moves.
"""

from __future__ import annotations

import os
from typing import Any, Iterator, Mapping

import numpy as np

from agent_gym.chat.template import ChatTemplate
from agent_gym.core.spaces import ChatContextSpace, TokenSequence
from agent_gym.core.tasks import GeneratedTaskId
from agent_gym.models import load_tokenizer

from agent_gym_multiagent.games import ENV_IDS, GAMES, SpielState, load_pyspiel, new_game
from agent_gym_multiagent.match import Match, Prompts, Seat, read_action
from agent_gym_multiagent.view import SPLITS, game_rngs

__all__ = ["MultiAgentEnv"]


class MultiAgentEnv:
    """A two-player game of :data:`agent_gym_multiagent.games.GAMES` for two policies (see the module docstring).

    Args:
        game: ``"tictactoe"``, ``"kuhnpoker"``, ``"connectfour"`` or ``"negotiation"``.
        tokenizer: a Hugging Face tokenizer, a model path or name, or ``None`` for the default model's.
        split: ``"train"`` or ``"test"`` (disjoint seeds of chance, as in the single-agent views).
        illegal_move_penalty: what an illegal move costs its maker (>= 0).
        max_context_tokens: each agent's context limit (default: the game's, 4096; Connect Four 16384).
        max_action_tokens: the longest action accepted.
        chat_template: a jinja chat template or a built-in name replacing the tokenizer's own.
        prompt_dir: a folder of templates overriding the packaged ones (same file names).
        **game_options: the game's own settings (Negotiation: ``max_moves``, default 8).
    """

    metadata: dict[str, Any] = {"name": "agent_gym_multiagent", "is_parallelizable": False, "render_modes": ["ansi"]}  # noqa: RUF012

    def __init__(
        self,
        game: str,
        tokenizer: Any = None,
        *,
        split: str = "train",
        illegal_move_penalty: float = 1.0,
        max_context_tokens: int | None = None,
        max_action_tokens: int = 1024,
        chat_template: str | None = None,
        prompt_dir: str | os.PathLike[str] | None = None,
        **game_options: Any,
    ):
        if game not in GAMES:
            raise ValueError(f"unknown game {game!r}; known: {', '.join(GAMES)}")
        state = GAMES[game]
        if issubclass(state, SpielState):
            load_pyspiel(state.title)
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        if illegal_move_penalty < 0:
            raise ValueError(f"illegal_move_penalty must be >= 0 (it is subtracted), got {illegal_move_penalty}")
        new_game(game, np.random.default_rng(0), **game_options)  # bad options fail here, not at reset
        self.game = game
        #: the id of the game's single-agent view (the env id of self-play trajectories)
        self.env_id = ENV_IDS[game]
        self.game_options = dict(game_options)
        self.split = split
        self.illegal_move_penalty = float(illegal_move_penalty)
        self.max_context_tokens = int(max_context_tokens or state.context_tokens)
        self.max_action_tokens = int(max_action_tokens)
        self.tokenizer = load_tokenizer(tokenizer)
        self.template = ChatTemplate(self.tokenizer, chat_template=chat_template)
        self.template.require_replies()  # every game has turns after the first
        self.prompts = Prompts(game, prompt_dir)
        self.possible_agents: list[str] = list(state.roles)
        vocab = self.template.vocab_size
        self._action_space = TokenSequence(vocab, self.max_action_tokens)
        self._observation_space = ChatContextSpace(vocab, self.max_context_tokens + self.max_action_tokens)
        self._rng = np.random.default_rng()
        self.match: Match | None = None
        self.seats: dict[str, Seat] = {}
        self.seed: int | None = None
        self.agents: list[str] = []
        self.agent_selection = self.possible_agents[0]
        self.rewards: dict[str, float] = {}
        self._cumulative_rewards: dict[str, float] = {}
        self.terminations: dict[str, bool] = {}
        self.truncations: dict[str, bool] = {}
        self.infos: dict[str, dict[str, Any]] = {}

    # -- PettingZoo's AEC API --------------------------------------------------------------------------

    def observation_space(self, agent: str) -> ChatContextSpace:
        return self._observation_space

    def action_space(self, agent: str) -> TokenSequence:
        return self._action_space

    def reset(self, seed: int | None = None, options: Mapping[str, Any] | None = None) -> None:
        """Deal a new game.

        Args:
            seed: seeds the choice of game (same seed, same game, in any process).
            options: ``{"task_id": "train-x-123"}`` plays the game of a view's task (any role's id names
                the same game), ``{"task": {"seed": 123, "split": "test"}}`` names it by its parts.
        """
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        options = dict(options or {})
        unknown = set(options) - {"task_id", "task"}
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(unknown)}; known: task_id, task")
        split = self.split
        if "task_id" in options:
            split, _, n = GeneratedTaskId.parse(str(options["task_id"]), splits=SPLITS, variants=self.possible_agents,
                                                name=f"{GAMES[self.game].title} game", variant_name="role")
        elif "task" in options:
            task = dict(options["task"])
            if set(task) - {"seed", "split"} or "seed" not in task:
                raise ValueError(f"a task is {{'seed': int, 'split': 'train' | 'test'}}, got {task}")
            split, n = str(task.get("split", self.split)), int(task["seed"])
            if split not in SPLITS:
                raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        else:
            n = int(self._rng.integers(0, 2**31))
        self.seed = n
        self._split = split
        chance, _ = game_rngs(split, n)
        self.match = Match(new_game(self.game, chance, **self.game_options), self.illegal_move_penalty)
        self.seats = {a: Seat(self.template) for a in self.possible_agents}
        self.agents = list(self.possible_agents)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {a: {"task_id": self.task_id(a), "role": a, "turn": 0} for a in self.agents}
        self._turns = dict.fromkeys(self.agents, 0)
        current = self.match.current
        assert current is not None  # a fresh game has a player to move
        self.agent_selection = self.possible_agents[current]
        self._give_turn(self.agent_selection)

    def task_id(self, agent: str) -> str:
        """``agent``'s task id of the game in play: its single-agent view's (``train-x-123``)."""
        return str(GeneratedTaskId(self._split, agent, int(self.seed or 0)))

    def observe(self, agent: str) -> dict[str, Any]:
        """``agent``'s chat context: ``messages``, ``tools`` (none) and ``prompt_ids``; before its first
        turn it has been told nothing (no messages, no ids)."""
        context = self.seats[agent].context if self.seats else None
        if context is None:
            return {"messages": [], "tools": [], "prompt_ids": np.zeros(0, dtype=np.int64)}
        return context.observation()

    def last(self, observe: bool = True) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """What ``agent_selection`` sees: its observation, its reward since it last acted, its flags, its info."""
        agent = self.agent_selection
        obs = self.observe(agent) if observe else None
        return obs, self._cumulative_rewards[agent], self.terminations[agent], self.truncations[agent], self.infos[agent]

    def agent_iter(self, max_iter: int = 2**63) -> Iterator[str]:
        """The agent to act, until every agent has left (each finished agent is stepped once with ``None``)."""
        for _ in range(max_iter):
            if not self.agents:
                return
            yield self.agent_selection

    def step(self, action: Any) -> None:
        """Play ``agent_selection``'s action (its generated token ids), or remove it once its game is over
        (``action`` must then be ``None``). A bad action is no exception: it ends the game (see the module
        docstring)."""
        if self.match is None:
            raise RuntimeError("call reset() before step()")
        if not self.agents:
            raise RuntimeError("the game is over and every agent has left; call reset()")
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            if action is not None:
                raise RuntimeError(f"the game is over for {agent!r}: step it with None (PettingZoo's last step), then reset()")
            self._leave(agent)
            return
        match, player = self.match, self.possible_agents.index(agent)
        self._cumulative_rewards[agent] = 0.0
        self._turns[agent] += 1
        info: dict[str, Any] = {"task_id": self.task_id(agent), "role": agent, "turn": self._turns[agent]}
        read = read_action(self, action)
        if read.problem is not None:
            info["invalid_action"] = read.problem
            match.end(player, "invalid_action", read.problem)
        else:
            if read.cut:
                info["ids_after_end_of_turn"] = read.cut
            self.seats[agent].act(read.ids, read.text)
            match.move(player, read.text)
        self.infos[agent] = info
        if not match.over:
            current = match.current
            assert current is not None
            self.agent_selection = self.possible_agents[current]
            self._give_turn(self.agent_selection)
        if match.over:
            self._finish()
            self.agent_selection = self.possible_agents[1 - player]  # the other agent's last step first

    def render(self) -> str:
        """Each agent's messages, as text."""
        return "\n\n".join(
            f"== {agent}\n" + "\n".join(f"[{m['role']}] {m['content']}" for m in self.observe(agent)["messages"])
            for agent in self.possible_agents
        )

    def close(self) -> None:
        """Nothing to release (no processes, no files)."""

    # -- internals -------------------------------------------------------------------------------------

    def _give_turn(self, agent: str) -> None:
        """Tell ``agent`` what happened and that it is to move; cut the game if its context is full."""
        assert self.match is not None
        seat, player = self.seats[agent], self.possible_agents.index(agent)
        if not seat.give_turn(self.prompts, self.match, player, self.max_context_tokens):
            self.match.end(player, "truncated", f"context would pass max_context_tokens={self.max_context_tokens}")
            return
        assert seat.context is not None
        self.infos[agent].update(new_segment=False, segment=0, context_tokens=len(seat.context))

    def _finish(self) -> None:
        """The game is over: rewards, flags, each agent's closing message and final info."""
        match = self.match
        assert match is not None
        rewards = match.rewards()
        truncated = match.ended is not None and match.ended[1] == "truncated"
        for player, agent in enumerate(self.possible_agents):
            self.rewards[agent] = rewards[player]
            self._cumulative_rewards[agent] += rewards[player]
            self.terminations[agent] = not truncated
            self.truncations[agent] = truncated
            seat = self.seats[agent]
            if not truncated:
                seat.finish(self.prompts, match, player)
            self.infos[agent].update(match.outcome_info(player))
            context = seat.context
            self.infos[agent].update(new_segment=False, segment=0, context_tokens=len(context) if context else 0)

    def _leave(self, agent: str) -> None:
        self.agents.remove(agent)
        if self.agents:
            self.agent_selection = self.agents[0]
