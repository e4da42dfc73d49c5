"""Run many episodes of agent envs with one policy, batching generation across episodes.

The driver keeps up to ``batch_size`` episodes in flight. Each round it gathers the ``prompt_ids`` of
every active episode, asks the policy for all continuations in one ``generate`` call, steps each env
with its generated ids, and records the step. A finished episode is written out at once (so a crash
loses at most the episodes in flight) and its slot starts the next episode.
"""

from __future__ import annotations

import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence, Union

import numpy as np

from agent_gym.rollout.policy import Generation, Policy
from agent_gym.trajectory import StepRecord, Trajectory, TrajectoryWriter

__all__ = ["run_episodes", "RolloutResult"]

EnvOrFactory = Union[Any, Callable[[], Any]]


@dataclass
class RolloutResult:
    """The outcome of :func:`run_episodes`.

    Attributes:
        trajectories: the finished episodes, ordered by episode index (``metadata["episode"]``).
        generated_tokens: ids the policy generated in all steps (stop ids included).
        wall_seconds: wall time of the whole run (env steps and generation; not model loading).
    """

    trajectories: list[Trajectory] = field(default_factory=list)
    generated_tokens: int = 0
    wall_seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        """Aggregate metrics.

        Keys: ``episodes``; ``accuracy`` (mean of the final step's ``info["correct"]``, ``None`` counted
        as wrong); ``mean_reward`` (of the trajectories' outcome rewards); ``mean_turns``;
        ``tool_calls`` (total) and ``tool_calls_per_episode``; ``tool_errors``; ``format_errors``
        (totals of the env's cumulative counters on each final step); ``generated_tokens``;
        ``wall_seconds``; ``tokens_per_second`` (generated tokens per wall second).
        """
        n = len(self.trajectories)
        finals = [t.final_info for t in self.trajectories]
        tool_calls = sum(int(i.get("tool_calls", 0) or 0) for i in finals)

        def mean(values: list[float]) -> float:
            return float(sum(values) / len(values)) if values else 0.0

        return {
            "episodes": n,
            "accuracy": mean([1.0 if i.get("correct") is True else 0.0 for i in finals]),
            "mean_reward": mean([t.reward for t in self.trajectories]),
            "mean_turns": mean([float(t.num_turns) for t in self.trajectories]),
            "tool_calls": tool_calls,
            "tool_calls_per_episode": tool_calls / n if n else 0.0,
            "tool_errors": sum(int(i.get("tool_errors", 0) or 0) for i in finals),
            "format_errors": sum(int(i.get("format_errors", 0) or 0) for i in finals),
            "generated_tokens": self.generated_tokens,
            "wall_seconds": self.wall_seconds,
            "tokens_per_second": self.generated_tokens / self.wall_seconds if self.wall_seconds > 0 else 0.0,
        }


@dataclass
class _Episode:
    """An episode in flight in one slot."""

    index: int
    seed: int | None
    task_id: str | None
    obs: dict[str, Any]
    steps: list[StepRecord] = field(default_factory=list)
    finish_reasons: list[str] = field(default_factory=list)


def env_id_of(env: Any) -> str:
    """The registered id of ``env`` (its class name if it was not made by ``gym.make``).

    Reads the spec of the unwrapped env: a wrapper's ``spec`` property deep-copies the spec with its
    kwargs on first access, about a quarter of a second per env when they hold a tokenizer.
    """
    base = getattr(env, "unwrapped", env)
    spec = getattr(base, "spec", None)
    return spec.id if spec is not None else type(base).__name__


