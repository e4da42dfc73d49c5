"""Self-play: one policy plays every role of a multi-agent env, and each role's turns become a trajectory.

The env is any env in PettingZoo's AEC style whose observations are chat contexts (the multi-agent
games of ``agent_gym_multiagent``: ``MultiAgentEnv("tictactoe", tokenizer)``): ``possible_agents``,
``agents``, ``agent_selection``, ``reset(seed, options)``, ``last()`` and ``step(action)``, each agent's
observation with the ``prompt_ids`` its policy continues from and its ``info`` with the step-info keys.

:func:`play_selfplay` seats each role at a :class:`RoleSeat`, an env with ``areset`` and ``astep`` whose
step plays the role's move and then waits until the role is to move again (or the game is over), and
plays every seat with :func:`~agent_gym.rollout.play_episode`, the one episode loop. So each role's
:class:`~agent_gym.trajectory.Trajectory` is what that role's single-agent view would record (for the
games of ``agent_gym_multiagent``: ``AgentR1/TicTacToe-v0`` with ``role=`` that role, the other role
making the same moves): the same prompt ids, steps, rewards and info, in the file format of every env
(docs/trajectories.md), with ``metadata`` naming the ``role``, the ``match_id`` the roles' trajectories
share and ``opponent="self"``.

The policy is role-conditioned through its prompt: each role's context opens with its own system
prompt ("You are playing TicTacToe as X ..."). ``generate`` may also be a mapping role -> generate
function, to seat different policies (a learner against a frozen copy of itself).

:class:`RoleBaseline` is SPIRAL's role-conditioned advantage estimation (RAE): per game and role a
running mean of the returns, subtracted from each new return, so that a role's built-in edge (the
first player's at TicTacToe) is not credited to its moves.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, Mapping

from agent_gym.rollout.episode import EndEpisode, GenerateFn, play_episode
from agent_gym.rollout.policy import Generation
from agent_gym.trajectory import Trajectory

__all__ = ["RoleBaseline", "RoleSeat", "play_selfplay"]


class _Table:
    """One game's turn-taking: the event of the agent whose turn it is, set after every step."""

    def __init__(self, env: Any):
        self.env = env
        self.turn = {agent: asyncio.Event() for agent in env.possible_agents}

    def signal(self) -> None:
        if self.env.agents:
            self.turn[self.env.agent_selection].set()

    async def wait(self, agent: str) -> None:
        while not (self.env.agents and self.env.agent_selection == agent):
            await self.turn[agent].wait()
            self.turn[agent].clear()


