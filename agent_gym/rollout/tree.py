"""Tree rollouts: branch an episode at chosen steps, generating the shared prefix once.

:func:`play_tree` plays one episode (the root) with :func:`~agent_gym.rollout.episode.play_episode`'s
step loop, taking an env snapshot (:mod:`agent_gym.core.snapshot`) before every step. At each branch
point, step ``k`` of a trajectory, ``width - 1`` new branches start from that snapshot in fresh envs: each
generates its own action ``k`` and plays to the end, branching again at its own later branch points. The
steps before ``k`` are not generated again; a branch's trajectory holds them (copied from its parent)
and says how many are shared (``metadata["tree"]["shared_steps"]``).

Branch points: ``branch_at="every"`` (every step, bounded by ``max_leaves``), a collection of step
indices, ``"entropy"``: the ``top_k`` steps of the root whose sampled actions had the highest mean
surprisal (``-log p`` per token, an estimate of the policy's entropy there; needs log-probs), or a
function of the root's steps that returns the indices to branch at (a uniformly random step, say).
``"entropy"`` and a function give a tree of depth one: only the root branches.

:func:`tree_advantages` gives per-state group advantages: at a branch point the continuations from that
state (the parent's own and its children's) form a GRPO group; each continuation's value is the mean
return of the leaves under it, its advantage ``(value - group mean) / (group std + eps)``, and it applies
to the continuation's steps from the branch point to its own next branch point.
"""

from __future__ import annotations

import asyncio
import functools
import math
import statistics
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Literal, Mapping

import numpy as np

from agent_gym.core.snapshot import EnvSnapshot, make_like, restore
from agent_gym.rollout.episode import GenerateFn, _play_steps, _truncated_reason, env_id_of, replay_metadata
from agent_gym.trajectory import StepRecord, Trajectory

__all__ = ["play_tree", "tree_advantages", "TreeStats"]

#: ``(the root's steps) -> the step indices to branch at``: a branch rule computed from the played root.
BranchFn = Callable[[list[StepRecord]], Collection[int]]
BranchAt = Literal["every", "entropy"] | Collection[int] | BranchFn


@dataclass
class TreeStats:
    """What a tree cost: generate calls (one per generated step) and generated tokens, and what a flat
    rollout of as many whole episodes as the tree has leaves would have generated."""

    leaves: int = 0
    generated_steps: int = 0
    generated_tokens: int = 0
    flat_steps: int = 0
    flat_tokens: int = 0


@dataclass
class _Branch:
    id: str
    parent: str | None
    branch_step: int | None  # the step this branch generated first (None: the root)
    steps: list[StepRecord]
    snapshots: list[EnvSnapshot]  # snapshots[k]: the env before step k
    messages: list[dict[str, Any]]
    finish_reasons: list[str] = field(default_factory=list)  # one per step, the shared ones included
    truncated_reason: str | None = None
    tail_ids: list[int] = field(default_factory=list)  # the env's reply after the last action, when stopped
    generate_s: float = 0.0  # seconds in generate and in the env, for its own steps
    env_s: float = 0.0


async def _play_from(env: Any, generate: GenerateFn, branch: _Branch, *, max_steps: int | None) -> None:
    """Play from ``env``'s current state to the end with the episode engine's step loop, appending the
    records and a snapshot of the env before every step."""
    base = env.unwrapped
    played = await _play_steps(
        env,
        generate,
        base.context.observation(),
        branch.id,
        max_steps=max_steps,
        on_step=None,
        before_step=lambda: branch.snapshots.append(base.snapshot()),
        first_step=len(branch.steps),
    )
    branch.steps.extend(played.steps)
    branch.finish_reasons.extend(played.finish_reasons)
    branch.messages = played.obs["messages"]
    branch.truncated_reason = _truncated_reason(played)
    branch.generate_s, branch.env_s = played.generate_s, played.env_s
    if played.stopped is not None and branch.steps and not branch.steps[-1].new_segment:
        last = branch.steps[-1]
        branch.tail_ids = np.asarray(played.obs["prompt_ids"]).tolist()[len(last.prompt_ids) + len(last.response_ids):]


def _surprisal(record: StepRecord) -> float:
    lps = record.response_logprobs
    if not lps:
        return -math.inf
    return -statistics.fmean(lps)


def _branch_points(branch: _Branch, branch_at: BranchAt, top_k: int) -> list[int]:
    first = 0 if branch.branch_step is None else branch.branch_step + 1
    last = len(branch.steps)
    if callable(branch_at):
        if branch.branch_step is not None:
            return []  # the root's points only: a tree of depth one
        return sorted(k for k in set(int(k) for k in branch_at(list(branch.steps))) if first <= k < last)
    if branch_at == "every":
        return list(range(first, last))
    if branch_at == "entropy":
        if branch.branch_step is not None:
            return []  # the root's top-k states only: a tree of depth one
        if any(s.response_logprobs is None for s in branch.steps):
            raise ValueError("branch_at='entropy' needs log-probs: the generate function must return Generation.logprobs")
        ranked = sorted(range(last), key=lambda k: (-_surprisal(branch.steps[k]), k))
        return sorted(ranked[:top_k])
    return sorted(k for k in set(int(k) for k in branch_at) if first <= k < last)


