"""Multi-turn text games for agent-r1-gym (``agent_gym_games``): Sokoban, FrozenLake, Wordle.

Registered on ``import agent_gym`` through the ``agent_gym.envs`` entry point :func:`register`.
The game logic (:mod:`.sokoban`, :mod:`.frozenlake`, :mod:`.wordle`) needs only numpy; the envs
are in :mod:`.envs`, the turn loop and context modes in :mod:`.base`.
"""

from __future__ import annotations

__all__ = ["register"]

_PACKAGE = "agent-r1-gym-games"


def register() -> None:
    """Register ``AgentR1/Sokoban-v0``, ``AgentR1/FrozenLake-v0`` and ``AgentR1/Wordle-v0``."""
    from agent_gym.registry import register_env

    register_env(
        "Sokoban-v0",
        "agent_gym_games.envs:SokobanEnv",
        description="Sokoban puzzles (reverse-play generated), multi-turn; reward 1 when all boxes are on targets",
        package=_PACKAGE,
    )
    register_env(
        "FrozenLake-v0",
        "agent_gym_games.envs:FrozenLakeEnv",
        description="FrozenLake (random lakes with a safe path), multi-turn; reward 1 for reaching the goal",
        package=_PACKAGE,
    )
    register_env(
        "Wordle-v0",
        "agent_gym_games.envs:WordleEnv",
        description="Wordle with a shipped word list, multi-turn; reward 1 for guessing the word",
        package=_PACKAGE,
    )
