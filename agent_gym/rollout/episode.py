"""The episode engine: play one episode of any env against any generate function.

Every driver and trainer adapter plays episodes through :func:`play_episode`: the batched CPU driver
(:func:`agent_gym.rollout.run_episodes`), the async runner (:func:`agent_gym.rollout.async_runner.arun_episodes`),
the verl agent loops, the TRL rollout function. They differ only in how they generate (a batcher in front
of a local model, a vLLM server, TRL's engine) and in how they turn the :class:`~agent_gym.trajectory.Trajectory`
into training samples (:meth:`~agent_gym.trajectory.Trajectory.segments`); the loop itself, the step
records and the no-drift bookkeeping live here once.

Example::

    async def generate(prompt_ids):               # token ids in; ids, log-probs, finish reason out
        out = await engine.generate(prompt_ids, max_tokens=256)
        return Generation(out.ids, out.logprobs, out.finish_reason)

    trajectory = await play_episode(gym.make("AgentR1/GSM8KTool-v0", tokenizer=tok), generate, task_id="test-0")
    sample = trajectory.sequence()                # prompt ids, response ids, mask, log-probs
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping

import numpy as np

from agent_gym.core.async_step import areset, astep
from agent_gym.rollout.policy import Generation
from agent_gym.trajectory import StepRecord, Trajectory

__all__ = ["EndEpisode", "GenerateFn", "play_episode", "env_id_of", "replay_metadata"]

#: ``async (prompt_ids) -> Generation``: the policy's continuation of the env's prompt ids.
GenerateFn = Callable[[list[int]], Awaitable[Generation]]


class EndEpisode(Exception):
    """Raised by a generate function to stop the episode before the env gets another action.

    For limits that belong to the caller, not to the env: a trainer's token budget for the whole
    sample, a prompt longer than the trainer accepts. The trajectory ends after the last completed step
    (whose record keeps what the env returned) with ``metadata["truncated_reason"] = reason``.
    """

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = str(reason)


def env_id_of(env: Any) -> str:
    """The registered id of ``env`` (its class name if it was not made by ``gym.make``).

    Reads the spec of the unwrapped env: a wrapper's ``spec`` property deep-copies the spec with its
    kwargs on first access, about a quarter of a second per env when they hold a tokenizer.
    """
    base = getattr(env, "unwrapped", env)
    spec = getattr(base, "spec", None)
    return spec.id if spec is not None else type(base).__name__


async def play_episode(
    env: Any,
    generate: GenerateFn,
    *,
    seed: int | None = None,
    task_id: str | None = None,
    options: Mapping[str, Any] | None = None,
    trajectory_id: str | None = None,
    env_id: str | None = None,
    max_steps: int | None = None,
    metadata: Mapping[str, Any] | None = None,
    on_step: Callable[[StepRecord, float], None] | None = None,
) -> Trajectory:
    """Reset ``env`` and play it to the end with ``generate``.

    Args:
        env: any env or wrapper stack (what ``gym.make`` returns); stepped with ``await env.astep(ids)``
            so that waiting tools never block the event loop (an env without ``astep`` steps in a thread);
            reset with ``await env.areset(...)`` when it has one (a remote session), else ``env.reset``.
        generate: ``async (prompt_ids: list[int]) -> Generation``; called once per step with the env's
            exact ``prompt_ids``. It may raise :class:`EndEpisode` to stop the episode; any other
            exception propagates (the env is then mid-episode: reset it before reuse).
        seed: passed to ``env.reset``.
        task_id: plays this task (``options={"task_id": task_id}``).
        options: other reset options (merged under ``task_id``).
        trajectory_id: the trajectory's id (default: a fresh uuid).
        env_id: recorded in the trajectory (default: the env's registered id).
        max_steps: a safety cap on steps (the env's own turn limit normally ends the episode first);
            reaching it marks the trajectory truncated with reason ``"max_steps"``.
        metadata: extra entries for the trajectory's ``metadata``.
        on_step: called after every step with its record and the seconds ``astep`` took.

    Returns:
        The :class:`~agent_gym.trajectory.Trajectory`: a :class:`~agent_gym.trajectory.StepRecord` per
        step (the prompt ids the policy saw, its ids and log-probs, reward, flags, info), the final
        messages, ``reward`` (the last step's), ``tail_ids`` (the env's last reply when the episode was
        stopped before the env ended it) and ``metadata`` with ``finish_reasons`` (one per step),
        ``truncated_reason`` (``None`` when the env ended the episode; else ``"max_steps"``, the
        :class:`EndEpisode` reason, or the env's own ``info["truncated_reason"]``), ``reset_s``,
        ``generate_s`` and ``env_s`` (seconds spent in each), what :func:`replay_metadata` records for
        an exact replay, merged with ``metadata``.
    """
    obs, reset_info, reset_s = await _reset(env, seed=seed, task_id=task_id, options=options)
    trajectory_id = trajectory_id or uuid.uuid4().hex
    played = await _play_steps(env, generate, obs, trajectory_id, max_steps=max_steps, on_step=on_step)
    steps = played.steps
    return Trajectory(
        id=trajectory_id,
        env_id=env_id or env_id_of(env),
        task_id=steps[0].info.get("task_id") if steps else reset_info.get("task_id"),
        seed=seed,
        steps=steps,
        messages=played.obs["messages"],
        reward=steps[-1].reward if steps else 0.0,
        tail_ids=_tail_ids(played),
        metadata={
            "finish_reasons": played.finish_reasons,
            "truncated_reason": _truncated_reason(played),
            "reset_s": reset_s,
            "generate_s": played.generate_s,
            "env_s": played.env_s,
            **replay_metadata(env, options),
            **dict(metadata or {}),
        },
    )


def replay_metadata(env: Any, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What :func:`agent_gym.replay` needs to make the env again: ``env_kwargs`` (the constructor
    arguments but the tokenizer, when they are JSON values; else ``env_kwargs_unrecorded`` says which is
    not), ``tokenizer`` (its ``name_or_path``) and ``reset_options`` (a task given as a dict)."""
    import json

    base = getattr(env, "unwrapped", env)
    spec = getattr(base, "spec", None)
    out: dict[str, Any] = {}
    if spec is not None:
        kwargs = {k: v for k, v in spec.kwargs.items() if k != "tokenizer"}
        try:
            json.dumps(kwargs)
            out["env_kwargs"] = kwargs
        except (TypeError, ValueError):
            out["env_kwargs_unrecorded"] = sorted(k for k, v in kwargs.items() if not _is_json(v))
    name = getattr(getattr(base, "tokenizer", None), "name_or_path", None)
    if name:
        out["tokenizer"] = str(name)
    if options and "task" in options:
        out["reset_options"] = {"task": options["task"]}
    return out


def _is_json(value: Any) -> bool:
    import json

    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError):
        return False


async def _reset(
    env: Any, *, seed: int | None, task_id: str | None, options: Mapping[str, Any] | None
) -> tuple[Any, dict[str, Any], float]:
    """Reset ``env`` on the requested task; return its observation, reset info and the seconds it took."""
    reset_options = dict(options or {})
    if task_id is not None:
        reset_options["task_id"] = str(task_id)
    started = time.perf_counter()
    # an env whose reset waits (a remote session, an agent program's first request) is awaited
    obs, reset_info = await areset(env, seed=seed, options=reset_options or None)
    return obs, reset_info, time.perf_counter() - started


@dataclass
class _Played:
    """What the step loop leaves: the records, the last observation and why it stopped early, if it did."""

    obs: Any
    steps: list[StepRecord] = field(default_factory=list)
    finish_reasons: list[str] = field(default_factory=list)
    generate_s: float = 0.0
    env_s: float = 0.0
    #: ``"max_steps"`` or an :class:`EndEpisode` reason; ``None`` when the env ended the episode.
    stopped: str | None = None


async def _play_steps(
    env: Any,
    generate: GenerateFn,
    obs: Any,
    trajectory_id: str,
    *,
    max_steps: int | None,
    on_step: Callable[[StepRecord, float], None] | None,
    before_step: Callable[[], None] | None = None,
    first_step: int = 0,
) -> _Played:
    """Generate and step from ``obs`` until the env ends the episode, ``max_steps`` or :class:`EndEpisode`.

    ``first_step`` numbers the records (a branch of a tree continues an episode that is ``first_step`` steps
    in, and ``max_steps`` counts those); ``before_step`` runs before each generation (a tree's snapshot)."""
    played = _Played(obs=obs)
    done = False
    while not done:
        if max_steps is not None and first_step + len(played.steps) >= max_steps:
            played.stopped = "max_steps"
            break
        if before_step is not None:
            before_step()
        prompt = np.asarray(played.obs["prompt_ids"]).tolist()
        started = time.perf_counter()
        try:
            generation = await generate(prompt)
        except EndEpisode as end:
            played.stopped = end.reason
            break
        finally:
            played.generate_s += time.perf_counter() - started
        started = time.perf_counter()
        played.obs, reward, terminated, truncated, info = await astep(env, np.asarray(generation.ids, dtype=np.int64))
        seconds = time.perf_counter() - started
        played.env_s += seconds
        done = bool(terminated or truncated)
        record = _step_record(trajectory_id, first_step + len(played.steps), prompt, generation, reward, terminated, truncated, info)
        played.steps.append(record)
        played.finish_reasons.append(generation.finish_reason)
        if on_step is not None:
            on_step(record, seconds)
    return played


def _step_record(
    trajectory_id: str,
    step: int,
    prompt: list[int],
    generation: Generation,
    reward: Any,
    terminated: Any,
    truncated: Any,
    info: Mapping[str, Any],
) -> StepRecord:
    """The record of one step: the prompt, the response ids the env kept, their log-probs and the env's reply."""
    # The env keeps a turn up to its first end-of-turn id and says how many ids followed it; the
    # record keeps the same ids, so that prompt + response is the next prompt's prefix.
    kept = len(generation.ids) - int(info.get("ids_after_end_of_turn", 0) or 0)
    logprobs = generation.logprobs
    return StepRecord(
        trajectory_id=trajectory_id,
        step=step,
        prompt_ids=prompt,
        response_ids=list(generation.ids)[:kept],
        response_logprobs=None if logprobs is None else [float(x) for x in list(logprobs)[:kept]],
        reward=float(reward),
        terminated=bool(terminated),
        truncated=bool(truncated),
        new_segment=bool(info.get("new_segment", False)),
        info=dict(info),
    )


def _tail_ids(played: _Played) -> list[int]:
    """The env's last reply after the last response, when the episode stopped before the env ended it."""
    steps = played.steps
    if played.stopped is None or not steps or steps[-1].new_segment:
        return []
    last = steps[-1]
    head = len(last.prompt_ids) + len(last.response_ids)
    return np.asarray(played.obs["prompt_ids"]).tolist()[head:]


def _truncated_reason(played: _Played) -> str | None:
    """Why the episode was cut short: the loop's own stop, else the env's ``info["truncated_reason"]``."""
    if played.stopped is not None:
        return played.stopped
    steps = played.steps
    if steps and steps[-1].info.get("truncated_reason"):
        return str(steps[-1].info["truncated_reason"])
    return None
