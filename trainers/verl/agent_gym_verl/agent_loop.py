"""verl agent loops that run any registered agent-gym env.

Two loops are registered (and listed in :data:`agent_gym_verl.AGENT_LOOP_CONFIG`, the file to pass as
``actor_rollout_ref.rollout.agent.agent_loop_config_path``):

``agent_gym`` (concat mode, :class:`AgentGymAgentLoop`)
    One sample per trajectory: prompt = the first observation's ``prompt_ids``; response = everything
    after it (the policy's tokens with ``response_mask`` 1, the env's appended turns with 0, log-probs
    0.0 on env tokens), cut at ``rollout.response_length``. An episode whose last action is empty ends
    its sample at its last policy token, where verl then puts the score (GAE and REINFORCE++ ignore a
    reward on an env token). Runs with stock verl. An env that rewrites
    its context (``info["new_segment"]``) cannot be concatenated: that raises :class:`ConcatModeError`.

``agent_gym_step`` (step mode, :class:`AgentGymStepAgentLoop`)
    Step-level advantages; one sample per segment (a run of steps in which the env only appended; an
    append-only episode is one sample) or, with ``agent_gym.samples=step``, one per env step
    (:func:`step_samples`). verl (0.7 and 0.9 alike) post-processes exactly one output per dataset row,
    so the loop returns the trajectory's first step as the row and carries the samples in
    ``extra_fields["agent_gym_steps"]``; :mod:`agent_gym_verl.trainer` expands the rows into them right
    after rollout, and
    :mod:`agent_gym_verl.step_advantage` computes trajectory-aware advantages. Needs that trainer
    (``python -m agent_gym_verl.main_ppo``); validation works on the un-expanded rows (one per
    trajectory, reward = the episode's return). With ``agent_gym.tree`` (:mod:`agent_gym_verl.tree`)
    a training row plays a tree of episodes instead (:func:`agent_gym.rollout.tree.play_tree`, each
    branch under a server request id of its own) and carries every trajectory's own steps with their
    tree advantages; validation rows still play one episode.

Each dataset row names its env and task: ``extra_info.env_id`` (or a top-level ``env_id`` column),
``extra_info.task_id``, and ``extra_info.env_kwargs`` (a JSON string or a dict). The loop makes the env
with the tokenizer verl hands it (``gym.make(env_id, tokenizer=self.tokenizer, **env_kwargs)``), keeps
finished envs in a per-worker pool for reuse, and plays the episode with the episode engine
(:func:`agent_gym.rollout.episode.play_episode`): tokens from verl's server manager, the env stepped with
``await env.astep(ids)`` so that waiting tools never block the event loop that all of a worker's
trajectories share. The env's return becomes ``reward_score``: no reward
function is needed.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping
from uuid import uuid4

import gymnasium as gym
import numpy as np

from agent_gym_verl import compat  # first: it runs verl's trl check before anything imports transformers
from agent_gym_verl.samples import SAMPLE_KINDS, STEPS_KEY, step_samples

from agent_gym.rollout.pool import EnvPool, PoolKey

if TYPE_CHECKING:
    from agent_gym.rollout.episode import GenerateFn
    from agent_gym.trajectory import Trajectory

logger = logging.getLogger(__name__)
logger.setLevel(os.getenv("VERL_LOGGING_LEVEL", "WARN"))

__all__ = [
    "AgentGymAgentLoop",
    "AgentGymStepAgentLoop",
    "ConcatModeError",
    "SAMPLE_KINDS",
    "STEPS_KEY",
    "step_samples",
    "tool_call_counts",
    "MAX_POOLED_ENVS",
]

#: Idle envs kept per (env id, kwargs, tokenizer) in one worker process.
MAX_POOLED_ENVS = 1024

# Idle envs by (env_id, kwargs json, id(tokenizer)): agent_gym's one env pool. Module level: shared by
# all agent-loop instances of a worker process (verl makes one agent-loop instance per sample). An env is
# in the pool only while no episode runs on it, so two trajectories never share one.
_ENV_POOL = EnvPool(max_idle=MAX_POOLED_ENVS)


def tool_call_counts(trajectory: Any) -> tuple[int, int]:
    """``(valid, answered)``: of the tool calls the env answered in ``trajectory`` (every call made
    before the last allowed turn, well-formed or not), how many parsed and ran without error.

    Read from each step's ``info["tool_results"]`` (``"ok"`` or the error kind, one per answered
    call, malformed ones included). A call on the last allowed turn ends the episode unrun
    (``truncated``): it is in neither count, so the ratio measures whether calls parse and run, not
    whether the episode ran out of turns."""
    valid = answered = 0
    for record in trajectory.steps:
        results = record.info.get("tool_results") or ()
        answered += len(results)
        valid += sum(1 for kind in results if kind == "ok")
    return valid, answered


class ConcatModeError(RuntimeError):
    """The env rewrote its context, so its trajectory is not one token sequence."""


def _as_dict(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, str):
        value = value.strip()
        return dict(json.loads(value)) if value else {}
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"env_kwargs must be a JSON object string or a mapping, got {type(value).__name__}")


def _scalar(value: Any) -> Any:
    """numpy 0-d values (verl hands row fields as numpy scalars) as plain Python values."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value.item()
    if isinstance(value, np.generic):
        return value.item()
    return value


