"""Run many episodes of agent envs with one policy, batching generation across episodes.

The driver keeps up to ``batch_size`` episodes in flight, one per slot. Each round it gathers the
``prompt_ids`` of every active episode, asks the policy for all continuations in one ``generate`` call,
and steps each env with its generated ids. A finished episode is written out at once (so a crash loses
at most the episodes in flight) and its slot starts the next episode.

Each episode is played by the one episode engine (:func:`agent_gym.rollout.episode.play_episode`); the
rounds are the lockstep mode of :func:`agent_gym.rollout.async_runner.arun_episodes`, run to
completion on an event loop of its own, so this is an ordinary blocking call.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence, Union

from agent_gym.rollout.config import RolloutConfig
from agent_gym.rollout.episode import env_id_of
from agent_gym.rollout.policy import Policy
from agent_gym.rollout.progress import RolloutResult, plan_episodes
from agent_gym.trajectory import TrajectoryWriter

__all__ = ["run_episodes", "RolloutResult", "env_id_of", "plan_episodes"]

EnvOrFactory = Union[Any, Callable[[], Any]]


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
            prompts of all active episodes, in slot order.
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
        ``metadata`` has ``episode`` (its index), ``finish_reasons`` (one per step), what
        :func:`~agent_gym.rollout.episode.play_episode` records, and ``metadata``.
    """
    from agent_gym.rollout.async_runner import arun_episodes, run_sync

    episodes, task_ids = plan_episodes(episodes, task_ids, seeds)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    slot_envs = _make_slots(envs, min(batch_size, episodes))
    if env_id is None and slot_envs:
        env_id = env_id_of(slot_envs[0])
    config = RolloutConfig(
        episodes=episodes,
        base_seed=base_seed,
        seeds=seeds,
        task_ids=task_ids,
        max_new_tokens=max_new_tokens,
        concurrency=len(slot_envs) or 1,
        max_batch_size=batch_size,
        generate_in_thread=False,
        use_agenerate=False,
        lockstep=True,
        env_id=env_id,
        metadata=metadata or {},
        progress=progress,
    )
    result = run_sync(lambda: arun_episodes(slot_envs, policy, config, writer=writer))
    return RolloutResult(
        trajectories=result.trajectories, generated_tokens=result.generated_tokens, wall_seconds=result.wall_seconds
    )


def _make_slots(envs: EnvOrFactory | Sequence[EnvOrFactory], n_slots: int) -> list[Any]:
    """One env per slot, from a single factory or a sequence of envs/factories."""
    from agent_gym.rollout.async_runner import _is_factory

    if isinstance(envs, Sequence) and not isinstance(envs, (str, bytes)):
        if n_slots and len(envs) == 0:
            raise ValueError("envs is empty")
        items = list(envs)[:n_slots]
        # Fewer envs than slots: fewer slots (an env can only play one episode at a time).
        return [e() if _is_factory(e) else e for e in items]
    if not _is_factory(envs):
        return [envs][:n_slots]  # a single env: one slot
    return [envs() for _ in range(n_slots)]
