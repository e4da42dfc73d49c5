"""Two-player games and self-play for agent-r1-gym (``agent_gym_multiagent``).

- :mod:`.games`: the rules (TicTacToe, Kuhn Poker and Connect Four from OpenSpiel; Simple Negotiation);
- :mod:`.view`: the single-agent views registered as ``AgentR1/TicTacToe-v0``, ``AgentR1/KuhnPoker-v0``,
  ``AgentR1/ConnectFour-v0`` and ``AgentR1/Negotiation-v0``, with ``opponent=``;
- :mod:`.aec`: :class:`MultiAgentEnv`, the multi-agent API in PettingZoo's AEC style (one chat context
  with exact prompt ids per agent), which :func:`agent_gym.rollout.play_selfplay` plays with one policy in
  every role (a trajectory per role; :class:`agent_gym.rollout.RoleBaseline` is SPIRAL's RAE).

Registered on ``import agent_gym`` through the ``agent_gym.envs`` entry point :func:`register`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ENV_IDS", "MultiAgentEnv", "register"]

_PACKAGE = "agent-r1-gym-multiagent"

#: Game name -> the id of its single-agent view (as :data:`agent_gym_multiagent.games.ENV_IDS`, which
#: would import the rules: `import agent_gym` runs register() and imports no game).
ENV_IDS = {
    "tictactoe": "AgentR1/TicTacToe-v0",
    "kuhnpoker": "AgentR1/KuhnPoker-v0",
    "connectfour": "AgentR1/ConnectFour-v0",
    "negotiation": "AgentR1/Negotiation-v0",
}


def register() -> None:
    """Register the single-agent views of the four games."""
    from agent_gym.registry import register_env

    register_env("TicTacToe-v0", "agent_gym_multiagent.view:TicTacToeEnv", package=_PACKAGE,
                 description="TicTacToe (OpenSpiel's rules) against opponent= (random, heuristic, a policy); reward +1/0/-1")
    register_env("KuhnPoker-v0", "agent_gym_multiagent.view:KuhnPokerEnv", package=_PACKAGE,
                 description="Kuhn Poker (OpenSpiel's rules) against opponent=; reward the chips won (+-1, +-2)")
    register_env("ConnectFour-v0", "agent_gym_multiagent.view:ConnectFourEnv", package=_PACKAGE,
                 description="Connect Four (OpenSpiel's rules) against opponent=; reward +1/0/-1")
    register_env("Negotiation-v0", "agent_gym_multiagent.view:NegotiationEnv", package=_PACKAGE,
                 description="Simple Negotiation (trade resources, private values) against opponent=; reward +1/0/-1")


def __getattr__(name: str) -> Any:
    # Lazy: `import agent_gym` runs register() and must not import the games or OpenSpiel.
    if name == "MultiAgentEnv":
        from agent_gym_multiagent.aec import MultiAgentEnv

        return MultiAgentEnv
    raise AttributeError(f"module 'agent_gym_multiagent' has no attribute {name!r}")
