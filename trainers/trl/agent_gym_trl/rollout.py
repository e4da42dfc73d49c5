"""A ``rollout_func`` for TRL's ``GRPOTrainer`` that plays agent-r1-gym episodes, multi-turn included.

    from trl import GRPOConfig, GRPOTrainer
    from agent_gym_trl import EnvRollout, env_dataset, env_reward

    trainer = GRPOTrainer(model, reward_funcs=env_reward, args=GRPOConfig(...),
                          train_dataset=env_dataset("AgentR1/GSM8KTool-v0", split="train"),
                          rollout_func=EnvRollout())
    trainer.train()

For every prompt TRL hands over (its sampler has already repeated each dataset row ``num_generations``
times), :class:`EnvRollout` plays one episode of the row's env and task through the episode engine
(:func:`agent_gym.rollout.episode.play_episode`), all episodes of the batch at once on one event loop. The
turns of the episodes waiting for tokens are generated together, one call of TRL's own generation backend
per round (``GRPOTrainer._generate_single_turn``: its vLLM server or colocated engine when ``use_vllm``,
else transformers generation with the trainer's current weights), so the policy that samples is the policy
being trained, with the trainer's sampling settings.

Each episode becomes one sample, built from :meth:`agent_gym.trajectory.Trajectory.sequence`:
``prompt_ids`` is the env's first prompt, ``completion_ids`` everything after it (every action and every
env reply in between, the exact ids the policy saw: nothing is re-tokenized), ``env_mask`` 1 on the
policy's ids and 0 on the env's (TRL multiplies its loss mask by it), ``logprobs`` the sampling log-probs
(0.0 on env ids; ``None`` from transformers generation, which reports none). ``env_return`` (the episode's
return) and ``env_info`` (the last step's info) reach the reward functions; :func:`env_reward` returns the
former. The env's counters (turns, tool calls, tool errors, format errors, correctness, truncation) are
logged as TRL metrics under ``env/``.

A sample's completion holds at most ``max_completion_tokens`` ids (default: the trainer's
``max_completion_length``): a turn gets the tokens left of that budget, an episode that has used them up
stops (``EndEpisode``) with the return it has earned so far, and TRL's ``mask_truncated_completions``
sees such a sample as truncated (it does not end on an end-of-turn id).

Requires an env that appends to its context (every env but the games with ``context="last_k"`` or
``"board"``): TRL trains one sequence per sample.
"""

from __future__ import annotations

import asyncio
import json
import math
import warnings
from collections import defaultdict
from typing import Any, Callable, Sequence

from agent_gym.rollout.batcher import Batcher
from agent_gym.rollout.episode import EndEpisode, play_episode
from agent_gym.rollout.policy import Generation
from agent_gym.rollout.pool import EnvPool
from agent_gym.trajectory import Trajectory

from agent_gym_trl import private
from agent_gym_trl.dataset import Route, route_of

__all__ = ["EnvRollout", "env_reward", "TESTED_TRL"]

#: The TRL releases this adapter is tested with (1.14.2 and 1.16.0; 1.15.0 fails on CPU-only torch).
TESTED_TRL = private.TESTED_TRL

#: The counters of an episode's last ``info`` that are logged (``env/<name>``, mean per episode).
COUNTERS = ("tool_calls", "tool_errors", "format_errors")


def env_reward(completions: Sequence[Any] | None = None, env_return: Sequence[float] | None = None, **kwargs: Any) -> list[float]:
    """The reward function that goes with :class:`EnvRollout`: each episode's return (sum of the env's rewards).

    Pass it as ``GRPOTrainer(reward_funcs=env_reward, ...)`` (TRL logs it as ``rewards/env_reward``). Other
    reward functions can be added next to it; they receive ``env_return`` and ``env_info`` (the last
    step's info dict) as keyword arguments too.

    Raises:
        ValueError: no ``env_return`` (the trainer's ``rollout_func`` is not :class:`EnvRollout`).
    """
    if env_return is None:
        raise ValueError(
            "env_reward needs the episodes' returns: train with rollout_func=agent_gym_trl.EnvRollout() "
            "(it passes env_return to the reward functions)"
        )
    return [float(r) for r in env_return]


