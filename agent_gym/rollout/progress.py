"""What the episode runners share: the result type, the episode plan, the progress bar."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Sequence

from agent_gym.trajectory import Trajectory

__all__ = ["RolloutResult", "plan_episodes", "progress_bar"]


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


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(total: int, enabled: bool) -> Any:
    if not enabled:
        return _NoBar()
    from tqdm.auto import tqdm

    # disable=False: asked for, so shown even where TQDM_DISABLE silences other libraries' bars.
    return tqdm(total=total, desc="episodes", unit="ep", file=sys.stderr, dynamic_ncols=True, disable=False)