class RoleSeat:
    """One role of a game in play, as an env for :func:`~agent_gym.rollout.play_episode` (async only).

    ``areset`` waits for the role's first turn (the game was dealt by :func:`play_selfplay`; its seed
    and options are ignored here); ``astep`` plays the role's move, waits for its next turn and returns
    what the role sees then: its observation, its reward, its flags and info, as ``env.step`` would.
    """

    spec = None

    def __init__(self, table: _Table, agent: str):
        self._table = table
        self.agent = agent
        #: the role left the game before its first turn
        self.left = False

    @property
    def unwrapped(self) -> RoleSeat:
        return self

    @property
    def tokenizer(self) -> Any:
        return getattr(self._table.env, "tokenizer", None)

    async def areset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        env = self._table.env
        await self._table.wait(self.agent)
        obs, _, terminated, truncated, info = env.last()
        if terminated or truncated:  # the other role's first action ended the game (an invalid one)
            self.left = True
            env.step(None)
            self._table.signal()
        return obs, {"task_id": info["task_id"], "context_tokens": len(obs["prompt_ids"]), "role": self.agent}

    def policy(self, generate: GenerateFn) -> GenerateFn:
        """``generate`` for this seat: a role whose game ended before its first turn plays no step."""

        async def seated(prompt_ids: list[int]) -> Generation:
            if self.left:
                raise EndEpisode("the game ended before this role's first turn")
            return await generate(prompt_ids)

        return seated

    async def astep(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        env, table = self._table.env, self._table
        env.step(action)
        table.signal()
        await table.wait(self.agent)
        obs, reward, terminated, truncated, info = env.last()
        if terminated or truncated:
            env.step(None)  # PettingZoo's last step: this role leaves the game
            table.signal()
        return obs, float(reward), bool(terminated), bool(truncated), dict(info)

    def reset(self, **kwargs: Any) -> Any:
        raise TypeError("a RoleSeat is played by play_selfplay (await areset / astep), not stepped on its own")

    step = reset


async def play_selfplay(
    env: Any,
    generate: GenerateFn | Mapping[str, GenerateFn],
    *,
    seed: int | None = None,
    options: Mapping[str, Any] | None = None,
    match_id: str | None = None,
    env_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> dict[str, Trajectory]:
    """Reset ``env`` (a new game) and play it out, every role's turns generated by ``generate``.

    Args:
        env: a multi-agent env in PettingZoo's AEC style (see the module docstring).
        generate: ``async (prompt_ids) -> Generation``, the one policy of every role (each role's prompt
            says which it plays), or a mapping role -> generate function.
        seed, options: passed to ``env.reset`` (``MultiAgentEnv``: ``{"task_id": "train-x-5"}`` deals that game).
        match_id: the id the roles' trajectories share (default: a fresh uuid); trajectory ids are
            ``<match_id>-<role>``.
        env_id: the trajectories' ``env_id`` (default: ``env.env_id``, ``MultiAgentEnv``'s single-agent id
            of its game, else the class name).
        metadata: extra entries of every trajectory's ``metadata``.

    Returns:
        role -> its :class:`~agent_gym.trajectory.Trajectory` (``task_id`` the role's, ``metadata["role"]``,
        ``["match_id"]``, ``["opponent"]``: ``"self"``, or ``"mapping"`` for a mapping of policies). A role
        whose game ended before its first turn (the other role's first action ended it) has no steps and
        ``metadata["truncated_reason"]`` says so. If one role's ``generate`` raises, the other roles'
        episodes are cancelled and the error propagates.
    """
    agents = list(env.possible_agents)
    if isinstance(generate, Mapping):
        missing = set(agents) - set(generate)
        if missing:
            raise ValueError(f"generate names no function for role(s) {sorted(missing)}; roles: {agents}")
        generators = dict(generate)
    else:
        generators = dict.fromkeys(agents, generate)
    env.reset(seed=seed, options=options)
    table = _Table(env)
    table.signal()
    match_id = match_id or uuid.uuid4().hex
    common = {
        "opponent": "mapping" if isinstance(generate, Mapping) else "self",
        "match_id": match_id,
        # A role's episode had the other roles' policy as its opponent, which no JSON value records:
        # agent_gym.replay says so rather than replaying the moves against some other opponent.
        "env_kwargs_unrecorded": ["opponent"],
        **dict(metadata or {}),
    }
    seats = {agent: RoleSeat(table, agent) for agent in agents}
    tasks = {
        agent: asyncio.ensure_future(play_episode(
            seat, seat.policy(generators[agent]), seed=seed, trajectory_id=f"{match_id}-{agent}",
            env_id=env_id or getattr(env, "env_id", type(env).__name__), metadata={**common, "role": agent}))
        for agent, seat in seats.items()
    }
    try:
        await asyncio.wait(tasks.values(), return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for task in tasks.values():
            if not task.done():
                task.cancel()  # the other roles wait for a turn that will not come
        await asyncio.gather(*tasks.values(), return_exceptions=True)
    for task in tasks.values():
        failure = None if task.cancelled() else task.exception()
        if failure is not None:
            raise failure  # the failure, not the cancellation it caused
    return {agent: task.result() for agent, task in tasks.items()}


class RoleBaseline:
    """Role-conditioned advantage estimation (SPIRAL's RAE): per (game, role), an exponential moving
    average of the returns, ``b <- decay * b + (1 - decay) * R``, starting at 0.

    :meth:`advantage` returns ``R - b`` with ``b`` as it was before this return (a return does not lower
    its own advantage), then updates ``b``. A game is named by any string: :meth:`advantages` uses the
    trajectories' ``env_id``.
    """

    def __init__(self, decay: float = 0.95):
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"decay must be in [0, 1), got {decay}")
        self.decay = float(decay)
        self._values: dict[tuple[str, str], float] = {}

    def baseline(self, game: str, role: str) -> float:
        return self._values.get((game, role), 0.0)

    def advantage(self, game: str, role: str, ret: float) -> float:
        """``ret - baseline(game, role)``; then the baseline moves toward ``ret``."""
        b = self.baseline(game, role)
        self._values[(game, role)] = self.decay * b + (1.0 - self.decay) * float(ret)
        return float(ret) - b

    def advantages(self, trajectories: Mapping[str, Trajectory]) -> dict[str, float]:
        """The advantage of each role's trajectory of one game (:func:`play_selfplay`'s result), keyed by
        the trajectories' ``env_id``; a role with no steps gets 0 and leaves its baseline alone."""
        return {role: self.advantage(t.env_id, role, t.return_) if t.steps else 0.0 for role, t in trajectories.items()}

    def values(self) -> dict[str, float]:
        """``"game/role"`` -> its baseline now."""
        return {f"{g}/{r}": round(v, 6) for (g, r), v in sorted(self._values.items())}
