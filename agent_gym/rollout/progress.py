"""What the episode runners share: the result type, the episode plan, the progress bar."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from agent_gym.trajectory import Trajectory

__all__ = ["RolloutResult", "TurnEstimate", "plan_episodes", "progress_bar"]


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


class TurnEstimate:
    """The time left of a run, from the turns played rather than the episodes finished.

    Batched episodes finish together at the end of their batch (and the short ones first), so the
    rate of finished episodes says little until the end: after the first one it predicts many times
    the real run. Turns are finished all along. The estimate is ``elapsed / turns played * turns
    left``, with the turns an episode takes guessed as the mean over the episodes started so far, a
    running one counted as the turns it has played plus one (it takes at least one more); a running
    episode already past that mean is guessed to take one more turn. That guess grows as episodes run
    longer, so the estimate errs short, never by the factors of the episode rate. It is ``None``
    (shown as ``?``) until an episode has finished: before that nothing says how long one is.

    Args:
        episodes: the episodes of the run.
        clock: seconds, monotonic (``time.perf_counter``); the time of construction is the start.
    """

    def __init__(self, episodes: int, clock: Callable[[], float] = time.perf_counter):
        self.episodes = int(episodes)
        self.clock = clock
        self.started = clock()
        #: turns played, by running episode
        self.running: dict[int, int] = {}
        self.finished = 0
        self.finished_turns = 0

    def episode_started(self, episode: int) -> None:
        self.running[episode] = 0

    def turn_done(self, episode: int) -> None:
        self.running[episode] = self.running.get(episode, 0) + 1

    def episode_done(self, episode: int) -> None:
        self.finished_turns += self.running.pop(episode, 0)
        self.finished += 1

    @property
    def turns_done(self) -> int:
        return self.finished_turns + sum(self.running.values())

    def expected_turns(self) -> float | None:
        """The turns of the whole run as guessed now (see the class docstring); ``None`` before any
        episode has finished."""
        if not self.finished:
            return None
        started = self.finished + len(self.running)
        per_episode = (self.finished_turns + sum(k + 1 for k in self.running.values())) / started
        not_started = max(self.episodes - started, 0)
        return (self.finished_turns + sum(max(k + 1, per_episode) for k in self.running.values())
                + not_started * per_episode)

    def remaining(self) -> float | None:
        """Seconds left, by the clock; ``None`` when that is not known yet."""
        total = self.expected_turns()
        done = self.turns_done
        if total is None or done == 0:
            return None
        return max(self.clock() - self.started, 0.0) * max(total - done, 0.0) / done


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        pass

    def close(self) -> None:
        pass


#: tqdm's default layout less the rate (of episodes: as misleading as their ETA), with the remaining
#: time from a :class:`TurnEstimate`.
BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}{postfix}]"


def progress_bar(total: int, enabled: bool, estimate: TurnEstimate | None = None) -> Any:
    """A tqdm bar over ``total`` episodes on stderr (or one that draws nothing, when not
    ``enabled``); with ``estimate``, its remaining time is the estimate's (``?`` while it has none)
    instead of tqdm's, which extrapolates from the episodes finished."""
    if not enabled:
        return _NoBar()
    from tqdm.auto import tqdm

    # disable=False: asked for, so shown even where TQDM_DISABLE silences other libraries' bars.
    options: dict[str, Any] = dict(total=total, desc="episodes", unit="ep", file=sys.stderr, dynamic_ncols=True, disable=False)
    if estimate is None:
        return tqdm(**options)
    return _estimated_bar_class(tqdm)(estimate, bar_format=BAR_FORMAT, **options)


def format_remaining(seconds: float | None) -> str:
    """How the bar writes the time left: tqdm's ``mm:ss`` (``h:mm:ss``), ``?`` when unknown."""
    from tqdm import tqdm

    return "?" if seconds is None else tqdm.format_interval(seconds)


_BAR_CLASSES: dict[type, type] = {}


def _estimated_bar_class(base: type) -> type:
    """``base`` (tqdm's console or notebook bar, as ``tqdm.auto`` chose) drawing the estimate's time.

    tqdm computes its own remaining time inside ``format_meter``; a ``remaining`` entry of
    ``format_dict`` is passed through to the bar format and wins over it."""
    if base not in _BAR_CLASSES:

        class EstimatedBar(base):
            def __init__(self, estimate: TurnEstimate, *args: Any, **kwargs: Any):
                self.estimate = estimate
                super().__init__(*args, **kwargs)

            @property
            def format_dict(self) -> dict[str, Any]:
                values = super().format_dict
                estimate = getattr(self, "estimate", None)  # tqdm draws once inside __init__
                values["remaining"] = format_remaining(None if estimate is None else estimate.remaining())
                return values

        _BAR_CLASSES[base] = EstimatedBar
    return _BAR_CLASSES[base]