async def play_tree(
    env: Any,
    generate: GenerateFn,
    *,
    width: int = 2,
    branch_at: BranchAt = "every",
    top_k: int = 1,
    max_leaves: int = 64,
    make_env: Callable[[], Any] | None = None,
    seed: int | None = None,
    task_id: str | None = None,
    options: Mapping[str, Any] | None = None,
    env_id: str | None = None,
    max_steps: int | None = None,
    metadata: Mapping[str, Any] | None = None,
    stats: TreeStats | None = None,
    release_env: Callable[[Any, bool], None] | None = None,
) -> list[Trajectory]:
    """Play a tree of episodes from one reset (see the module docstring).

    Args:
        env: the root's env (reset here); each new branch plays in a fresh env from ``make_env``.
        generate: as for :func:`~agent_gym.rollout.episode.play_episode`; sample (temperature > 0) so
            that branches differ.
        width: continuations per branch point, the parent's own included (``width - 1`` new branches).
        branch_at: ``"every"``, ``"entropy"``, the step indices to branch at, or a function called once,
            with the root's steps once it has been played, that returns them (only the root branches).
        top_k: with ``"entropy"``, how many of the root's steps to branch at.
        max_leaves: stop adding branches once the tree has this many leaves.
        make_env: a fresh env of the same id and arguments (default: ``gym.make`` with ``env``'s spec).
        seed / task_id / options: the reset of the root.
        env_id: recorded in the trajectories (default: the env's id).
        max_steps: a cap on each trajectory's steps.
        metadata: extra entries for every trajectory's ``metadata``.
        stats: a :class:`TreeStats` to fill in (generated against flat-rollout cost).
        release_env: called with each branch's env and whether the branch played to its end (``False``:
            it raised), instead of closing the env: give envs from a pool back to it (``make_env`` took
            them from there), count the branches in flight.

    Returns:
        Every trajectory of the tree (the root first, then branches in the order they were made);
        ``metadata["tree"]`` holds ``root``, ``parent``, ``branch_step`` (the first step it generated
        itself) and ``shared_steps`` (the steps copied from its parent). As with
        :func:`~agent_gym.rollout.episode.play_episode`, ``metadata`` has ``finish_reasons`` (one per step)
        and ``truncated_reason``, ``generate_s`` and ``env_s`` (the seconds of the steps it generated
        itself), and ``tail_ids`` the env's last reply of a trajectory stopped by
        :class:`~agent_gym.rollout.episode.EndEpisode` or ``max_steps``.

    Raises:
        SnapshotError: the env cannot be forked (the reason); ValueError: bad ``width`` or ``branch_at``.
    """
    if width < 2:
        raise ValueError(f"width must be >= 2 (the parent's continuation and at least one branch), got {width}")
    if make_env is None:
        if env.unwrapped.spec is None:
            raise ValueError("env was not made by gym.make: pass make_env= (a fresh env of the same kind)")
        make_env = functools.partial(make_like, env)
    reset_options = dict(options or {})
    if task_id is not None:
        reset_options["task_id"] = str(task_id)
    env.reset(seed=seed, options=reset_options or None)
    env_id = env_id or env_id_of(env)
    tree_id = uuid.uuid4().hex[:12]
    root = _Branch(f"{tree_id}-0", None, None, [], [], [])
    await _play_from(env, generate, root, max_steps=max_steps)
    branches = await _grow(root, generate, make_env, width=width, branch_at=branch_at, top_k=top_k,
                           max_leaves=max_leaves, max_steps=max_steps, tree_id=tree_id, release_env=release_env)
    extra = {**replay_metadata(env, reset_options), **dict(metadata or {})}
    out = [_trajectory(b, root.id, env_id, seed, extra) for b in branches]
    if stats is not None:
        _fill_stats(stats, out)
    return out