@dataclass
class _Row:
    """The one row verl gets for an episode: its prompt, response, response mask and log-probs."""

    prompt: list[int]
    response: list[int]
    mask: list[int]
    logprobs: list[float] | None


def _first_step_row(trajectory: Trajectory) -> _Row:
    """Step mode's row: the trajectory's first step (the samples travel in ``extra_fields``)."""
    first = trajectory.steps[0]
    response = list(first.response_ids)
    logprobs = None if first.response_logprobs is None else list(first.response_logprobs)
    return _Row(list(first.prompt_ids), response, [1] * len(response), logprobs)


def _episode_fields(
    trajectory: Trajectory, *, request_id: str, env_id: str, task_id: Any, turns: int, truncated_reason: str | None
) -> dict[str, Any]:
    """The row's ``extra_fields``: the episode's ids, turns, reward components and truncation, and the
    ``reward_extra_info`` verl reports per data source in validation."""
    last_info = trajectory.final_info
    calls_valid, calls_answered = tool_call_counts(trajectory)
    components = {str(k): float(v) for k, v in (last_info.get("reward_components") or {}).items()}
    correct = last_info.get("correct")
    return {
        "agent_gym_trajectory_id": request_id,
        "agent_gym_env_id": env_id,
        "agent_gym_task_id": None if task_id is None else str(task_id),
        "agent_gym_turns": turns,
        "agent_gym_reward_components": components,
        "agent_gym_truncated_reason": truncated_reason,
        # verl puts these in non_tensor_batch and reports them per data source in validation.
        "reward_extra_info": {
            "acc": float(bool(correct)),
            "turns": float(turns),
            "tool_calls": float(last_info.get("tool_calls", 0)),
            "tool_errors": float(last_info.get("tool_errors", 0)),
            # Tool-call validity = sum(tool_calls_valid) / sum(tool_calls_answered) over episodes.
            "tool_calls_valid": float(calls_valid),
            "tool_calls_answered": float(calls_answered),
            "format_errors": float(last_info.get("format_errors", 0)),
            "truncated": float(truncated_reason is not None),
            # The answer's token F1 where the env grades one (SearchQA's info["f1"]), else its 0/1
            # correctness: every row has the key, as verl needs, and exact-match envs read the same.
            "answer_f1": float(last_info["f1"]) if isinstance(last_info.get("f1"), (int, float)) else float(bool(correct)),
        },
    }


