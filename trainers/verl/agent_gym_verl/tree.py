"""Tree rollouts in step mode: one tree of episodes per dataset row, trained with per-state GRPO groups.

Turned on by ``agent_gym.tree`` in the run's config (hydra: ``+agent_gym.tree.width=3``); every key is
optional, and any one of them turns tree mode on:

- ``agent_gym.tree.width`` (2): continuations per branch point, the parent's own included;
- ``agent_gym.tree.branch_at`` (``every``): ``every`` (each step of each trajectory, recursively),
  ``entropy`` (the ``top_k`` steps of the root whose sampled actions were least likely: the highest mean
  ``-log p``), or a list of step indices (hydra: ``'+agent_gym.tree.branch_at=[0,2]'``);
- ``agent_gym.tree.top_k`` (1): with ``entropy``, how many of the root's steps branch;
- ``agent_gym.tree.max_leaves`` (8): no new branch once the tree has this many leaves (trajectories).

What a training row is. The step-mode loop (``agent_gym_step``) plays, for each dataset row in training,
one tree with :func:`agent_gym.rollout.tree.play_tree` (the root episode, then ``width - 1`` branches
from the env's snapshot at each branch point, concurrently). Each trajectory of the tree contributes the
steps it generated itself, once: the root all of its steps, a branch the steps from its branch step on
(its first sample's prompt is the whole context at its branch step); the steps a branch shares with its
parent are trained in the parent only. Those steps are cut into samples as step mode cuts any trajectory
(``agent_gym.samples``: segments by default, or single steps), and travel in ``extra_fields`` like any
step-mode trajectory's; the row itself is the root's first step. Validation plays one episode per row,
as without trees (the trainer marks validation batches, see :data:`VALIDATE_KEY`).

The advantage of a policy token (every token of a step gets its step's advantage; env tokens 0).
For a prompt ``x`` with ``rollout.n`` rows, the ``n`` trees ``T_1 .. T_n`` share verl's ``uid``. In a tree,
``R(tau)`` is a trajectory's return (the sum of its step rewards, the shared steps' included) and every
trajectory ends in a leaf of its own, so the tree's value is the mean return of its leaves::

    V(T_i) = mean_{tau in T_i} R(tau)

- **Steps at or after a branch point** (every step of a branch; the root's from its first branch point
  on) get :func:`agent_gym.rollout.tree.tree_advantages`: at a branch point ``k`` of trajectory ``tau``
  the group is ``tau``'s own continuation (value: the mean return of ``tau`` and of the branches it made
  after ``k``) and each branch made at ``k`` (value: the mean return of the branch and its own branches);
  a member's advantage ``(v - mean(group)) / (pstdev(group) + 1e-6)`` (population standard deviation)
  applies to its steps from ``k`` up to its own next branch point.
- **The root's steps before its first branch point** (all its steps when it made no branch) have no
  alternative inside the tree; they get verl's GRPO advantage over the ``n`` trees of the prompt, each
  tree one group member with score ``V(T_i)``: ``(V_i - mean_j V_j) / (std_j V_j + 1e-6)``, ``std``
  the unbiased one (``torch.std``), verl's own ``compute_advantage`` with the run's settings (verl's
  epsilon; a group of one tree gets ``V_i`` itself, as verl gives a lone response its score).

``returns`` = the advantages. Only the GRPO estimators (``grpo``, ``grpo_vectorized``) run in tree mode,
with ``norm_adv_by_std_in_grpo=True`` (the per-state groups are always normalised) and without
``use_kl_in_reward`` (tree values are env returns; use ``actor.use_kl_loss`` for a KL term); anything else
is refused when the trainer starts (:func:`agent_gym_verl.step_advantage.check_tree_estimator`).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from agent_gym_verl.samples import samples_and_layout

__all__ = [
    "TREE_KEYS",
    "TreeConfig",
    "tree_config",
    "tree_samples",
    "tree_value",
    "root_prefix_steps",
    "tree_fields",
    "SAMPLE_ADVANTAGES",
    "SAMPLE_ROOT_PREFIX",
    "VALUE_KEY",
    "TRAJECTORIES_KEY",
    "GENERATED_STEPS_KEY",
    "FLAT_STEPS_KEY",
    "VALIDATE_KEY",
]

#: The keys ``agent_gym.tree`` takes.
TREE_KEYS = ("width", "branch_at", "top_k", "max_leaves")
#: A tree sample's per-response-id advantage from :func:`~agent_gym.rollout.tree.tree_advantages` (0.0 on
#: env ids and on the root-prefix ids, whose advantage is computed across trees by the trainer).
SAMPLE_ADVANTAGES = "tree_advantages"
#: A tree sample's per-response-id flag: True on the policy ids of the root's steps before its first
#: branch point (their advantage is the root group's, across the prompt's trees).
SAMPLE_ROOT_PREFIX = "tree_root_prefix"
#: ``extra_fields`` of a tree row: the tree's value ``V(T)`` (mean leaf return), its trajectories, the
#: steps the tree generated, and the steps as many whole episodes would have generated.
VALUE_KEY = "agent_gym_tree_value"
TRAJECTORIES_KEY = "agent_gym_tree_trajectories"
GENERATED_STEPS_KEY = "agent_gym_tree_generated_steps"
FLAT_STEPS_KEY = "agent_gym_tree_flat_steps"
#: Non-tensor column the trainer adds to validation batches in tree mode: the loop then plays one
#: episode per row (verl hands an agent loop no other sign of validation).
VALIDATE_KEY = "agent_gym_validate"


@dataclass(frozen=True)
class TreeConfig:
    """``agent_gym.tree`` (see the module docstring): :func:`~agent_gym.rollout.tree.play_tree`'s tree shape."""

    width: int = 2
    branch_at: str | tuple[int, ...] = "every"
    top_k: int = 1
    max_leaves: int = 8

    def play_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of :func:`~agent_gym.rollout.tree.play_tree` this config gives."""
        branch_at: Any = self.branch_at if isinstance(self.branch_at, str) else set(self.branch_at)
        return {"width": self.width, "branch_at": branch_at, "top_k": self.top_k, "max_leaves": self.max_leaves}


def _int_at_least(value: Any, minimum: int, key: str, why: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < minimum:
        raise ValueError(f"agent_gym.tree.{key} must be an integer >= {minimum} ({why}), got {value!r}")
    return int(value)


def _branch_at(value: Any) -> str | tuple[int, ...]:
    if isinstance(value, str) and value in ("every", "entropy"):
        return value
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, str) and isinstance(value, Sequence) and value:
        steps = tuple(sorted({_int_at_least(v, 0, "branch_at", "a step index") for v in value}))
        return steps
    raise ValueError(
        f"agent_gym.tree.branch_at must be 'every', 'entropy' or a non-empty list of step indices (hydra: "
        f"'+agent_gym.tree.branch_at=[0,2]'), got {value!r}"
    )


def tree_config(flags: Any) -> TreeConfig | None:
    """The tree settings of a run's ``agent_gym`` config section (``None``: tree mode is off).

    Args:
        flags: the ``agent_gym`` mapping (a dict or an OmegaConf node) or ``None``.

    Returns:
        The :class:`TreeConfig` when ``agent_gym.tree`` is a non-empty mapping, else ``None``.

    Raises:
        ValueError: an unknown key or a bad value (the message names the key and what it takes).
    """
    tree = None if flags is None else flags.get("tree", None)
    if tree is None or tree is False:
        return None
    if not isinstance(tree, Mapping) and not hasattr(tree, "items"):
        raise ValueError(f"agent_gym.tree must be a mapping of {', '.join(TREE_KEYS)}, got {tree!r}")
    items = {str(k): v for k, v in tree.items()}
    if not items:
        return None
    unknown = sorted(set(items) - set(TREE_KEYS))
    if unknown:
        raise ValueError(f"agent_gym.tree takes {', '.join(TREE_KEYS)}; unknown key(s): {', '.join(unknown)}")
    default = TreeConfig()
    branch_at = items.get("branch_at", default.branch_at)
    if hasattr(branch_at, "__iter__") and not isinstance(branch_at, str):
        branch_at = list(branch_at)  # an OmegaConf ListConfig
    return TreeConfig(
        width=_int_at_least(items.get("width", default.width), 2, "width", "the parent's continuation and at least one branch"),
        branch_at=_branch_at(branch_at),
        top_k=_int_at_least(items.get("top_k", default.top_k), 1, "top_k", "steps of the root to branch at"),
        max_leaves=_int_at_least(items.get("max_leaves", default.max_leaves), 1, "max_leaves", "trajectories per tree"),
    )


def _tree_meta(trajectory: Any) -> dict[str, Any]:
    return dict(trajectory.metadata["tree"])


def root_prefix_steps(trajectories: Sequence[Any]) -> int:
    """How many of the root's steps come before its first branch point (all of them without a branch).

    Args:
        trajectories: a tree from :func:`~agent_gym.rollout.tree.play_tree` (the root first).
    """
    root = trajectories[0]
    starts = [_tree_meta(t)["branch_step"] for t in trajectories if _tree_meta(t)["parent"] == root.id]
    return min(starts) if starts else len(root.steps)


def tree_value(trajectories: Sequence[Any]) -> float:
    """``V(T)``: the mean return of the tree's leaves (each trajectory ends in a leaf of its own)."""
    return statistics.fmean(float(t.return_) for t in trajectories)