class EnvRollout:
    """``rollout_func(prompts, trainer)`` for ``GRPOTrainer``: one env episode per prompt (see the module docstring).

    Args:
        tokenizer: the tokenizer every env is made with; ``None``: the trainer's (``processing_class``). It
            must be the model's: the env's prompt ids are the model's input.
        policy: generate with this instead of TRL's backend: an :class:`agent_gym.rollout.Policy`
            (``generate(prompts, *, max_new_tokens)``, e.g. :class:`~agent_gym.rollout.ScriptedPolicy`) or an
            async ``(prompt_ids) -> Generation`` function. The samples are then not from the trained weights
            (unless the policy reads them): for tests, demonstrations and off-policy experiments.
        max_new_tokens: a turn's limit with ``policy`` (default: the trainer's ``max_completion_length``;
            TRL's backend always uses that).
        max_completion_tokens: the most completion ids of one sample (see the module docstring); ``None``:
            the trainer's ``max_completion_length``.
        env_kwargs: constructor arguments added to every row's (they win), e.g. ``{"max_turns": 4}``.
        log_metrics: log the ``env/`` metrics.
        on_episode: ``(trajectory, env)``, called as each episode ends, before its env plays another (write
            trajectories with a :class:`~agent_gym.trajectory.TrajectoryWriter`, inspect the env).

    Attributes:
        last_trajectories: the trajectories of the latest call, in prompt order (``metadata["route"]``
            holds the row's route, ``metadata["global_step"]`` the trainer's step).
    """

    def __init__(
        self,
        *,
        tokenizer: Any = None,
        policy: Any = None,
        max_new_tokens: int | None = None,
        max_completion_tokens: int | None = None,
        env_kwargs: dict[str, Any] | None = None,
        log_metrics: bool = True,
        on_episode: Callable[[Trajectory, Any], None] | None = None,
    ):
        if max_completion_tokens is not None and max_completion_tokens < 1:
            raise ValueError(f"max_completion_tokens must be >= 1, got {max_completion_tokens}")
        if max_new_tokens is not None and max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if policy is not None and not (hasattr(policy, "generate") or callable(policy)):
            raise TypeError(f"policy must have generate(prompts, *, max_new_tokens) or be an async function, got {policy!r}")
        self.tokenizer = tokenizer
        self.policy = policy
        self.max_new_tokens = max_new_tokens
        self.max_completion_tokens = max_completion_tokens
        self.env_kwargs = dict(env_kwargs or {})
        if "tokenizer" in self.env_kwargs:
            raise ValueError("pass the tokenizer as EnvRollout(tokenizer=...), not in env_kwargs")
        self.log_metrics = log_metrics
        self.on_episode = on_episode
        self.last_trajectories: list[Trajectory] = []
        self._pool = EnvPool()  # idle envs, reused across calls (made with the trainer's tokenizer)
        self._tokenizer: Any = None
        self._warned_stop = False

    # -- the rollout_func ----------------------------------------------------------------------------

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        """Play one episode per prompt and return what ``GRPOTrainer`` reads (see the module docstring)."""
        from agent_gym.rollout.async_runner import run_sync

        routes = [route_of(p) for p in prompts]
        if self._tokenizer is None:
            private.check(trainer)
            self._tokenizer = self._resolve_tokenizer(trainer)
        budget = self.max_completion_tokens or getattr(trainer, "max_completion_length", None)
        if not budget:
            raise ValueError("no completion budget: set GRPOConfig(max_completion_length=...) or EnvRollout(max_completion_tokens=...)")
        budget = int(budget)
        backend = self._backend(trainer)
        step = int(getattr(getattr(trainer, "state", None), "global_step", 0) or 0)
        trajectories = run_sync(lambda: self._play(routes, backend, budget, step))
        self.last_trajectories = trajectories

        samples = [self._sample(t, budget) for t in trajectories]
        per_sample = [s[3] for s in samples]
        logprobs: list[list[float]] | None = None  # TRL takes log-probs for every sample or for none
        if all(lp is not None for lp in per_sample):
            logprobs = [lp for lp in per_sample if lp is not None]
        if self.log_metrics:
            self._log(trainer, trajectories, samples)
        return {
            "prompt_ids": [s[0] for s in samples],
            "completion_ids": [s[1] for s in samples],
            "logprobs": logprobs,
            "env_mask": [s[2] for s in samples],
            "env_return": [float(t.return_) for t in trajectories],
            "env_info": [dict(t.final_info) for t in trajectories],
        }

    def close(self) -> None:
        """Close the envs kept for reuse between calls."""
        self._pool.close()

    # -- episodes --------------------------------------------------------------------------------------

    async def _play(self, routes: list[Route], backend: "_Backend", budget: int, step: int) -> list[Trajectory]:
        rounds = _Rounds(backend, live=len(routes))
        runner = asyncio.ensure_future(rounds.run())
        episodes = [asyncio.ensure_future(self._episode(route, rounds, budget, step)) for route in routes]
        try:
            results = await asyncio.gather(*episodes, return_exceptions=True)
            await runner
        finally:
            if not runner.done():
                runner.cancel()
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return list(results)  # type: ignore[arg-type]

    async def _episode(self, route: Route, rounds: "_Rounds", budget: int, step: int) -> Trajectory:
        try:
            with self._pool.lease(route.env_id, {**route.env_kwargs, **self.env_kwargs}, tokenizer=self._tokenizer) as env:
                if not hasattr(env.unwrapped, "template"):
                    raise TypeError(f"{route.env_id} is not an agent-r1-gym env (no chat template)")
                trajectory = await play_episode(
                    env,
                    self._generate_fn(env, rounds, budget),
                    task_id=route.task_id,
                    env_id=route.env_id,
                    metadata={"route": json.loads(route.to_json()), "global_step": step},
                )
                if self.on_episode is not None:
                    self.on_episode(trajectory, env)
                return trajectory
        finally:
            rounds.finished()

    @staticmethod
    def _generate_fn(env: Any, rounds: "_Rounds", budget: int) -> Callable[[list[int]], Any]:
        """The episode's ``generate``: a turn from the round, cut after its first stop id and to what the
        sample's completion budget leaves; ``EndEpisode`` once the budget is spent."""
        stop_ids = set(env.unwrapped.template.end_of_turn_ids) | set(rounds.backend.stop_ids)
        first: list[int] = []

        async def generate(prompt_ids: list[int]) -> Generation:
            if not first:
                first.append(len(prompt_ids))
            left = budget - (len(prompt_ids) - first[0])
            if left <= 0:
                raise EndEpisode("max_completion_tokens")
            generation = await rounds.generate(prompt_ids)
            return _cut(generation, stop_ids, left)

        return generate

    def _sample(self, trajectory: Trajectory, budget: int) -> tuple[list[int], list[int], list[int], list[float] | None]:
        try:
            segment = trajectory.sequence()
        except ValueError as exc:
            raise ValueError(
                f"{trajectory.env_id} (task {trajectory.task_id}): {exc}. TRL trains one sequence per sample: use "
                "an env that appends to its context (the games with context='full'), or the verl adapter's step "
                "mode for envs that rewrite it"
            ) from None
        # Generations were cut to the budget; only the env's reply after a stopped episode (the tail) can
        # reach past it, and it is masked out anyway.
        completion = segment.response_ids[:budget]
        mask = segment.response_mask[:budget]
        logprobs = None if segment.response_logprobs is None else segment.response_logprobs[:budget]
        return list(segment.prompt_ids), list(completion), list(mask), logprobs

    # -- generation backends -------------------------------------------------------------------------

    def _resolve_tokenizer(self, trainer: Any) -> Any:
        if self.tokenizer is not None:
            from agent_gym.models import load_tokenizer

            return load_tokenizer(self.tokenizer)
        tokenizer = getattr(trainer, "processing_class", None)
        if tokenizer is None:
            raise ValueError("the trainer has no tokenizer (processing_class); pass EnvRollout(tokenizer=...)")
        return getattr(tokenizer, "tokenizer", tokenizer)  # a processor's tokenizer

    def _backend(self, trainer: Any) -> "_Backend":
        if self.policy is not None:
            return _PolicyBackend(self.policy, self.max_new_tokens or int(trainer.max_completion_length))
        backend = _TRLBackend(trainer)
        if not self._warned_stop:
            self._warned_stop = True
            from agent_gym.chat.template import ChatTemplate

            end = set(ChatTemplate(self._tokenizer).end_of_turn_ids)
            if not end <= set(backend.stop_ids):
                warnings.warn(
                    f"the trainer stops generating at ids {sorted(backend.stop_ids)} but the env's turns end with "
                    f"{sorted(end)}: every turn runs to max_completion_length before it is cut after its end of "
                    "turn; set model.generation_config.eos_token_id to the end-of-turn id",
                    stacklevel=3,
                )
        return backend

    # -- metrics ---------------------------------------------------------------------------------------

    def _log(self, trainer: Any, trajectories: list[Trajectory], samples: list[Any]) -> None:
        log = private.metric_logger(trainer)
        by_env: dict[str, list[int]] = defaultdict(list)
        for k, t in enumerate(trajectories):
            by_env[t.env_id].append(k)
        groups: list[tuple[str, list[Trajectory], list[Any]]] = [("env", trajectories, samples)]
        if len(by_env) > 1:  # a mixed run: each env's own figures too
            for env_id, rows in sorted(by_env.items()):
                groups.append((f"env/{env_id}", [trajectories[k] for k in rows], [samples[k] for k in rows]))
        for prefix, group, group_samples in groups:
            for name, value in _episode_metrics(group, group_samples).items():
                log(f"{prefix}/{name}", value)


