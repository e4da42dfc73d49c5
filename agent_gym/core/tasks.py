"""Task sources: a fixed list of tasks with ids, and reading any env's tasks by id, list or seed.

Every adapter that turns an env's tasks into a trainer's dataset (verl's parquet export, TRL's dataset)
reads them with :func:`env_tasks` (which goes through :func:`make_on_split` and :func:`source_tasks`), so
"the tasks of an env" means the same thing for every trainer; each adapter only formats the rows.

An env that plays the tasks of another env package (GSM8KPython plays GSM8K's) takes them through
:class:`TaskSource` by name: the providing package registers its source with
:func:`register_task_source` (an import string, from its ``agent_gym.envs`` registration function) and
the env calls :func:`make_task_source`, so no env package imports another.
"""

from __future__ import annotations

import importlib
import inspect
import json
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING, Any, Callable, Generic, Iterable, Iterator, Mapping, NamedTuple, Protocol, Sequence, TypeVar,
    runtime_checkable,
)

import numpy as np

if TYPE_CHECKING:
    from agent_gym.core.env import Grade, Turn

__all__ = [
    "EnvTasks",
    "GeneratedTaskId",
    "TaskList",
    "TaskRow",
    "TaskSource",
    "make_task_source",
    "register_task_source",
    "task_source_names",
    "env_takes",
    "env_tasks",
    "make_on_split",
    "source_tasks",
    "text_of",
]

T = TypeVar("T")
TaskT_co = TypeVar("TaskT_co", covariant=True)


@runtime_checkable
class TaskSource(Protocol[TaskT_co]):
    """The task and grading hooks of :class:`~agent_gym.core.env.AgentEnv`, as an object another env can
    delegate to: seeded draws, lookup by id, custom tasks from a dict, the grade of a final turn, and
    ``tasks`` (the finite list :func:`source_tasks` reads)."""

    @property
    def tasks(self) -> TaskList[Any]: ...

    def sample_task(self, rng: np.random.Generator) -> TaskT_co: ...

    def get_task(self, task_id: str) -> TaskT_co: ...

    def task_from_dict(self, task: Mapping[str, Any]) -> TaskT_co: ...

    def grade(self, task: Any, turn: Turn) -> Grade: ...


#: task source name -> (``"module:factory"``, the distribution that provides it)
_TASK_SOURCES: dict[str, tuple[str, str | None]] = {}


def register_task_source(name: str, entry_point: str, *, package: str | None = None) -> None:
    """Make ``make_task_source(name, **kwargs)`` call ``entry_point`` (``"module:factory"``, imported only
    then). An env package calls it from its ``agent_gym.envs`` registration function."""
    known = _TASK_SOURCES.get(name)
    if known is not None and known[0] != entry_point:
        raise ValueError(f"task source {name!r} is already registered by {known[1] or known[0]}; "
                         f"refusing to replace it with {entry_point}")
    _TASK_SOURCES[name] = (entry_point, package)


def task_source_names() -> list[str]:
    """The registered task source names."""
    return sorted(_TASK_SOURCES)


def make_task_source(name: str, *, needs: str | None = None, **kwargs: Any) -> TaskSource[Any]:
    """The task source registered as ``name``, made with ``kwargs``.

    Args:
        name: a name given to :func:`register_task_source` (``"gsm8k"``).
        needs: the distribution that provides it, for the error when it is not installed.

    Raises:
        LookupError: no source of that name is registered; the message names the registered ones and
            the distribution to install.
        TypeError: the factory returned something that is not a :class:`TaskSource`.
    """
    if name not in _TASK_SOURCES:
        fix = f"pip install {needs}" if needs else "install the env package that provides it"
        raise LookupError(f"no task source {name!r} is registered (registered: {task_source_names() or 'none'}); "
                          f"{fix} (its registration runs on import agent_gym)")
    entry_point, package = _TASK_SOURCES[name]
    module, _, attr = entry_point.partition(":")
    factory = getattr(importlib.import_module(module), attr)
    source = factory(**kwargs)
    if not isinstance(source, TaskSource):
        raise TypeError(f"task source {name!r} ({entry_point}, from {package or 'unknown'}) returned "
                        f"{type(source).__name__}, which lacks TaskSource's members")
    return source


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


