"""TRL datasets built from an env's own task source: one row per task, routed to its env.

    from agent_gym_trl import env_dataset
    train = env_dataset("AgentR1/GSM8KTool-v0", split="train")                 # every task of the split
    arith = env_dataset("AgentR1/Arithmetic-v0", n=256, env_kwargs={"level": 1})  # seeds 0..255
    mixed = datasets.concatenate_datasets([train, arith]).shuffle(seed=0)       # one run, two envs

A row has the columns

- ``prompt``: the chat the env opens the episode with (``role``/``content`` messages): what TRL logs and
  hands to reward functions as ``prompts``. The rollout never renders it: the env renders its own
  prompt ids. The last message also carries the row's route under the key ``agent_gym`` (JSON text),
  because TRL gives a ``rollout_func`` the prompts only, not the other columns;
- ``env_id``, ``task_id``, ``env_kwargs`` (JSON text, so that rows of different envs share one schema):
  the same route as plain columns, for reward functions and for reading the data.

``gym.make(env_id, **json.loads(env_kwargs)).reset(options={"task_id": task_id})`` plays the row's task;
that is what :class:`agent_gym_trl.EnvRollout` does.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

__all__ = ["ROUTE_KEY", "Route", "env_dataset", "env_rows", "route_of"]

#: The message key under which a prompt carries its route.
ROUTE_KEY = "agent_gym"


@dataclass(frozen=True)
class Route:
    """Which env and task a row plays: ``gym.make(env_id, **env_kwargs)``, reset on ``task_id``."""

    env_id: str
    task_id: str | None
    env_kwargs_json: str = "{}"

    @property
    def env_kwargs(self) -> dict[str, Any]:
        return dict(json.loads(self.env_kwargs_json))

    def to_json(self) -> str:
        return json.dumps(
            {"env_id": self.env_id, "task_id": self.task_id, "env_kwargs": json.loads(self.env_kwargs_json)},
            sort_keys=True,
        )


def _kwargs_json(env_kwargs: Mapping[str, Any] | None) -> str:
    kwargs = dict(env_kwargs or {})
    if "tokenizer" in kwargs:
        raise ValueError("env_kwargs must not hold a tokenizer: the rollout makes every env with the trainer's tokenizer")
    try:
        return json.dumps(kwargs, sort_keys=True)
    except TypeError as exc:
        raise ValueError(f"env_kwargs must be JSON values (they travel in the dataset): {exc}") from None


def route_of(prompt: Any) -> Route:
    """The route a prompt of :func:`env_dataset` carries.

    Raises:
        ValueError: the prompt is not a list of messages, or none of its messages carries a route
            (a dataset not built by :func:`env_dataset`).
    """
    if isinstance(prompt, Sequence) and not isinstance(prompt, str):
        for message in prompt:
            text = message.get(ROUTE_KEY) if isinstance(message, Mapping) else None
            if text:
                try:
                    data = json.loads(text)
                    return Route(str(data["env_id"]), None if data.get("task_id") is None else str(data["task_id"]),
                                 _kwargs_json(data.get("env_kwargs")))
                except (ValueError, KeyError, TypeError) as exc:
                    raise ValueError(f"a prompt's {ROUTE_KEY!r} entry is not a valid route ({exc}): {text!r}") from None
    shown = repr(prompt)
    shown = shown if len(shown) <= 200 else shown[:200] + "..."
    raise ValueError(
        f"prompt carries no agent_gym route: {shown}. EnvRollout plays datasets made by "
        "agent_gym_trl.env_dataset (its prompts name their env and task; TRL passes a rollout_func the "
        "prompts only)"
    )


def _accepts(env_id: str, name: str) -> bool:
    import gymnasium as gym

    entry = gym.spec(env_id).entry_point
    cls = gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry
    try:
        params = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        return True
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def env_rows(
    env_id: str,
    n: int | None = None,
    *,
    split: str | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    task_ids: Iterable[str] | None = None,
    tokenizer: Any = None,
) -> list[dict[str, Any]]:
    """The rows of :func:`env_dataset` as plain dicts (same arguments)."""
    import gymnasium as gym

    import agent_gym  # noqa: F401  (registers every installed env package)

    try:
        gym.spec(env_id)
    except gym.error.Error as exc:
        raise ValueError(f"unknown env id {env_id!r} ({exc}); `agent-gym list` shows the installed envs") from None
    kwargs = dict(env_kwargs or {})
    if split is not None:
        if "split" in kwargs and kwargs["split"] != split:
            raise ValueError(f"split={split!r} and env_kwargs['split']={kwargs['split']!r} disagree")
        if not _accepts(env_id, "split"):
            raise ValueError(f"{env_id} takes no split argument; leave split=None")
        kwargs["split"] = split
    kwargs_json = _kwargs_json(kwargs)
    if n is not None and n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    env = gym.make(env_id, tokenizer=tokenizer, **kwargs)
    try:
        base = env.unwrapped
        if task_ids is not None:
            tasks = [base.get_task(str(t)) for t in task_ids]
            if n is not None:
                tasks = tasks[:n]
        elif getattr(base, "tasks", None) is not None:
            tasks = list(base.tasks)[: n if n is not None else None]
        else:
            # A generated source (Arithmetic, Countdown, the games): the tasks seeds 0..n-1 draw, the same
            # ones `env.reset(seed=i)` gives in any process (duplicates dropped).
            if n is None:
                raise ValueError(f"{env_id} generates its tasks (no finite env.tasks): pass n= (the tasks of seeds 0..n-1)")
            tasks, seen = [], set()
            for seed in range(n):
                base.reset(seed=seed)
                task_id = base.task_id_of(base.task)
                if task_id not in seen:
                    seen.add(task_id)
                    tasks.append(base.task)
        rows = []
        for task in tasks:
            task_id = base.task_id_of(task)
            if task_id is None:
                raise ValueError(f"{env_id}: a task has no id; rows name their task by id")
            route = Route(env_id, str(task_id), kwargs_json)
            messages = [{"role": str(m["role"]), "content": _text(m.get("content")), ROUTE_KEY: None}
                        for m in base.initial_messages(task)]
            if not messages:
                raise ValueError(f"{env_id}: task {task_id!r} opens with no messages")
            messages[-1][ROUTE_KEY] = route.to_json()
            rows.append({"prompt": messages, "env_id": env_id, "task_id": str(task_id), "env_kwargs": kwargs_json})
        return rows
    finally:
        env.close()


def env_dataset(
    env_id: str,
    n: int | None = None,
    *,
    split: str | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    task_ids: Iterable[str] | None = None,
    tokenizer: Any = None,
) -> Any:
    """A ``datasets.Dataset`` of ``env_id``'s tasks for ``GRPOTrainer`` (columns: see the module docstring).

    Args:
        env_id: a registered env id (``AgentR1/...``).
        n: at most this many rows. A finite task source (GSM8K's splits) gives its first ``n`` tasks (all
            when ``None``); a generated one gives the tasks of seeds ``0..n-1`` and needs ``n``.
        split: the env's ``split`` argument (stored in the rows' env kwargs); ``None``: the env's default.
        env_kwargs: constructor arguments of the env (JSON values: ``level``, ``few_shot``, ...), stored in
            every row; the rollout makes the env with them and the trainer's tokenizer.
        task_ids: exactly these tasks (looked up by id), in this order.
        tokenizer: the tokenizer the prompt messages are built with (they only depend on it through the
            chat template's tool rendering); ``None``: the default model's.

    Raises:
        ValueError: an unknown env id, a generated source without ``n``, an env without ``split``,
            kwargs that are not JSON values.
    """
    import datasets

    rows = env_rows(env_id, n, split=split, env_kwargs=env_kwargs, task_ids=task_ids, tokenizer=tokenizer)
    return datasets.Dataset.from_list(rows, features=_features())


def _features() -> Any:
    # Fixed features, so that datasets of different envs concatenate (`datasets.concatenate_datasets`).
    from datasets import Features, Value

    message = {"role": Value("string"), "content": Value("string"), ROUTE_KEY: Value("string")}
    # `[message]`: a list of structs in every datasets version (`datasets.List` is 4.x only).
    return Features(
        {"prompt": [message], "env_id": Value("string"), "task_id": Value("string"), "env_kwargs": Value("string")}
    )