class AgentGymAgentLoop(compat.AgentLoopBase):
    """Runs one agent-gym episode per dataset row (concat mode; see the module docstring).

    Options (keys of this loop's entry in the agent-loop config file, all optional):
        mode: ``"concat"`` (default) or ``"step"``.
        env_kwargs: default ``gym.make`` arguments for every row (a row's own ``env_kwargs`` win).
        max_steps: safety cap on env steps per episode (the env's own turn limit normally ends it).
    """

    mode = "concat"
    samples = "segment"  # how step mode cuts trajectories into samples (see step_samples)

    def __init__(self, *args: Any, mode: str | None = None, env_kwargs: Any = None, max_steps: int = 64, **kwargs: Any):
        kwargs.pop("name", None)  # the config entry's own name, passed along by hydra
        super().__init__(*args, **kwargs)
        if mode is not None:
            if mode not in ("concat", "step"):
                raise ValueError(f"agent_gym agent loop: mode must be 'concat' or 'step', got {mode!r}")
            self.mode = mode
        self.default_env_kwargs = _as_dict(env_kwargs)
        self.max_steps = int(max_steps)
        rollout = self.config.actor_rollout_ref.rollout
        self.prompt_length = int(rollout.prompt_length)
        self.response_length = int(rollout.response_length)

    # -- env management ----------------------------------------------------------------------------

    def _row_env(self, kwargs: Mapping[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any]]:
        extra = _scalar(kwargs.get("extra_info")) or {}
        if not isinstance(extra, Mapping):
            extra = {}
        env_id = _scalar(extra.get("env_id")) or _scalar(kwargs.get("env_id"))
        if not env_id:
            raise ValueError(
                "agent_gym agent loop: the dataset row names no env; put the env id in extra_info.env_id "
                "or an env_id column (agent_gym_verl.export writes both for you)"
            )
        env_kwargs = {**self.default_env_kwargs, **_as_dict(_scalar(extra.get("env_kwargs")) or _scalar(kwargs.get("env_kwargs")))}
        return str(env_id), env_kwargs, dict(extra)

    def _env_defaults(self) -> dict[str, int]:
        if self.mode == "step":
            # Every step's prompt must fit rollout.prompt_length; every action rollout.response_length.
            return {"max_action_tokens": self.response_length, "max_context_tokens": self.prompt_length}
        return {"max_action_tokens": self.response_length, "max_context_tokens": self.prompt_length + self.response_length}

    def _acquire_env(self, env_id: str, env_kwargs: dict[str, Any]) -> tuple[PoolKey, gym.Env]:
        return _ENV_POOL.acquire(env_id, {**self._env_defaults(), **env_kwargs}, tokenizer=self.tokenizer)

    def _pad_id(self) -> int:
        for value in (getattr(self.tokenizer, "pad_token_id", None), getattr(self.tokenizer, "eos_token_id", None)):
            if isinstance(value, int):
                return value
        return 0

    # -- the loop ----------------------------------------------------------------------------------

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> compat.AgentLoopOutput:
        env_id, env_kwargs, extra = self._row_env(kwargs)
        key, env = self._acquire_env(env_id, env_kwargs)
        try:
            output = await self._run_episode(env, env_id, extra, sampling_params, kwargs)
        except BaseException:
            env.close()  # state unknown: do not reuse
            raise
        _ENV_POOL.release(key, env)
        return output

    async def _run_episode(
        self, env: gym.Env, env_id: str, extra: Mapping[str, Any], sampling_params: dict[str, Any], kwargs: Mapping[str, Any]
    ) -> compat.AgentLoopOutput:
        from agent_gym.rollout.episode import play_episode

        task_id = _scalar(extra.get("task_id"))
        index = _scalar(kwargs.get("index"))
        request_id = uuid4().hex  # one per trajectory: sticky server, prefix cache
        step_mode = self.mode == "step"
        trajectory = await play_episode(
            env,
            self._generate_fn(env_id, task_id, request_id, sampling_params),
            seed=None if task_id is not None or index is None else int(index),
            task_id=None if task_id is None else str(task_id),
            trajectory_id=request_id,
            env_id=env_id,
            max_steps=self.max_steps,
        )
        if not trajectory.steps:
            raise RuntimeError(f"{env_id}: the episode made no step (max_steps={self.max_steps})")
        truncated_reason: str | None = trajectory.metadata["truncated_reason"]
        steps: list[dict[str, Any]] | None = None
        if step_mode:
            steps = step_samples(trajectory, self.samples)
            row = _first_step_row(trajectory)
        else:
            row, truncated_reason = self._concat_row(trajectory, env_id, truncated_reason)
        return self._output(
            trajectory,
            row,
            request_id=request_id,
            env_id=env_id,
            task_id=task_id,
            truncated_reason=truncated_reason,
            steps=steps,
            generate_s=trajectory.metadata["generate_s"],
            env_s=trajectory.metadata["env_s"],
        )

    def _output(
        self,
        trajectory: Trajectory,
        row: _Row,
        *,
        request_id: str,
        env_id: str,
        task_id: Any,
        truncated_reason: str | None,
        steps: list[dict[str, Any]] | None,
        generate_s: float,
        env_s: float,
        extra: Mapping[str, Any] | None = None,
    ) -> compat.AgentLoopOutput:
        """The row verl gets for ``trajectory``: ``row``'s ids, the return as ``reward_score``, the
        episode's ``extra_fields`` (:func:`_episode_fields`, the step samples, ``extra``) and timings."""
        if not row.response:
            row = self._padding_response(row)
        step_mode = self.mode == "step"
        turns = int(trajectory.final_info.get("turn", len(trajectory.steps) if step_mode else 0))
        extra_fields = _episode_fields(
            trajectory, request_id=request_id, env_id=env_id, task_id=task_id, turns=turns, truncated_reason=truncated_reason
        )
        if steps is not None:
            extra_fields[STEPS_KEY] = steps
        extra_fields.update(extra or {})
        done = trajectory.steps[-1].terminated or trajectory.steps[-1].truncated
        # verl's meaning of turns: chat turns incl. the first user turn, assistant turns and env replies.
        env_turns = len(trajectory.steps) - (1 if done else 0)
        return compat.AgentLoopOutput(
            prompt_ids=row.prompt,
            response_ids=row.response,
            response_mask=row.mask,
            response_logprobs=row.logprobs,
            reward_score=trajectory.return_,
            num_turns=1 + turns + env_turns,
            metrics=compat.make_metrics(generate_sequences=generate_s, tool_calls=env_s),
            extra_fields=extra_fields,
        )

    def _generate_fn(
        self,
        env_id: str,
        task_id: Any,
        request_id: str | Callable[[], str],
        sampling_params: dict[str, Any],
        *,
        ended: dict[str, str] | None = None,
        timer: list[float] | None = None,
    ) -> GenerateFn:
        """The episode engine's ``generate`` for one episode (or one tree): tokens from verl's server
        manager, at most the token budget each prompt leaves (step mode: every action gets
        ``rollout.response_length``; concat mode: the actions and env turns share it), and ``EndEpisode``
        once a prompt leaves none.

        Args:
            request_id: the server request id, or a function giving the calling trajectory's (a tree's
                branches generate concurrently, and vLLM refuses two running requests with one id).
            ended: filled with request id -> the ``EndEpisode`` reason, for each trajectory it stopped.
            timer: ``[seconds]``, to which each call adds its duration.
        """
        from agent_gym.rollout.episode import EndEpisode
        from agent_gym.rollout.policy import Generation

        step_mode = self.mode == "step"
        first_len: list[int] = []  # the first prompt's length, once seen

        def end(rid: str, reason: str) -> EndEpisode:
            if ended is not None:
                ended[rid] = reason
            return EndEpisode(reason)

        async def generate(prompt: list[int]) -> Generation:
            rid = request_id() if callable(request_id) else request_id
            started = time.perf_counter()
            try:
                return await generate_once(rid, prompt)
            finally:
                if timer is not None:
                    timer[0] += time.perf_counter() - started

        async def generate_once(rid: str, prompt: list[int]) -> Generation:
            if not first_len:
                if len(prompt) > self.prompt_length:
                    raise ValueError(
                        f"{env_id} task {task_id}: the first prompt has {len(prompt)} tokens, more than "
                        f"rollout.prompt_length={self.prompt_length}; raise data.max_prompt_length / "
                        "rollout.prompt_length or keep data.filter_overlong_prompts=True"
                    )
                first_len.append(len(prompt))
            if step_mode:
                # Every step is a sample of its own: its prompt must fit, its action gets the whole budget.
                if len(prompt) > self.prompt_length:
                    raise end(rid, "prompt_length")
                budget = self.response_length
            else:
                # One sample for the episode: the actions and env turns so far use up the response budget.
                budget = self.response_length - (len(prompt) - first_len[0])
                if budget <= 0:
                    raise end(rid, "response_length")
            params = dict(sampling_params)
            params["max_tokens"] = budget
            out = await self.server_manager.generate(request_id=rid, prompt_ids=prompt, sampling_params=params)
            ids, lps = compat.token_output(out)
            ids = ids[:budget]
            if lps is not None:
                lps = lps[: len(ids)]
                if len(lps) != len(ids):
                    raise ValueError(f"server returned {len(lps)} log-probs for {len(ids)} tokens")
            return Generation(ids, lps, "length" if len(ids) >= budget else "stop")

        return generate

    def _concat_row(self, trajectory: Trajectory, env_id: str, truncated_reason: str | None) -> tuple[_Row, str | None]:
        """Concat mode's row: the whole trajectory as one sequence, ended at its last policy id when the
        episode ended on empty actions, cut at ``rollout.response_length`` (which then becomes the
        truncation reason, unless the episode had one); and the truncation reason."""
        try:
            sample = trajectory.sequence()
        except ValueError as exc:
            rewrote = next((r for r in trajectory.steps[:-1] if r.new_segment), None)
            if rewrote is not None:
                raise ConcatModeError(
                    f"{env_id} rewrote its context at turn {rewrote.info.get('turn')} (info['new_segment']); a "
                    "trajectory with several segments is not one token sequence. Train this env in step "
                    "mode: agent_name=agent_gym_step (export with --mode step) and "
                    "python -m agent_gym_verl.main_ppo."
                ) from exc
            raise ConcatModeError(f"{env_id} broke the no-drift invariant: {exc}") from exc
        response, mask = sample.response_ids, sample.response_mask
        # [] (not None) for an empty response: verl stacks log-probs only if every row has them.
        logprobs = sample.response_logprobs
        if not trajectory.steps[-1].response_ids and any(mask):
            # The episode ended on empty actions, so the sample would end with the env replies they
            # answered. verl puts the score on the last response id, and its GAE and REINFORCE++ skip
            # rewards outside response_mask: the whole return would be lost. Those ids carry no loss
            # and no trained id follows them, so the sample ends at its last policy id instead.
            end = max(i for i, m in enumerate(mask) if m) + 1
            response, mask = response[:end], mask[:end]
            if logprobs is not None:
                logprobs = logprobs[:end]
        if len(response) > self.response_length:
            truncated_reason = truncated_reason or "response_length"
            response, mask = response[: self.response_length], mask[: self.response_length]
            if logprobs is not None:
                logprobs = logprobs[: self.response_length]
        return _Row(sample.prompt_ids, response, mask, logprobs), truncated_reason

    def _padding_response(self, row: _Row) -> _Row:
        """``row`` with a response of one padding id, for an episode that left its response empty."""
        # An empty generation and no env reply after it. verl 0.7 pads the response with the tokenizer,
        # which fails on an empty list: the row gets one padding id instead, outside the loss
        # (response_mask 0, log-prob 0.0), and verl puts the reward on it, as it would on the padding.
        return _Row(row.prompt, [self._pad_id()], [0], None if row.logprobs is None else [0.0])


