"""Exact replay: play a recorded episode's actions again and report the first step that differs.

A trajectory records what the episode's env was made with (``metadata["env_kwargs"]``, the tokenizer,
the task: :func:`agent_gym.rollout.episode.replay_metadata`) and every step's prompt ids, action, reward
and ``info``. :func:`replay` makes the env again, resets it on the same task and seed, checks each
step's prompt ids before the step and its reward, flags and ``info`` after it, and stops at the first
difference: a regression check after a change to an env, a template or a tool.

With ``tools="recorded"`` the tools do not run: every call is answered with what the recording says it
answered (``info["tool_outputs"]``, ``info["tool_results"]``), a cassette for re-scoring and for tests
without sandboxes or MCP servers.

    reports = agent_gym.replay("runs/x.jsonl")                 # or a Trajectory, or a list of them
    print([r.line() for r in reports])
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping, Sequence


from agent_gym.tools.executor import ToolExecutor, ToolResult
from agent_gym.rollout.episode import EndEpisode, play_episode
from agent_gym.rollout.policy import Generation
from agent_gym.trajectory import StepRecord, Trajectory, read_trajectories, to_jsonable

__all__ = ["Difference", "ReplayReport", "RecordedTools", "replay"]

#: ``info`` keys that are measurements of the run, not of the env's behaviour.
VOLATILE_INFO = frozenset({"tool_seconds", "step_seconds"})


@dataclass(frozen=True)
class Difference:
    """The first thing a replayed step did differently."""

    step: int
    what: str
    """``"prompt_ids"``, ``"reward"``, ``"terminated"``, ``"truncated"``, ``"info[KEY]"`` or ``"steps"``."""
    recorded: Any
    replayed: Any

    def describe(self) -> str:
        if self.what == "prompt_ids":
            rec, rep = list(self.recorded), list(self.replayed)
            at = next((i for i, (a, b) in enumerate(zip(rec, rep)) if a != b), min(len(rec), len(rep)))
            return (f"step {self.step}: prompt_ids differ at position {at} of {len(rec)} recorded / {len(rep)} replayed "
                    f"(recorded {rec[at:at + 8]}, replayed {rep[at:at + 8]})")
        return f"step {self.step}: {self.what} recorded {_short(self.recorded)}, replayed {_short(self.replayed)}"


def _short(value: Any, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class ReplayReport:
    """The outcome of replaying one trajectory."""

    trajectory_id: str
    env_id: str
    task_id: str | None
    steps: int
    """How many recorded steps were replayed (all of them when ``matched``)."""
    difference: Difference | None
    """The first difference, ``None`` when every step matched."""

    @property
    def matched(self) -> bool:
        return self.difference is None

    def line(self) -> str:
        """One line for a terminal: ``<id> <env> task <task>: matched (N steps)`` or where it diverged."""
        head = f"{self.trajectory_id} {self.env_id} task {self.task_id}"
        if self.difference is None:
            return f"{head}: matched ({self.steps} steps)"
        return f"{head}: diverged at {self.difference.describe()}"


class RecordedTools(ToolExecutor):
    """A tool executor that answers each call with the recorded answer instead of running a tool.

    ``answers`` holds, for each step that called tools, its ``(tool_results, tool_outputs)`` as recorded
    in ``info``. The env's executor is copied (its tools, limits and the way it reports malformed calls
    and calls over the limit, none of which run a tool); only running a tool is replaced. A call that
    was not recorded gets an error result of kind ``"not_recorded"`` (it shows up as a difference).
    """

    def __init__(self, base: ToolExecutor, answers: Sequence[tuple[list[str], list[str]]]):
        self.__dict__.update(base.__dict__)  # the env's tools and limits, as its executor has them
        self._answers = list(answers)
        self._turn = -1
        self._index: dict[str, int] = {}

    def _start_turn(self, parsed: Any) -> None:
        self._turn += 1
        self._index = {call.id: i for i, call in enumerate(parsed.calls)}

    def _recorded(self, call: Any) -> ToolResult:
        kinds, outputs = self._answers[self._turn] if self._turn < len(self._answers) else ([], [])
        i = self._index.get(call.id, len(outputs))
        if i >= len(outputs):
            return self._result(call.id, call.name, "Error: no recorded answer for this call", "not_recorded")
        kind = kinds[i] if i < len(kinds) else "ok"
        return ToolResult(call_id=call.id, name=call.name, content=outputs[i], error_kind=None if kind == "ok" else kind)

    def execute(self, parsed: Any) -> list[ToolResult]:
        self._start_turn(parsed)
        calls = list(parsed.calls)
        return self._finish(calls, [self._recorded(c) for c in calls[: self.max_calls_per_turn]], parsed)

    async def aexecute(self, parsed: Any) -> list[ToolResult]:
        return self.execute(parsed)


def _trajectories(source: Any) -> list[Trajectory]:
    if isinstance(source, Trajectory):
        return [source]
    if isinstance(source, (str, os.PathLike)):
        return list(read_trajectories(Path(source)))
    items = list(source)
    if not all(isinstance(t, Trajectory) for t in items):
        raise TypeError("replay takes a Trajectory, a list of them, or the path of a trajectory file (.jsonl / .jsonl.gz)")
    return items


def _make_env(trajectory: Trajectory, tokenizer: Any, env_kwargs: Mapping[str, Any] | None) -> Any:
    from agent_gym.core.make import make_env
    from agent_gym.models import load_tokenizer

    meta = trajectory.metadata
    if env_kwargs is None and meta.get("env_kwargs_unrecorded"):
        raise ValueError(
            f"trajectory {trajectory.id}: its env was made with arguments that are not JSON values "
            f"({', '.join(meta['env_kwargs_unrecorded'])}), so they were not recorded; pass env_kwargs= to replay it"
        )
    kwargs = dict(meta.get("env_kwargs") or {}) if env_kwargs is None else dict(env_kwargs)
    if tokenizer is None:
        recorded = meta.get("tokenizer") or meta.get("model")
        try:
            tokenizer = load_tokenizer(recorded)
        except Exception as exc:  # noqa: BLE001 - whatever fails, the fix is to name the tokenizer
            model = f" (the run's model was {meta['model']})" if meta.get("model") else ""
            first = (str(exc).strip().splitlines() or [""])[0]
            raise ValueError(
                f"trajectory {trajectory.id}: its recorded tokenizer {recorded!r} does not load here "
                f"({type(exc).__name__}: {first}); name one that does: agent-gym replay FILE --tokenizer NAME_OR_PATH{model}"
            ) from exc
    elif not hasattr(tokenizer, "encode"):
        tokenizer = load_tokenizer(tokenizer)
    return make_env(trajectory.env_id, tokenizer=tokenizer, **kwargs)


def _comparable(info: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in to_jsonable(dict(info)).items() if k not in VOLATILE_INFO}


def _first_info_difference(recorded: Mapping[str, Any], replayed: Mapping[str, Any], step: int) -> Difference | None:
    rec, rep = _comparable(recorded), _comparable(replayed)
    for key in sorted(set(rec) | set(rep)):
        if rec.get(key, "<absent>") != rep.get(key, "<absent>"):
            return Difference(step, f"info[{key!r}]", rec.get(key, "<absent>"), rep.get(key, "<absent>"))
    return None


def replay_one(
    trajectory: Trajectory,
    *,
    tools: Literal["live", "recorded"] = "live",
    tokenizer: Any = None,
    env_kwargs: Mapping[str, Any] | None = None,
) -> ReplayReport:
    """Replay one trajectory (see :func:`replay`): the episode engine plays it, with the recorded actions
    as its generate function, which checks each prompt before the step; each step's reward, flags and
    ``info`` are checked after it."""
    from agent_gym.rollout.async_runner import run_sync

    env = _make_env(trajectory, tokenizer, env_kwargs)
    try:
        meta = trajectory.metadata
        options = dict(meta.get("reset_options") or {})
        if "task" not in options and trajectory.task_id is not None:
            options["task_id"] = trajectory.task_id
        if tools == "recorded":
            answers = [(list(s.info.get("tool_results") or []), list(s.info["tool_outputs"]))
                       for s in trajectory.steps if "tool_outputs" in s.info]
            env.unwrapped.executor = RecordedTools(env.unwrapped.executor, answers)
        recorded = trajectory.steps
        found: list[Difference] = []
        played = [0]

        async def generate(prompt_ids: list[int]) -> Generation:
            k = played[0]
            if found or k >= len(recorded):  # diverged, or the recording ends here (a trainer's stop)
                raise EndEpisode("replayed")
            if list(prompt_ids) != list(recorded[k].prompt_ids):
                found.append(Difference(recorded[k].step, "prompt_ids", recorded[k].prompt_ids, list(prompt_ids)))
                raise EndEpisode("replayed")
            played[0] += 1
            return Generation(list(recorded[k].response_ids), None, "stop")

        def check(step: StepRecord, _seconds: float) -> None:
            record = recorded[step.step]
            for what, rec, rep in (("reward", record.reward, step.reward), ("terminated", record.terminated, step.terminated),
                                   ("truncated", record.truncated, step.truncated)):
                if rec != rep:
                    found.append(Difference(record.step, what, rec, rep))
                    return
            difference = _first_info_difference(record.info, step.info, record.step)
            if difference is not None:
                found.append(difference)

        replayed = run_sync(lambda: play_episode(env, generate, seed=trajectory.seed, options=options or None,
                                                 env_id=trajectory.env_id, on_step=check))
        done = len(replayed.steps)
        if not found and done < len(recorded):  # the env ended the episode before the recording did
            found.append(Difference(done - 1, "steps", len(recorded), done))
        return ReplayReport(trajectory.id, trajectory.env_id, trajectory.task_id, done, found[0] if found else None)
    finally:
        env.close()


def replay(
    source: Trajectory | Iterable[Trajectory] | str | os.PathLike[str],
    *,
    tools: Literal["live", "recorded"] = "live",
    tokenizer: Any = None,
    env_kwargs: Mapping[str, Any] | None = None,
) -> list[ReplayReport]:
    """Replay recorded episodes exactly and report, per episode, the first step that differs.

    Args:
        source: a :class:`~agent_gym.trajectory.Trajectory`, a list of them, or a trajectory file
            (``.jsonl`` or ``.jsonl.gz``, as ``agent-gym eval`` writes them).
        tools: ``"live"`` runs the tools again; ``"recorded"`` answers every tool call with the recorded
            answer (no sandbox, no MCP server, no network).
        tokenizer: the tokenizer to make the env with (default: the one recorded, else the run's model,
            else the default model's).
        env_kwargs: the env's constructor arguments (default: the recorded ones).

    Returns:
        One :class:`ReplayReport` per trajectory, in order.

    Raises:
        ValueError: a trajectory whose env arguments were not recorded (pass ``env_kwargs``), or ``tools``
            is neither ``"live"`` nor ``"recorded"``.
    """
    if tools not in ("live", "recorded"):
        raise ValueError(f"tools must be 'live' or 'recorded', got {tools!r}")
    return [replay_one(t, tools=tools, tokenizer=tokenizer, env_kwargs=env_kwargs) for t in _trajectories(source)]
