"""How step mode cuts a trajectory into training samples (``agent_gym.samples``): one per segment or one
per env step, each with its token rewards placed.

Used by the step-mode agent loop (:mod:`agent_gym_verl.agent_loop`), which carries the samples in
``extra_fields[STEPS_KEY]``, by tree mode (:mod:`agent_gym_verl.tree`), which lays out each trajectory
of a tree the same way, and by :mod:`agent_gym_verl.step_advantage`, which expands them. Plain data
(numpy only, no verl), so every one of them imports it and it imports none of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["SAMPLE_KINDS", "STEPS_KEY", "samples_and_layout", "step_samples"]

#: ``extra_fields`` / ``non_tensor_batch`` key that carries a step-mode trajectory's steps.
STEPS_KEY = "agent_gym_steps"
#: How step mode cuts a trajectory into training samples (``agent_gym.samples``; default ``"segment"``).
SAMPLE_KINDS = ("segment", "step")


@dataclass
class _SampleLayout:
    """A trajectory cut into training samples: the samples (``token_rewards`` still to place), and per
    sample the trajectory step of each response id and whether the policy generated it (1) or the env (0);
    ``sample_of_step`` maps each trajectory step to the sample that holds it."""

    samples: list[dict[str, Any]] = field(default_factory=list)
    ids: list[tuple[list[int], list[int]]] = field(default_factory=list)
    sample_of_step: dict[int, int] = field(default_factory=dict)


def _step_layout(trajectory: Any) -> _SampleLayout:
    """One sample per env step (``"step"``): the step's whole context as prompt, its action as response."""
    layout = _SampleLayout()
    for k, record in enumerate(trajectory.steps):
        n = len(record.response_ids)
        layout.sample_of_step[k] = len(layout.samples)
        layout.samples.append(
            {
                "trajectory_id": trajectory.id,
                "step": record.step,
                "prompt_ids": np.asarray(record.prompt_ids, dtype=np.int64),
                "response_ids": np.asarray(record.response_ids, dtype=np.int64),
                "logprobs": None if record.response_logprobs is None else np.asarray(record.response_logprobs, dtype=np.float32),
                "reward": record.reward,
                "new_segment": record.new_segment,
            }
        )
        layout.ids.append(([k] * n, [1] * n))
    return layout


def _segment_layout(trajectory: Any) -> _SampleLayout:
    """One sample per segment (``"segment"``): its first prompt, then every action and env turn after it."""
    layout = _SampleLayout()
    for number, segment in enumerate(trajectory.segments()):
        layout.sample_of_step.update((k, number) for k in segment.steps)
        layout.samples.append(
            {
                "trajectory_id": trajectory.id,
                "step": number,
                "steps": [segment.steps.start, segment.steps.stop],
                "prompt_ids": np.asarray(segment.prompt_ids, dtype=np.int64),
                "response_ids": np.asarray(segment.response_ids, dtype=np.int64),
                "response_mask": np.asarray(segment.response_mask, dtype=np.int64),
                "logprobs": None if segment.response_logprobs is None else np.asarray(segment.response_logprobs, dtype=np.float32),
                "reward": float(sum(trajectory.steps[k].reward for k in segment.steps)),
            }
        )
        layout.ids.append((list(segment.step_index), list(segment.response_mask)))
    return layout


def _place_rewards(trajectory: Any, layout: _SampleLayout) -> tuple[list[np.ndarray], list[float]]:
    """Each sample's token rewards and its ``unplaced_reward``, as :func:`step_samples` describes them."""
    # Where each step's policy ids are: step -> (sample, position) of its first and of its last one.
    first: dict[int, tuple[int, int]] = {}
    last: dict[int, tuple[int, int]] = {}
    for s, (index, mask) in enumerate(layout.ids):
        for i, (step, m) in enumerate(zip(index, mask)):
            if m:
                first.setdefault(step, (s, i))
                last[step] = (s, i)
    rewards = [np.zeros(len(index), dtype=np.float32) for index, _ in layout.ids]
    unplaced = [0.0] * len(layout.samples)
    for k, record in enumerate(trajectory.steps):
        where: tuple[int, int] | None
        if k in last:
            where = last[k]
        else:  # an empty action: the nearest policy id before it, else after it
            before = [j for j in last if j < k]
            after = [j for j in first if j > k]
            where = last[max(before)] if before else first[min(after)] if after else None
        if where is None:  # no policy id in the whole trajectory
            unplaced[layout.sample_of_step[k]] += record.reward
        else:
            rewards[where[0]][where[1]] += record.reward
    return rewards, unplaced


def step_samples(trajectory: Any, kind: str = "segment") -> list[dict[str, Any]]:
    """A step-mode trajectory's training samples, as carried in ``extra_fields[STEPS_KEY]``.

    ``"segment"``: one sample per segment (:meth:`agent_gym.trajectory.Trajectory.segments`): prompt = the
    segment's first prompt, response = every id after it with ``response_mask`` 1 on the policy's ids and
    0 on the env's, log-probs 0.0 on env ids. An append-only episode is one sample, the concat-mode one;
    the trainer's cost is linear in the episode's length, not quadratic.

    ``"step"``: one sample per env step (prompt = the step's whole context, response = its action, the
    step's ``reward``), Agent-R1's step-level layout, kept for comparison.

    Either way ``token_rewards`` holds each step's reward on that step's last action id. A step whose
    action is empty (the policy generated no id) has no id of its own: its reward goes on the last policy
    id before it in the trajectory (the previous action's last id, in this sample or an earlier one), or,
    when no policy id precedes it, on the first one after it, so both layouts give the trajectory the same
    token rewards. Only a trajectory without any policy id keeps its rewards in ``unplaced_reward`` (the
    expansion puts them where verl puts the score of an empty response: counted in the trajectory's
    return, on no trained token).
    """
    return samples_and_layout(trajectory, kind)[0]


def samples_and_layout(trajectory: Any, kind: str = "segment") -> tuple[list[dict[str, Any]], list[tuple[list[int], list[int]]]]:
    """:func:`step_samples` and, per sample, the trajectory step of each response id (a position in
    ``trajectory.steps``) and whether the policy generated it (1) or the env (0).

    Raises:
        ValueError: an unknown ``kind``.
    """
    if kind not in SAMPLE_KINDS:
        raise ValueError(f"sample kind must be one of {SAMPLE_KINDS}, got {kind!r}")
    layout = _step_layout(trajectory) if kind == "step" else _segment_layout(trajectory)
    rewards, unplaced = _place_rewards(trajectory, layout)
    for sample, token_rewards, left in zip(layout.samples, rewards, unplaced):
        sample["token_rewards"] = token_rewards
        sample["unplaced_reward"] = left
    return layout.samples, layout.ids