async def _grow(
    root: _Branch,
    generate: GenerateFn,
    make_env: Callable[[], Any],
    *,
    width: int,
    branch_at: BranchAt,
    top_k: int,
    max_leaves: int,
    max_steps: int | None,
    tree_id: str,
    release_env: Callable[[Any, bool], None] | None = None,
) -> list[_Branch]:
    """Every branch of the tree, breadth first from the played ``root``: each branch's branch points get
    ``width - 1`` new branches, played concurrently, until ``max_leaves``."""
    branches = [root]
    leaves = 1
    queue = [root]
    while queue and leaves < max_leaves:
        parent = queue.pop(0)
        starts: list[int] = []
        for k in _branch_points(parent, branch_at, top_k):
            for _ in range(width - 1):
                if leaves >= max_leaves:
                    break
                starts.append(k)
                leaves += 1
        children = [
            _Branch(f"{tree_id}-{len(branches) + i}", parent.id, k,
                    [s.model_copy(update={"trajectory_id": f"{tree_id}-{len(branches) + i}"}) for s in parent.steps[:k]],
                    list(parent.snapshots[:k]), [], finish_reasons=list(parent.finish_reasons[:k]))
            for i, k in enumerate(starts)
        ]
        # every branch plays to its end (or error) before a failure is raised: none is left running
        results = await asyncio.gather(
            *(_play_branch(child, parent, generate, make_env, max_steps, release_env) for child in children),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result
        branches.extend(children)
        queue.extend(children)
    return branches


async def _play_branch(
    child: _Branch,
    parent: _Branch,
    generate: GenerateFn,
    make_env: Callable[[], Any],
    max_steps: int | None,
    release_env: Callable[[Any, bool], None] | None = None,
) -> None:
    """Play ``child`` from its parent's snapshot at its branch step, in a fresh env closed (or given to
    ``release_env``) afterwards."""
    env = make_env()
    played = False
    try:
        fresh = restore(env, parent.snapshots[child.branch_step or 0])
        await _play_from(fresh, generate, child, max_steps=max_steps)
        played = True
    finally:
        if release_env is None:
            env.close()
        else:
            release_env(env, played)


def _trajectory(branch: _Branch, root: str, env_id: str, seed: int | None, extra: Mapping[str, Any]) -> Trajectory:
    steps = branch.steps
    shared = 0 if branch.branch_step is None else branch.branch_step
    return Trajectory(
        id=branch.id,
        env_id=env_id,
        task_id=steps[0].info.get("task_id") if steps else None,
        seed=seed,
        steps=steps,
        messages=branch.messages,
        reward=steps[-1].reward if steps else 0.0,
        tail_ids=branch.tail_ids,
        metadata={"tree": {"root": root, "parent": branch.parent, "branch_step": branch.branch_step, "shared_steps": shared},
                  "finish_reasons": branch.finish_reasons, "truncated_reason": branch.truncated_reason,
                  "generate_s": branch.generate_s, "env_s": branch.env_s, **extra},
    )


def _fill_stats(stats: TreeStats, trajectories: list[Trajectory]) -> None:
    for t in trajectories:
        shared = t.metadata["tree"]["shared_steps"]
        stats.generated_steps += len(t.steps) - shared
        stats.generated_tokens += sum(len(s.response_ids) for s in t.steps[shared:])
    stats.leaves = len(trajectories)  # every trajectory ends in a leaf of its own
    stats.flat_steps = sum(len(t.steps) for t in trajectories)
    stats.flat_tokens = sum(len(s.response_ids) for t in trajectories for s in t.steps)


def tree_advantages(trajectories: list[Trajectory], *, eps: float = 1e-6) -> dict[str, list[float | None]]:
    """Per-state GRPO advantages of a tree from :func:`play_tree` (see the module docstring).

    Returns:
        trajectory id -> one advantage per step: the steps it generated get the advantage of their
        continuation in the group of the branch point they follow; the steps it shares with its parent
        get ``None`` (they are trained once, in the parent). Root steps before the first branch point get
        0.0 (one root: nothing to compare them with; compare roots across tasks with flat GRPO).
    """
    children: dict[str, list[Trajectory]] = {t.id: [] for t in trajectories}
    for t in trajectories:
        parent = t.metadata["tree"]["parent"]
        if parent is not None:
            children[parent].append(t)

    def value(t: Trajectory, from_step: int) -> float:
        """Mean return of the leaves of ``t``'s continuation from ``from_step`` (itself and the branches
        it made at or after that step)."""
        returns = [t.return_]
        for c in children[t.id]:
            if c.metadata["tree"]["branch_step"] >= from_step:
                returns.append(value(c, c.metadata["tree"]["branch_step"]))
        return statistics.fmean(returns)

    out: dict[str, list[float | None]] = {
        t.id: [None] * t.metadata["tree"]["shared_steps"] + [0.0] * (len(t.steps) - t.metadata["tree"]["shared_steps"])
        for t in trajectories
    }
    for t in trajectories:
        points = sorted({c.metadata["tree"]["branch_step"] for c in children[t.id]})
        for k in points:
            group = [t] + [c for c in children[t.id] if c.metadata["tree"]["branch_step"] == k]
            values = [value(t, k + 1)] + [value(c, k) for c in group[1:]]
            mean = statistics.fmean(values)
            std = statistics.pstdev(values)
            for member, v in zip(group, values):
                own = member.metadata["tree"]
                start = k
                later = [c.metadata["tree"]["branch_step"] for c in children[member.id]
                         if c.metadata["tree"]["branch_step"] > k]
                stop = min(later) if later else len(member.steps)
                adv = (v - mean) / (std + eps)
                for j in range(start, stop):
                    if j >= own["shared_steps"]:
                        out[member.id][j] = adv
    return out