class GeneratedTaskId(NamedTuple):
    """The id of a generated task, ``<split>-<variant>-<index>``: ``"train-easy-123"``, ``"test-L2-17"``.

    A generated env makes a task from its split, variant (difficulty, level) and index alone, so
    the id is the whole recipe: ``str()`` writes it and :meth:`parse` reads it back. A tuple, so
    ``split, variant, index = GeneratedTaskId.parse(...)`` unpacks it. :meth:`check` is the check
    of a split and variant that a generator or an env constructor is given.
    """

    split: str
    variant: str
    index: int  # type: ignore[assignment]  # the field shadows tuple.index (a method) on purpose: it is the id's part

    def __str__(self) -> str:
        return f"{self.split}-{self.variant}-{int(self.index)}"

    @classmethod
    def parse(
        cls,
        task_id: str,
        *,
        splits: Sequence[str],
        variants: Iterable[str],
        name: str,
        variant_name: str = "difficulty",
    ) -> GeneratedTaskId:
        """``"train-easy-123"`` -> ``GeneratedTaskId("train", "easy", 123)``.

        Args:
            task_id: the id to read.
            splits, variants: the valid values of its first and second parts.
            name: what the error calls a task (``"Countdown task"``, ``"Sokoban level"``).
            variant_name: what the error calls the second part (``"difficulty"``, ``"level"``).

        Raises:
            KeyError: not such an id; the message gives an example, the form and the valid values.
        """
        splits, variants = tuple(splits), tuple(variants)
        parts = str(task_id).split("-")
        # isascii: int() refuses some str.isdigit() characters ("²"), which would escape as ValueError.
        if (
            len(parts) == 3 and parts[0] in splits and parts[1] in variants
            and parts[2].isascii() and parts[2].isdigit()
        ):
            return cls(parts[0], parts[1], int(parts[2]))
        example = str(cls(splits[0], variants[0], 123))
        raise KeyError(
            f"no {name} with id {task_id!r}: ids look like {example!r} "
            f"(<split>-<{variant_name}>-<number>, split in {splits}, {variant_name} in {variants})"
        )

    @staticmethod
    def check(
        split: str,
        variant: Any,
        *,
        splits: Sequence[str],
        variants: Iterable[Any],
        env: str,
        variant_name: str = "difficulty",
    ) -> None:
        """``ValueError`` naming the valid values when ``variant`` or ``split`` is not one of them.

        Args:
            split, variant: what was given (the variant as the caller takes it: ``"easy"``, ``2``).
            splits, variants: the valid values.
            env: what the error calls the env (``"Countdown"``, ``"Sokoban"``).
            variant_name: what the error calls the variant (``"difficulty"``, ``"level"``).
        """
        variants = tuple(variants)
        if variant not in variants:
            raise ValueError(f"unknown {env} {variant_name} {variant!r}; known: {', '.join(map(str, variants))}")
        if split not in splits:
            raise ValueError(f"unknown split {split!r} for {env}; known: {', '.join(splits)}")


def _default_id(task: Any) -> str:
    return str(task["id"] if isinstance(task, dict) else task.id)


def env_takes(env_id: str, name: str) -> bool:
    """Whether the env registered as ``env_id`` takes the constructor argument ``name``."""
    import gymnasium as gym

    entry = gym.spec(env_id).entry_point
    cls = gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry
    if cls is None:
        return True  # no entry point: let gym.make itself say
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return True  # unreadable: let the constructor itself say
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def make_on_split(
    env_id: str,
    split: str | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    tokenizer: Any = None,
    *,
    no_split_hint: str = "give no split",
) -> Any:
    """``gym.make(env_id, tokenizer=..., split=split, **env_kwargs)`` with clear errors.

    ``no_split_hint`` ends the error for a split given to an env without splits (a command line says
    which option to drop).

    Raises:
        ValueError: an unknown env id; ``split`` given to an env without splits; ``split`` and
            ``env_kwargs["split"]`` disagreeing.
    """
    import gymnasium as gym

    from agent_gym.core.make import make_env

    # The installed env packages are registered: `import agent_gym`, which registers them, ran before
    # any module of agent_gym could (and importing the package from here would be an upward import).
    try:
        gym.spec(env_id)
    except gym.error.Error as exc:
        raise ValueError(f"unknown env id {env_id!r} ({exc}); `agent-gym list` shows the installed envs") from None
    kwargs = dict(env_kwargs or {})
    if split is not None:
        if "split" in kwargs and kwargs["split"] != split:
            raise ValueError(f"split={split!r} and env_kwargs['split']={kwargs['split']!r} disagree")
        if not env_takes(env_id, "split"):
            raise ValueError(f"{env_id} takes no split argument; {no_split_hint}")
        kwargs["split"] = split
    return make_env(env_id, tokenizer=tokenizer, **kwargs)


def source_tasks(env: Any, n: int | None = None, task_ids: Iterable[str] | None = None) -> list[Any]:
    """The tasks of ``env``'s own source, in source order.

    ``task_ids`` pick tasks by id; else a finite source (``env.tasks``) gives its first ``n`` tasks (all
    when ``n`` is None); else the source generates tasks, and these are the tasks ``reset(seed=i)`` draws
    for i in 0..n-1 (duplicates dropped), the same in any process.

    Raises:
        ValueError: ``n < 1``, or a generating source without ``n``.
    """
    base = env.unwrapped
    if n is not None and n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if task_ids is not None:
        tasks = [base.get_task(str(t)) for t in task_ids]
        return tasks[:n] if n is not None else tasks
    finite = getattr(base, "tasks", None)
    if finite is not None:
        return list(finite)[: n if n is not None else None]
    if n is None:
        name = base.spec.id if base.spec is not None else type(base).__name__
        raise ValueError(f"{name} generates its tasks (no finite env.tasks): pass n= (the tasks of seeds 0..n-1)")
    seen: set[str | None] = set()
    tasks = []
    for seed in range(n):
        base.reset(seed=seed)
        task_id = base.task_id_of(base.task)
        if task_id not in seen:
            seen.add(task_id)
            tasks.append(base.task)
    return tasks