def plan_episodes(
    episodes: int | None, task_ids: Sequence[str] | None, seeds: Sequence[int] | None
) -> tuple[int, list[str] | None]:
    """Check how episodes are chosen (count, task ids, seeds); returns the count and the ids as str."""
    if task_ids is not None:
        task_ids = [str(t) for t in task_ids]
        if episodes is None:
            episodes = len(task_ids)
        if episodes > len(task_ids):
            raise ValueError(f"episodes={episodes} but only {len(task_ids)} task_ids were given")
    if episodes is None:
        raise ValueError("pass episodes= (or task_ids=)")
    if episodes < 0:
        raise ValueError(f"episodes must be >= 0, got {episodes}")
    if seeds is not None and len(seeds) < episodes:
        raise ValueError(f"episodes={episodes} but only {len(seeds)} seeds were given")
    return episodes, task_ids


def run_episodes(
    envs: EnvOrFactory | Sequence[EnvOrFactory],
    policy: Policy,
    *,
    episodes: int | None = None,
    base_seed: int = 0,
    seeds: Sequence[int] | None = None,
    task_ids: Sequence[str] | None = None,
    max_new_tokens: int = 512,
    batch_size: int = 8,
    progress: bool = True,
    writer: TrajectoryWriter | None = None,
    env_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> RolloutResult:
    """Play ``episodes`` episodes with ``policy``, up to ``batch_size`` at a time.

    Args:
        envs: one env factory (a zero-argument callable, e.g. ``lambda: gym.make(...)``), called once
            per slot; or a sequence of envs or factories, one per slot (at most ``batch_size`` used).
            Every slot must hold an env of the same kind: episodes go to whichever slot is free.
        policy: any :class:`~agent_gym.rollout.policy.Policy`; called once per round with the
            prompts of all active episodes.
        episodes: how many episodes to play; default ``len(task_ids)``.
        base_seed: episode ``i`` is reset with ``seed=base_seed + i``...
        seeds: ...or with ``seed=seeds[i]`` when given.
        task_ids: when given, episode ``i`` plays ``options={"task_id": task_ids[i]}`` (and is still
            seeded as above, which seeds nothing but the env's own randomness).
        max_new_tokens: the generation limit of each turn.
        batch_size: the most episodes in flight (and prompts per ``generate`` call).
        progress: show a tqdm bar over episodes on stderr; after every round it also shows the turns
            played, generated tokens per second and the accuracy so far.
        writer: each trajectory is written here as soon as its episode ends.
        env_id: recorded in trajectories; default: the env's ``spec.id`` (else its class name).
        metadata: extra entries for every trajectory's ``metadata`` (e.g. the policy's settings).

    Returns:
        A :class:`RolloutResult` with the trajectories in episode order. Each trajectory's
        ``metadata`` has ``episode`` (its index), ``finish_reasons`` (one per step) and ``metadata``.
    """
    episodes, task_ids = plan_episodes(episodes, task_ids, seeds)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")

    slot_envs = _make_slots(envs, min(batch_size, episodes))
    n_slots = len(slot_envs)
    if env_id is None and slot_envs:
        env_id = env_id_of(slot_envs[0])
    run_id = uuid.uuid4().hex[:8]
    extra = dict(metadata or {})
    result = RolloutResult()
    finished: list[Trajectory] = []
    bar = _progress_bar(episodes, progress)
    started = time.perf_counter()
    next_episode = 0
    turns = 0

    def start(slot: int) -> _Episode | None:
        nonlocal next_episode
        if next_episode >= episodes:
            return None
        i = next_episode
        next_episode += 1
        seed = int(seeds[i]) if seeds is not None else base_seed + i
        options = {"task_id": task_ids[i]} if task_ids is not None else None
        obs, info = slot_envs[slot].reset(seed=seed, options=options)
        return _Episode(index=i, seed=seed, task_id=info.get("task_id"), obs=obs)

    try:
        active: list[_Episode | None] = [start(s) for s in range(n_slots)]
        while any(e is not None for e in active):
            slots = [s for s, e in enumerate(active) if e is not None]
            prompts = [np.asarray(active[s].obs["prompt_ids"]).tolist() for s in slots]  # type: ignore[union-attr]
            generations = policy.generate(prompts, max_new_tokens=max_new_tokens)
            if len(generations) != len(prompts):
                raise RuntimeError(f"policy returned {len(generations)} generations for {len(prompts)} prompts")
            turns += len(prompts)
            for slot, prompt, gen in zip(slots, prompts, generations):
                episode = active[slot]
                assert episode is not None
                done = _step(slot_envs[slot], episode, prompt, gen, run_id)
                result.generated_tokens += len(gen.ids)
                if done:
                    trajectory = Trajectory(
                        id=f"{run_id}-{episode.index:06d}",
                        env_id=env_id or "",
                        task_id=episode.task_id,
                        seed=episode.seed,
                        steps=episode.steps,
                        messages=episode.obs["messages"],
                        reward=episode.steps[-1].reward,
                        metadata={"episode": episode.index, "finish_reasons": episode.finish_reasons, **extra},
                    )
                    if writer is not None:
                        writer.write(trajectory)
                    finished.append(trajectory)
                    bar.update(1)
                    # Refilled at once (in slot order) so the next round's prompts keep episode order.
                    active[slot] = start(slot)
            # Every round (one turn of each active episode), so that a long run visibly moves.
            elapsed = time.perf_counter() - started
            bar.set_postfix(
                turns=turns,
                tok_s=f"{result.generated_tokens / elapsed:.1f}" if elapsed > 0 else "-",
                acc=f"{_accuracy(finished):.3f}" if finished else "-",
                refresh=True,
            )
    finally:
        bar.close()
        result.wall_seconds = time.perf_counter() - started
    result.trajectories = sorted(finished, key=lambda t: t.metadata["episode"])
    return result


def _step(env: Any, episode: _Episode, prompt: list[int], gen: Generation, run_id: str) -> bool:
    """Step ``env`` with the generated ids and record the step; True when the episode ended."""
    obs, reward, terminated, truncated, info = env.step(np.asarray(gen.ids, dtype=np.int64))
    episode.steps.append(
        StepRecord(
            trajectory_id=f"{run_id}-{episode.index:06d}",
            step=len(episode.steps),
            prompt_ids=prompt,
            response_ids=list(gen.ids),
            response_logprobs=None if gen.logprobs is None else [float(x) for x in gen.logprobs],
            reward=float(reward),
            terminated=bool(terminated),
            truncated=bool(truncated),
            new_segment=bool(info.get("new_segment", False)),
            info=dict(info),
        )
    )
    episode.finish_reasons.append(gen.finish_reason)
    episode.obs = obs
    return bool(terminated or truncated)


def _make_slots(envs: EnvOrFactory | Sequence[EnvOrFactory], n_slots: int) -> list[Any]:
    """One env per slot, from a single factory or a sequence of envs/factories."""
    if isinstance(envs, Sequence) and not isinstance(envs, (str, bytes)):
        if n_slots and len(envs) == 0:
            raise ValueError("envs is empty")
        items = list(envs)[:n_slots]
        # Fewer envs than slots: fewer slots (an env can only play one episode at a time).
        return [e() if _is_factory(e) else e for e in items]
    if not _is_factory(envs):
        return [envs][:n_slots]  # a single env: one slot
    return [envs() for _ in range(n_slots)]


def _is_factory(obj: Any) -> bool:
    # An env has reset/step; anything else callable is a factory (a function, a class, a partial).
    return callable(obj) and not (hasattr(obj, "reset") and hasattr(obj, "step") and not isinstance(obj, type))


def _accuracy(trajectories: list[Trajectory]) -> float:
    return sum(t.final_info.get("correct") is True for t in trajectories) / len(trajectories)


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        pass

    def close(self) -> None:
        pass


def _progress_bar(total: int, enabled: bool) -> Any:
    if not enabled:
        return _NoBar()
    from tqdm.auto import tqdm

    # disable=False: asked for, so shown even where TQDM_DISABLE silences other libraries' bars.
    return tqdm(total=total, desc="episodes", unit="ep", file=sys.stderr, dynamic_ncols=True, disable=False)