def _episode_metrics(trajectories: list[Trajectory], samples: list[Any]) -> dict[str, float]:
    n = len(trajectories)
    finals = [t.final_info for t in trajectories]
    out = {
        "return": math.fsum(t.return_ for t in trajectories) / n,
        "correct": sum(1 for i in finals if i.get("correct") is True) / n,
        "turns": sum(len(t.steps) for t in trajectories) / n,
    }
    for name in COUNTERS:
        out[name] = sum(float(i.get(name, 0) or 0) for i in finals) / n
    out["truncated"] = sum(1 for t in trajectories if t.metadata.get("truncated_reason") is not None) / n
    out["stopped_by_budget"] = sum(1 for t in trajectories if t.metadata.get("truncated_reason") == "max_completion_tokens") / n
    out["env_tokens"] = sum(len(s[2]) - sum(s[2]) for s in samples) / n
    out["env_seconds"] = math.fsum(float(t.metadata.get("env_s", 0.0)) for t in trajectories) / n
    return out


def _cut(generation: Generation, stop_ids: set[int], limit: int) -> Generation:
    """``generation`` up to and including its first stop id, and at most ``limit`` ids."""
    ids = list(generation.ids)
    end = next((k + 1 for k, t in enumerate(ids) if t in stop_ids), None)
    finish = "stop" if end is not None else "length"
    end = len(ids) if end is None else end
    if end > limit:
        end, finish = limit, "length"
    if end == len(ids) and finish == generation.finish_reason:
        return generation
    logprobs = None if generation.logprobs is None else list(generation.logprobs[:end])
    return Generation(ids=ids[:end], logprobs=logprobs, finish_reason=finish)