class _TaskRequestIds:
    """One server request id per asyncio task: ``base`` for the first task that asks (a tree's root),
    ``base-1``, ``base-2``, ... for the next ones. A tree's branches play concurrently, each in a task of
    its own (:func:`agent_gym.rollout.tree.play_tree` gathers them), and vLLM refuses a request whose id
    is running already (verl 0.7 hands it the id; 0.9 does with ``rollout.full_determinism``); within a
    task the calls are sequential, so each trajectory keeps one id (and its sticky server) throughout."""

    def __init__(self, base: str):
        self.base = base
        self._ids: weakref.WeakKeyDictionary[asyncio.Task[Any], str] = weakref.WeakKeyDictionary()
        self._count = itertools.count()

    def __call__(self) -> str:
        task = asyncio.current_task()
        if task is None:
            return self.base
        rid = self._ids.get(task)
        if rid is None:
            n = next(self._count)
            rid = self._ids[task] = self.base if n == 0 else f"{self.base}-{n}"
        return rid


class AgentGymStepAgentLoop(AgentGymAgentLoop):
    """Step mode: one training sample per segment, or per env step (see the module docstring); with
    ``agent_gym.tree``, one tree of episodes per training row (:mod:`agent_gym_verl.tree`)."""

    mode = "step"

    def __init__(self, *args: Any, **kwargs: Any):
        from agent_gym_verl.tree import tree_config

        super().__init__(*args, **kwargs)
        flag = self.config.get("agent_gym", None) or {}
        self.samples = str(flag.get("samples", "segment"))
        if self.samples not in SAMPLE_KINDS:
            raise ValueError(f"agent_gym.samples must be one of {SAMPLE_KINDS}, got {self.samples!r}")
        self.tree = tree_config(flag)
        if not flag.get("step_trainer", False):
            raise RuntimeError(
                "the agent_gym_step agent loop returns one row per trajectory that only the agent-gym trainer "
                "expands into step samples; run `python -m agent_gym_verl.main_ppo ...` (with "
                "trainer.use_v1=False on verl 0.9), not verl.trainer.main_ppo, or use agent_name=agent_gym "
                "(concat mode) with stock verl"
            )

    async def _run_episode(
        self, env: gym.Env, env_id: str, extra: Mapping[str, Any], sampling_params: dict[str, Any], kwargs: Mapping[str, Any]
    ) -> compat.AgentLoopOutput:
        from agent_gym_verl.tree import VALIDATE_KEY

        if self.tree is None or bool(_scalar(kwargs.get(VALIDATE_KEY, False))):
            return await super()._run_episode(env, env_id, extra, sampling_params, kwargs)
        return await self._run_tree(env, env_id, extra, sampling_params, kwargs)

    async def _run_tree(
        self, env: gym.Env, env_id: str, extra: Mapping[str, Any], sampling_params: dict[str, Any], kwargs: Mapping[str, Any]
    ) -> compat.AgentLoopOutput:
        """One tree for the row (:mod:`agent_gym_verl.tree`): the row is the root's first step and the
        root's episode fields, ``extra_fields`` carry every trajectory's own samples and the tree's value."""
        from agent_gym.rollout.tree import play_tree
        from agent_gym_verl import tree as tree_mode

        assert self.tree is not None
        task_id = _scalar(extra.get("task_id"))
        index = _scalar(kwargs.get("index"))
        request_id = uuid4().hex
        ended: dict[str, str] = {}
        generate_s = [0.0]
        started = time.perf_counter()
        trajectories = await play_tree(
            env,
            self._generate_fn(env_id, task_id, _TaskRequestIds(request_id), sampling_params, ended=ended, timer=generate_s),
            **self.tree.play_kwargs(),
            seed=None if task_id is not None or index is None else int(index),
            task_id=None if task_id is None else str(task_id),
            env_id=env_id,
            max_steps=self.max_steps,
        )
        wall_s = time.perf_counter() - started
        root = trajectories[0]
        if not root.steps:
            raise RuntimeError(f"{env_id}: the episode made no step (max_steps={self.max_steps})")
        last = root.steps[-1]
        truncated_reason = ended.get(request_id)  # the root plays first, under the first id
        if truncated_reason is None and not (last.terminated or last.truncated):
            truncated_reason = "max_steps"
        if truncated_reason is None and last.info.get("truncated_reason"):
            truncated_reason = str(last.info["truncated_reason"])
        return self._output(
            root,
            _first_step_row(root),
            request_id=request_id,
            env_id=env_id,
            task_id=task_id,
            truncated_reason=truncated_reason,
            steps=tree_mode.tree_samples(trajectories, self.samples),
            # Branches run concurrently: the generate seconds of every call, and the rest of the wall time.
            generate_s=generate_s[0],
            env_s=max(0.0, wall_s - generate_s[0]),
            extra=tree_mode.tree_fields(trajectories),
        )


compat.register("agent_gym")(AgentGymAgentLoop)
compat.register("agent_gym_step")(AgentGymStepAgentLoop)
