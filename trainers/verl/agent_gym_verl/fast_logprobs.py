"""The hook module of every verl process: imported, it installs the ``worker`` part of the patches.

verl imports the modules its ``VERL_USE_EXTERNAL_MODULES`` names at the end of ``import verl``, in
every verl process, Ray workers included::

    export VERL_USE_EXTERNAL_MODULES=agent_gym_verl.fast_logprobs   # comma-separated, with your own modules

(the run scripts in ``examples/`` do). ``agent_gym_verl.main_ppo`` puts the driver's value into the Ray
job's ``runtime_env`` (:func:`agent_gym_verl.patches.forward_env_to_ray_workers`), so workers get it on a
cluster started with ``ray start`` too; under stock ``verl.trainer.main_ppo``, set it on every node.
Importing this module installs the ``worker`` part of :mod:`agent_gym_verl.patches`: the vectorised
log-probs of :mod:`agent_gym_verl.logprobs` in ``verl.utils.torch_functional`` in place of verl's row
loop (:data:`verl_logprobs_from_logits_v2` keeps verl's), and the guard that lets verl's actors build
their models with trl 1.x installed beside verl (the TRL adapter's trl). It sits above the patches it
installs; nothing of the adapter imports it.
"""

from __future__ import annotations

from verl.utils import torch_functional as _tf

from agent_gym_verl import patches as _patches
from agent_gym_verl.logprobs import CHUNK_ROWS, active_implementation, chunked_logprobs_from_logits

__all__ = ["CHUNK_ROWS", "active_implementation", "chunked_logprobs_from_logits", "verl_logprobs_from_logits_v2"]

_patches.install("worker")

#: verl's own row-loop function, kept for comparison and tests.
verl_logprobs_from_logits_v2 = _tf._agent_gym_original_logprobs_from_logits_v2