class _Backend:
    """Generates one round: a batch of prompts, one continuation each."""

    stop_ids: Sequence[int] = ()
    #: whether every process must call ``generate`` in the same rounds with as many prompts (collectives).
    collective = False

    def generate(self, prompts: list[list[int]]) -> list[Generation]:
        raise NotImplementedError

    def round_size(self, local: int) -> int:
        return local


class _TRLBackend(_Backend):
    """TRL's own generation (``GRPOTrainer._generate_single_turn``), the call its multi-turn tool loop makes."""

    def __init__(self, trainer: Any):
        self.trainer = trainer
        self._generate = private.single_turn_generator(trainer)
        self.stop_ids = [int(t) for t in getattr(trainer, "eos_token_ids", []) or []]
        accelerator = getattr(trainer, "accelerator", None)
        # With several processes TRL's backends are collectives (vLLM server mode gathers every process's
        # prompts and hands back equal slices; ZeRO-3 and tensor parallelism need every rank to generate),
        # so every process generates in the same rounds with as many prompts, padding with dummies.
        self.collective = bool(accelerator is not None and accelerator.num_processes > 1)
        self._accelerator = accelerator

    def round_size(self, local: int) -> int:
        if not self.collective:
            return local
        from accelerate.utils import gather_object

        return max(int(n) for n in gather_object([local]))

    def generate(self, prompts: list[list[int]]) -> list[Generation]:
        completion_ids, logprobs = self._generate(prompts)
        out = []
        for k, ids in enumerate(completion_ids):
            ids = [int(t) for t in (ids.tolist() if hasattr(ids, "tolist") else ids)]
            lps = None if logprobs is None else [float("nan") if x is None else float(x) for x in logprobs[k]]
            if lps is not None and len(lps) != len(ids):
                lps = None
            finish = "stop" if ids and ids[-1] in self.stop_ids else "length"
            out.append(Generation(ids=ids, logprobs=lps, finish_reason=finish))
        return out


class _PolicyBackend(_Backend):
    """A user's policy: ``generate(prompts, *, max_new_tokens)`` or an async per-prompt function."""

    def __init__(self, policy: Any, max_new_tokens: int):
        self.policy = policy
        self.max_new_tokens = max_new_tokens
        self.per_prompt = not hasattr(policy, "generate")
        self.stop_ids = [int(t) for t in getattr(policy, "stop_ids", []) or []]

    def generate(self, prompts: list[list[int]]) -> list[Generation]:
        return list(self.policy.generate(prompts, max_new_tokens=self.max_new_tokens))


class _Rounds(Batcher):
    """agent_gym's one :class:`~agent_gym.rollout.batcher.Batcher`, in rounds over a generation backend.

    A round starts when every live episode is waiting for tokens (the others are done), so a batch holds
    one turn of each episode still playing. With a collective backend each process pads its round to the
    largest round of any process, and keeps joining rounds (with dummies only) until no process has an
    episode left. A failed round fails the rollout (``fail_fast``): a trainer step cannot go on without
    its samples. A per-prompt async policy is awaited directly (it batches by itself).
    """

    def __init__(self, backend: _Backend, *, live: int):
        super().__init__(
            backend.generate,
            lockstep=True,
            live=live,
            round_size=backend.round_size if backend.collective else None,
            fail_fast=True,
        )
        self.backend = backend

    async def generate(self, prompt: list[int], slot: int = 0) -> Generation:
        if isinstance(self.backend, _PolicyBackend) and self.backend.per_prompt:
            generation: Generation = await self.backend.policy(prompt)
            return generation
        return await super().generate(prompt, slot)
