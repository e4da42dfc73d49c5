"""verl adapter for agent-r1-gym: train any registered env with verl.

- :mod:`agent_gym_verl.agent_loop`: the verl agent loops ``agent_gym`` (concat mode) and
  ``agent_gym_step`` (step mode);
- :mod:`agent_gym_verl.step_advantage`: step-mode batch expansion and trajectory-aware advantages;
- :mod:`agent_gym_verl.trainer` / :mod:`agent_gym_verl.main_ppo`: the small trainer extension step mode
  needs (``python -m agent_gym_verl.main_ppo`` takes verl's usual hydra options);
- :mod:`agent_gym_verl.export`: any env's task source to verl's parquet format;
- :mod:`agent_gym_verl.compat`: every difference between verl 0.7.x and 0.9.x;
- :mod:`agent_gym_verl.patches`: every change the adapter makes to verl's own objects (a table of them),
  installed by ``patches.install()``; :mod:`agent_gym_verl.fast_logprobs` installs the part every verl
  process needs, from verl's ``VERL_USE_EXTERNAL_MODULES`` hook.

Importing this package does not import verl; the submodules above do.
"""

from __future__ import annotations

from pathlib import Path

__version__ = "0.2.0.dev0"

#: The agent-loop config file to pass as ``actor_rollout_ref.rollout.agent.agent_loop_config_path``.
AGENT_LOOP_CONFIG = str(Path(__file__).resolve().parent / "config" / "agent_loops.yaml")

__all__ = ["AGENT_LOOP_CONFIG", "__version__"]