def text_of(value: Any) -> str:
    """A message content or task field as text: ``""`` for None, JSON for dicts and lists."""
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


@dataclass(frozen=True)
class TaskRow:
    """One task of an env's source, as a trainer's dataset row needs it."""

    index: int
    """Its position in the source (seed ``index`` for a generated source, before duplicates are dropped)."""
    task: Any
    """The env's own task object."""
    task_id: str
    """The id ``reset(options={"task_id": ...})`` plays it by."""
    messages: list[dict[str, str]]
    """The chat that opens its episode: ``role`` and ``content`` (as text) of each message."""


@dataclass(frozen=True)
class EnvTasks:
    """The tasks of an env's source (:func:`env_tasks`) and what every row of them shares."""

    env_id: str
    env_kwargs: dict[str, Any]
    """The constructor arguments a trainer makes the env with (the split included, when given)."""
    tools: list[dict[str, Any]]
    """The schemas of the tools the env offers."""
    ability: str | None
    """The env's ``ability`` attribute (verl's dataset column), if it has one."""
    rows: list[TaskRow]
    dropped: str | None
    """``None``, or why there are fewer rows than asked for (seeds that drew the same task)."""


def env_tasks(
    env_id: str,
    split: str | None = None,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    n: int | None = None,
    task_ids: Iterable[str] | None = None,
    tokenizer: Any = None,
    no_split_hint: str = "give no split",
    missing_n_hint: str = "pass n= (the tasks of seeds 0..n-1)",
) -> EnvTasks:
    """The tasks of ``env_id``'s source (:func:`source_tasks`), with their ids and opening messages.

    The env is made once (:func:`make_on_split`) and closed on every path.

    Args:
        env_id: a registered env id.
        split: the env's ``split`` argument (kept in :attr:`EnvTasks.env_kwargs`); ``None``: the env's default.
        env_kwargs: the env's other constructor arguments.
        n: at most this many tasks; a generated source needs it (the distinct tasks of seeds ``0..n-1``).
        task_ids: exactly these tasks, in this order.
        tokenizer: the tokenizer the env is made with (``None``: the default model's).
        no_split_hint: ends the error for a split given to an env without splits.
        missing_n_hint: ends the error for a generated source without ``n``.

    Raises:
        ValueError: an unknown env id, a split the env does not take, a generated source without ``n``, a
            task without an id or opening messages.
    """
    kwargs = dict(env_kwargs or {})
    if split is not None:
        kwargs.setdefault("split", split)  # make_on_split refuses a disagreeing split
    env = make_on_split(env_id, split, env_kwargs, tokenizer, no_split_hint=no_split_hint)
    try:
        base = env.unwrapped
        generated = task_ids is None and getattr(base, "tasks", None) is None
        if generated and n is None:
            raise ValueError(f"{env_id} generates its tasks (no finite env.tasks): {missing_n_hint}")
        rows = [_task_row(env_id, base, index, task) for index, task in enumerate(source_tasks(env, n, task_ids))]
        dropped = None
        if generated and n is not None and len(rows) < n:
            # fewer rows than asked for: without a word, "511 rows" from n=512 reads as a lost row
            lost = n - len(rows)
            dropped = (f"{env_id}: {n} seeds drew {len(rows)} distinct tasks; {lost} duplicate"
                       f"{'s' if lost != 1 else ''} dropped (rows are the distinct tasks of seeds 0..{n - 1}; "
                       "a larger n gives more)")
        return EnvTasks(
            env_id=env_id,
            env_kwargs=kwargs,
            tools=[t.schema() for t in getattr(base, "tools", [])],
            ability=getattr(base, "ability", None),
            rows=rows,
            dropped=dropped,
        )
    finally:
        env.close()


def _task_row(env_id: str, base: Any, index: int, task: Any) -> TaskRow:
    task_id = base.task_id_of(task)
    if task_id is None:
        raise ValueError(f"{env_id}: task {index} has no id; rows name their task by id")
    messages = [{"role": str(m["role"]), "content": text_of(m.get("content"))} for m in base.initial_messages(task)]
    if not messages:
        raise ValueError(f"{env_id}: task {task_id!r} opens with no messages")
    return TaskRow(index=index, task=task, task_id=str(task_id), messages=messages)
