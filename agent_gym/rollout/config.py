"""How a rollout runs: :class:`RolloutConfig`, the settings every episode runner takes as one value.

:func:`agent_gym.rollout.run_episodes` (lockstep rounds), :func:`agent_gym.rollout.async_runner.arun_episodes`
and :func:`agent_gym.rollout.async_runner.run_episodes_concurrent` (episodes in flight on an event loop) take a
``RolloutConfig`` or the same settings as keyword arguments; a driver builds the config once and hands it
on, instead of forwarding each setting by name (a new setting is then one field here, not an argument in
every signature on the way).

Example::

    config = RolloutConfig(episodes=512, concurrency=128, max_new_tokens=256)
    result = run_episodes_concurrent(make_env, policy, config)
    again = run_episodes_concurrent(make_env, policy, config.replace(base_seed=512))
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

__all__ = ["RolloutConfig"]


@dataclass(frozen=True)
class RolloutConfig:
    """The settings of one rollout (everything but the envs, the policy and the trajectory writer).

    Attributes:
        episodes: how many episodes to play; ``None``: one per entry of ``task_ids`` (or of ``seeds``).
        base_seed: episode ``i`` is reset with ``seed=base_seed + i``...
        seeds: ...or with ``seed=seeds[i]`` when given.
        task_ids: when given, episode ``i`` plays ``options={"task_id": task_ids[i]}``.
        max_new_tokens: the generation limit of each turn.
        concurrency: episodes in flight at once (one env each).
        max_batch_size: most prompts per ``generate`` call.
        max_wait_s: how long a batch may wait for more prompts while some episodes are still stepping;
            it waits no longer than the previous ``generate`` call took.
        generate_in_thread: call ``generate`` in a worker thread (keep ``True`` for real models: the
            loop keeps stepping envs while the model runs; a scripted policy is cheaper inline).
        use_agenerate: await ``policy.agenerate`` per episode instead of batching; ``None``: when the
            policy has it.
        lockstep: batch in rounds: a batch waits until every slot has its prompt in (a slot between two
            episodes included) and lists the prompts in slot order, so every run makes the same batches.
        env_id: recorded in trajectories; ``None``: the env's ``spec.id`` (else its class name).
        metadata: extra entries for every trajectory's ``metadata``.
        progress: show a tqdm bar on stderr with the turns played, generated tokens per second and the
            accuracy of the episodes finished so far.
    """

    episodes: int | None = None
    base_seed: int = 0
    seeds: Sequence[int] | None = None
    task_ids: Sequence[str] | None = None
    max_new_tokens: int = 512
    concurrency: int = 256
    max_batch_size: int = 256
    max_wait_s: float = 0.002
    generate_in_thread: bool = True
    use_agenerate: bool | None = None
    lockstep: bool = False
    env_id: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    progress: bool = False

    def __post_init__(self) -> None:
        for name in ("max_new_tokens", "concurrency", "max_batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"RolloutConfig.{name} must be an int >= 1, got {value!r}")
        if self.episodes is not None and (isinstance(self.episodes, bool) or not isinstance(self.episodes, int) or self.episodes < 0):
            raise ValueError(f"RolloutConfig.episodes must be an int >= 0 or None, got {self.episodes!r}")
        if self.max_wait_s < 0:
            raise ValueError(f"RolloutConfig.max_wait_s must be >= 0, got {self.max_wait_s!r}")
        # tuples and a plain dict: a frozen config whose sequences cannot change under it
        if self.seeds is not None:
            object.__setattr__(self, "seeds", tuple(int(s) for s in self.seeds))
        if self.task_ids is not None:
            if isinstance(self.task_ids, str):
                raise TypeError(f"RolloutConfig.task_ids must be a sequence of ids, not the string {self.task_ids!r}")
            object.__setattr__(self, "task_ids", tuple(str(t) for t in self.task_ids))
        object.__setattr__(self, "metadata", dict(self.metadata or {}))

    def replace(self, **changes: Any) -> RolloutConfig:
        """A copy with ``changes`` (field names as keyword arguments) applied."""
        return self.of(self, changes)

    @classmethod
    def of(cls, config: RolloutConfig | None, options: Mapping[str, Any]) -> RolloutConfig:
        """``config`` (or the defaults) with ``options`` applied; an unknown option names the fields."""
        if config is not None and not isinstance(config, RolloutConfig):
            raise TypeError(f"config must be a RolloutConfig, got {type(config).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - names)
        if unknown:
            raise TypeError(f"unknown rollout setting(s) {', '.join(unknown)}; RolloutConfig has: {', '.join(sorted(names))}")
        if config is None:
            return cls(**options)
        return dataclasses.replace(config, **options) if options else config