def tree_samples(trajectories: Sequence[Any], kind: str = "segment") -> list[dict[str, Any]]:
    """The training samples of a tree: each trajectory's own steps, once, with their tree advantages.

    Args:
        trajectories: a tree from :func:`~agent_gym.rollout.tree.play_tree` (the root first).
        kind: ``"segment"`` or ``"step"``, as :func:`agent_gym_verl.samples.step_samples` cuts them.

    Returns:
        Per trajectory in tree order, the samples of its steps from ``shared_steps`` on (a branch's first
        sample starts at its branch step, prompt = the context there), laid out as
        :func:`~agent_gym_verl.samples.step_samples` lays out a trajectory of those steps (segment
        ``steps`` are positions in the whole trajectory), plus :data:`SAMPLE_ADVANTAGES` (per response id:
        the step's :func:`~agent_gym.rollout.tree.tree_advantages` value on policy ids, 0.0 on env ids and
        on root-prefix ids), :data:`SAMPLE_ROOT_PREFIX` (per response id) and ``shared_steps``.

    Raises:
        ValueError: an unknown ``kind``, or a tree without its ``metadata["tree"]``.
    """
    from agent_gym.rollout.tree import tree_advantages
    from agent_gym.trajectory import Trajectory

    if not trajectories or "tree" not in trajectories[0].metadata:
        raise ValueError("tree_samples takes the trajectories play_tree returns (metadata['tree'] on each)")
    advantages = tree_advantages(list(trajectories))
    root = trajectories[0]
    prefix = root_prefix_steps(trajectories)
    out: list[dict[str, Any]] = []
    for trajectory in trajectories:
        shared = int(_tree_meta(trajectory)["shared_steps"])
        # a trajectory of its own steps only (the env's reply after a stopped episode's last action kept,
        # masked, as flat step mode keeps it)
        own = Trajectory(id=trajectory.id, env_id=trajectory.env_id, steps=trajectory.steps[shared:],
                         tail_ids=list(trajectory.tail_ids))
        samples, ids = samples_and_layout(own, kind)
        step_adv = advantages[trajectory.id]
        for sample, (index, mask) in zip(samples, ids):
            adv = np.zeros(len(index), dtype=np.float32)
            root_prefix = np.zeros(len(index), dtype=bool)
            for i, (position, policy) in enumerate(zip(index, mask)):
                if not policy:
                    continue
                k = shared + position
                if trajectory is root and k < prefix:
                    root_prefix[i] = True
                    continue
                value = step_adv[k]
                if value is None:  # tree_advantages gives None to shared steps only, and these are not shared
                    raise AssertionError(f"tree_advantages gave step {k} of {trajectory.id} no advantage")
                adv[i] = value
            if "steps" in sample:
                sample["steps"] = [int(sample["steps"][0]) + shared, int(sample["steps"][1]) + shared]
            sample["shared_steps"] = shared
            sample[SAMPLE_ADVANTAGES] = adv
            sample[SAMPLE_ROOT_PREFIX] = root_prefix
        out.extend(samples)
    return out


def tree_fields(trajectories: Sequence[Any]) -> dict[str, Any]:
    """The ``extra_fields`` a tree row adds: :data:`VALUE_KEY`, :data:`TRAJECTORIES_KEY`,
    :data:`GENERATED_STEPS_KEY` and :data:`FLAT_STEPS_KEY`."""
    generated = sum(len(t.steps) - int(_tree_meta(t)["shared_steps"]) for t in trajectories)
    return {
        VALUE_KEY: tree_value(trajectories),
        TRAJECTORIES_KEY: len(trajectories),
        GENERATED_STEPS_KEY: generated,
        FLAT_STEPS_KEY: sum(len(t.steps) for t in trajectories),
    }
