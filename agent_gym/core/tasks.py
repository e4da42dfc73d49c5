"""Task sources for dataset-backed envs: a fixed list of tasks with ids."""

from __future__ import annotations

from typing import Any, Callable, Generic, Iterator, Sequence, TypeVar

import numpy as np

__all__ = ["TaskList"]

T = TypeVar("T")


class TaskList(Generic[T]):
    """An indexed list of tasks: uniform seeded sampling, lookup by id, iteration (for exports).

    Args:
        tasks: the tasks, in source order.
        id_of: how to read a task's id (default: its ``id`` attribute or key).
        name: what to call the source in error messages (e.g. ``"GSM8K test split"``).
    """

    def __init__(self, tasks: Sequence[T], *, id_of: Callable[[T], str] | None = None, name: str = "task list"):
        if not tasks:
            raise ValueError(f"{name} is empty")
        self._tasks = list(tasks)
        self._id_of = id_of or _default_id
        self.name = name
        self._index = {self._id_of(t): i for i, t in enumerate(self._tasks)}
        if len(self._index) != len(self._tasks):
            raise ValueError(f"{name} has duplicate task ids")

    def sample(self, rng: np.random.Generator) -> T:
        """A uniformly random task."""
        return self._tasks[int(rng.integers(0, len(self._tasks)))]

    def get(self, task_id: str) -> T:
        """The task with ``task_id``; ``KeyError`` naming the source and an example id otherwise."""
        try:
            return self._tasks[self._index[task_id]]
        except KeyError:
            example = self._id_of(self._tasks[0])
            raise KeyError(f"no task with id {task_id!r} in the {self.name} (ids look like {example!r})") from None

    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self) -> Iterator[T]:
        return iter(self._tasks)

    def __getitem__(self, index: int) -> T:
        return self._tasks[index]


def _default_id(task: Any) -> str:
    return str(task["id"] if isinstance(task, dict) else task.id)
