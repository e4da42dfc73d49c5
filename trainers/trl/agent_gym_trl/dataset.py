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

import json
import warnings
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

__all__ = ["ROUTE_KEY", "DuplicateTasksDropped", "Route", "env_dataset", "env_rows", "route_of"]

#: The message key under which a prompt carries its route.
ROUTE_KEY = "agent_gym"


class DuplicateTasksDropped(UserWarning):
    """A generated source's seeds ``0..n-1`` drew some task twice: the rows are its distinct tasks, fewer than ``n``."""


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


def env_rows(
    env_id: str,
    n: int | None = None,
    *,
    split: str | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    task_ids: Iterable[str] | None = None,
    tokenizer: Any = None,
) -> list[dict[str, Any]]:
    """The rows of :func:`env_dataset` as plain dicts (same arguments, same warning)."""
    rows, dropped = _rows(env_id, n, split, env_kwargs, task_ids, tokenizer)
    if dropped:
        warnings.warn(dropped, DuplicateTasksDropped, stacklevel=2)
    return rows


def _rows(env_id, n, split, env_kwargs, task_ids, tokenizer) -> tuple[list[dict[str, Any]], str | None]:
    # The rows, and what was dropped (None: nothing): the public functions warn, so the warning names their caller.
    from agent_gym.core.tasks import env_tasks

    _kwargs_json(env_kwargs)  # kwargs that are not JSON values are refused before the env is made
    source = env_tasks(env_id, split, env_kwargs=env_kwargs, n=n, task_ids=task_ids, tokenizer=tokenizer)
    kwargs_json = _kwargs_json(source.env_kwargs)
    rows = []
    for row in source.rows:
        route = Route(env_id, row.task_id, kwargs_json)
        messages: list[dict[str, Any]] = [{**m, ROUTE_KEY: None} for m in row.messages]
        messages[-1][ROUTE_KEY] = route.to_json()
        rows.append({"prompt": messages, "env_id": env_id, "task_id": row.task_id, "env_kwargs": kwargs_json})
    return rows, source.dropped


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
            when ``None``); a generated one gives the distinct tasks of seeds ``0..n-1`` and needs ``n``.
        split: the env's ``split`` argument (stored in the rows' env kwargs); ``None``: the env's default.
        env_kwargs: constructor arguments of the env (JSON values: ``level``, ``few_shot``, ...), stored in
            every row; the rollout makes the env with them and the trainer's tokenizer.
        task_ids: exactly these tasks (looked up by id), in this order.
        tokenizer: the tokenizer the prompt messages are built with (they only depend on it through the
            chat template's tool rendering); ``None``: the default model's.

    Raises:
        ValueError: an unknown env id, a generated source without ``n``, an env without ``split``,
            kwargs that are not JSON values.

    Warns:
        DuplicateTasksDropped: seeds ``0..n-1`` of a generated source drew some task more than once, so
            there are fewer than ``n`` rows ("512 seeds drew 511 distinct tasks; 1 duplicate dropped").
    """
    import datasets

    rows, dropped = _rows(env_id, n, split, env_kwargs, task_ids, tokenizer)
    if dropped:
        warnings.warn(dropped, DuplicateTasksDropped, stacklevel=2)
    return datasets.Dataset.from_list(rows, features=_features())


def _features() -> Any:
    # Fixed features, so that datasets of different envs concatenate (`datasets.concatenate_datasets`).
    from datasets import Features, Value

    message = {"role": Value("string"), "content": Value("string"), ROUTE_KEY: Value("string")}
    # `[message]`: a list of structs in every datasets version (`datasets.List` is 4.x only).
    return Features(
        {"prompt": [message], "env_id": Value("string"), "task_id": Value("string"), "env_kwargs": Value("string")}
    )
