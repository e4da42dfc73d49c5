"""TRL adapter for agent-r1-gym: train any registered env with TRL's ``GRPOTrainer``, multi-turn included.

- :class:`EnvRollout`: the ``rollout_func`` (episodes through the episode engine, generation by TRL's own
  backend, ``env_mask`` on the env's tokens, the env's counters as metrics);
- :func:`env_reward`: the reward function that returns each episode's return;
- :func:`env_dataset`: a ``datasets.Dataset`` of an env's own tasks, each row routed to its env.

Importing this package imports neither trl nor torch; ``env_dataset`` needs ``datasets``.
"""

from __future__ import annotations

from agent_gym_trl.dataset import ROUTE_KEY, Route, env_dataset, env_rows, route_of
from agent_gym_trl.rollout import TESTED_TRL, EnvRollout, env_reward

__version__ = "0.2.0.dev0"

__all__ = ["EnvRollout", "ROUTE_KEY", "Route", "TESTED_TRL", "env_dataset", "env_reward", "env_rows", "route_of", "__version__"]
